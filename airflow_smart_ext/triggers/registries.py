"""The sizes of every module-level registry, pool and cache our triggers keep in a triggerer process.

One list, used by the soak benchmark (sampled over hours) and by the unit test that ends waits in every way:
what grows with waits must be back to zero once no wait is left (:data:`PER_WAIT`); the rest of
:func:`sizes` (event loops, live check threads, the config cache, parsed dates, tuned loops, the LRU of
decorrelated schedules) is bounded by configuration, not by the number of waits, and is reported so a slow
growth shows.
"""

from __future__ import annotations

from airflow_smart_ext import backoff
from airflow_smart_ext.conditions import runtime, sensor_poke
from airflow_smart_ext.triggers import check_groups, gc_tuning, log_lines

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


def sizes() -> dict[str, int]:
    """Every registry's size: of the running event loop (or all loops) and of this process."""
    shared = check_groups.registry_sizes()
    pool = runtime.existing_check_pool()
    threads = pool.sizes() if pool is not None else {"running": 0, "queued": 0, "live": 0}
    abandoned = runtime.ABANDONED.sizes()
    return {
        "sharing.groups": shared["groups"],
        "sharing.subscribers": shared["subscribers"],
        "sharing.subscriptions": shared["subscriptions"],
        "sharing.rounds_in_flight": shared["rounds_in_flight"],
        "sharing.waker_due": shared["waker_due"],
        "sharing.token_buckets": shared["token_buckets"],
        "runtime.connection_semaphores": runtime.connection_semaphore_count(),
        "check_threads.running": threads["running"],
        "check_threads.queued": threads["queued"],
        "abandoned.detached": abandoned["detached"],
        "abandoned.owners": abandoned["owners"],
        "abandoned.keys": abandoned["keys"],
        "log_lines.queued": log_lines.queued(),
        "sharing.event_loops": shared["event_loops"],
        "check_threads.live": threads["live"],
        "runtime.config_cache": runtime.config_cache_size(),
        "sensor.parsed_datetimes": sensor_poke.parsed_datetime_count(),
        "gc_tuning.loops": gc_tuning.tuned_loop_count(),
        "backoff.decorrelated_memo": backoff.decorrelated_memo_size(),
    }


def leaks(found: dict[str, int] | None = None) -> dict[str, int]:
    """The per-wait registries that are not empty (call when no wait remains)."""
    found = sizes() if found is None else found
    return {name: found[name] for name in PER_WAIT if found[name]}
