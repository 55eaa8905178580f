"""Opt-in: CPython's full garbage collections on the deployment's schedule, not in the middle of a fan-out.

A triggerer with 10,000 live triggers tracks about a million Python objects. CPython runs a full collection
whenever enough objects have survived into its oldest generation, and each one walks all of them with the
event loop standing still (0.4–0.6 s on a 2-core machine, two to four times per 10 s while thousands of
waits end). With ``[smart_ext] triggerer_full_gc_interval = N`` (seconds; 0, the default, leaves CPython's
collector alone), the triggerer's event loop instead

* every ``FREEZE_EVERY`` seconds moves every object then alive out of the collector's reach
  (``gc.freeze()``, which costs no walk): the long-lived triggers and Airflow's wrappers are no longer walked
  by each collection;
* every N seconds hands them back (``gc.unfreeze()``) and runs one full collection, so reference cycles
  among frozen objects are reclaimed at least that often: one known pause per N seconds.

The cost: cyclic garbage that was frozen (young cycles caught by a freeze, or frozen objects that form a
cycle once dropped) lives until the next full collection: memory, at most N seconds' worth (about two
objects per ended wait in the fan-out benchmark). It is the process's collector, not a trigger's, hence
opt-in: the first ``BackoffTrigger`` on a loop starts it, and it runs for as long as that loop does
(docs/deferrable.md).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref

from airflow_smart_ext.conditions.runtime import CONFIG_SECTION, config_non_negative_float
from airflow_smart_ext.triggers import log_lines

log = logging.getLogger(__name__)

OPTION = "triggerer_full_gc_interval"
# Often, because freezing is free and what it leaves behind is what collections walk: frozen once a second,
# a fan-out of 1,000 completions per second still left ~80,000 objects a second to the oldest generation
# (50-60 ms per collection); ten times a second, the young collections stay under 20 ms.
FREEZE_EVERY = 0.1

_tuned_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def tuned_loop_count() -> int:
    """Event loops the collection schedule runs on (triggers/registries.py reports it)."""
    return len(_tuned_loops)


def full_gc_interval() -> float:
    """``[smart_ext] triggerer_full_gc_interval`` in seconds (0: off); anything else fails naming it."""
    return config_non_negative_float(OPTION, 0.0)


def start() -> None:
    """Start the schedule on the running loop, once per loop; a no-op while the option is 0."""
    loop = asyncio.get_running_loop()
    if loop in _tuned_loops:
        return
    interval = full_gc_interval()
    if not interval:
        return
    _tuned_loops.add(loop)
    log_lines.emit(  # queued, like every line a trigger writes on the loop (log_lines.py)
        log,
        "info",
        "[%s] %s = %s: objects alive are frozen every %s s, one full garbage collection every %s s",
        CONFIG_SECTION,
        OPTION,
        interval,
        FREEZE_EVERY,
        interval,
    )
    _Schedule(loop, interval).arm()


class _Schedule:
    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.loop = loop
        self.interval = interval
        self.full_due = time.monotonic() + interval

    def arm(self) -> None:
        # A timer, not a task: nothing is left pending when the loop closes.
        self.loop.call_later(min(FREEZE_EVERY, self.interval), self.tick)

    def tick(self) -> None:
        if time.monotonic() >= self.full_due:
            gc.unfreeze()
            gc.collect()
            self.full_due = time.monotonic() + self.interval
        gc.freeze()
        self.arm()
