"""The sizes of every module-level registry, pool and cache our triggers keep in a triggerer process.

One list, used by the soak benchmark (sampled over hours) and by the unit test that ends waits in every way:
what grows with waits must be back to zero once no wait is left (:data:`PER_WAIT`); the rest of
:func:`sizes` (event loops, live check threads, the config cache, parsed dates, tuned loops, the LRU of
decorrelated schedules) is bounded by configuration, not by the number of waits, and is reported so a slow
growth shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TypeVar

from airflow_smart_ext import backoff
from airflow_smart_ext.conditions import runtime, sensor
from airflow_smart_ext.triggers import gc_tuning, log_lines, sharing

T = TypeVar("T")

#: Entries that exist only while a wait (or its check) does: all 0 when no wait remains.
PER_WAIT = (
    "sharing.groups",
    "sharing.subscribers",
    "sharing.subscriptions",
    "sharing.rounds_in_flight",
    "sharing.waker_due",
    "sharing.token_buckets",
    "runtime.connection_semaphores",
    "check_threads.running",
    "check_threads.queued",
    "abandoned.detached",
    "abandoned.owners",
    "abandoned.keys",
    "log_lines.queued",
)


def _per_loop(registry: Mapping[asyncio.AbstractEventLoop, T]) -> list[T]:
    """The running loop's entry (a triggerer has one loop), or every loop's when called outside one."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return list(registry.values())
    return [registry[loop]] if loop in registry else []


def sizes() -> dict[str, int]:
    """Every registry's size: of the running event loop (or all loops) and of this process."""
    registries = _per_loop(sharing._registries)
    groups = [group for registry in registries for group in registry.groups.values()]
    pool = runtime._pool
    abandoned = runtime.ABANDONED
    with abandoned._lock:
        abandoned_keys = len(abandoned._detached_by_key)
        abandoned_owners = len(abandoned._running_by_owner)
        detached = abandoned.detached
    found = {
        "sharing.groups": len(groups),
        "sharing.subscribers": sum(registry.subscriber_count for registry in registries),
        "sharing.subscriptions": sum(len(group._subscriptions) for group in groups),
        "sharing.rounds_in_flight": sum(len(group._inflight) for group in groups),
        "sharing.waker_due": sum(len(waker._due) for waker in _per_loop(sharing._wakers)),
        "sharing.token_buckets": sum(len(buckets) for buckets in _per_loop(sharing._buckets)),
        "runtime.connection_semaphores": sum(len(per_loop) for per_loop in _per_loop(runtime._semaphores)),
        "check_threads.running": len(pool._running) if pool is not None else 0,
        "check_threads.queued": len(pool._queue) if pool is not None else 0,
        "abandoned.detached": detached,
        "abandoned.owners": abandoned_owners,
        "abandoned.keys": abandoned_keys,
        "log_lines.queued": log_lines._lines.qsize(),
        "sharing.event_loops": len(set(sharing._registries) | set(sharing._wakers) | set(sharing._buckets)),
        "check_threads.live": pool._live if pool is not None else 0,
        "runtime.config_cache": len(runtime._config_cache),
        "sensor.parsed_datetimes": len(sensor._PARSED_DATETIMES),
        "gc_tuning.loops": len(gc_tuning._tuned_loops),
        "backoff.decorrelated_memo": len(backoff._DECORRELATED_MEMO),
    }
    return found


def leaks(found: dict[str, int] | None = None) -> dict[str, int]:
    """The per-wait registries that are not empty (call when no wait remains)."""
    found = sizes() if found is None else found
    return {name: found[name] for name in PER_WAIT if found[name]}
