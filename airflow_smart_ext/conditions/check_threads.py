"""The check threads: a fixed number of live threads, plus a bounded budget of abandoned ones.

A blocking check (a sync ``poke``, a DB-API query) cannot be interrupted. When every waiter gives up on it
(its time limit passed, or its trigger was cancelled) the check is *abandoned*: within the budget
(``[smart_ext] max_abandoned_checks_per_connection`` per concurrency key, ``[smart_ext]
max_abandoned_checks`` in all) its thread is detached from the live pool and its key's slot is released at
once, so it takes neither a slot nor a thread from live checks; it ends on its own when its call returns.
Over the budget it keeps its slot and its live thread until it ends (threads stay bounded:
``check_threads + max_abandoned_checks`` at most). While a condition's abandoned check still runs, that
condition starts no other (``PreviousCheckStillRunning``, transient), so one hung condition holds at most
one thread.
"""

from __future__ import annotations

import collections
import itertools
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from airflow_smart_ext import compat

log = logging.getLogger(__name__)

METRIC_ABANDONED = "smart_ext.trigger.checks_abandoned"  # counter: every abandoned check
METRIC_ABANDONED_OVER_BUDGET = "smart_ext.trigger.checks_abandoned_over_budget"  # kept its slot and thread
METRIC_ABANDONED_RUNNING = "smart_ext.trigger.abandoned_checks"  # gauge: still running, in all and per key


class PreviousCheckStillRunning(TimeoutError):
    """The condition's previous check was abandoned and still runs: no second one (transient, "not yet")."""


class _Worker:
    __slots__ = ("detached",)

    def __init__(self) -> None:
        self.detached = False


class CheckThreads:
    """A thread pool whose busy threads can be detached: a detached thread finishes its one call and ends;
    it no longer counts against the live threads, so the pool starts another one for queued work."""

    def __init__(self, live_threads: int, name: str = "smart-ext-check") -> None:
        self.live_threads = live_threads
        self._name = name
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queue: collections.deque[tuple[Future[Any], Callable[[], Any]]] = collections.deque()
        self._live = 0  # started, not detached
        self._idle = 0
        self._running: dict[Future[Any], _Worker] = {}
        self._numbers = itertools.count()

    def sizes(self) -> dict[str, int]:
        """Checks running and queued, and live threads (triggers/registries.py reports them)."""
        with self._lock:
            return {"running": len(self._running), "queued": len(self._queue), "live": self._live}

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            self._queue.append((future, call))
            self._ready.notify()
            self._spawn_if_needed()
        return future

    def detach(self, future: Future[Any]) -> bool:
        """Count the thread running ``future`` out of the live threads; False when it is not running."""
        with self._lock:
            worker = self._running.get(future)
            if worker is None or worker.detached:
                return False
            worker.detached = True
            self._live -= 1
            self._spawn_if_needed()
            return True

    def _spawn_if_needed(self) -> None:
        if len(self._queue) > self._idle and self._live < self.live_threads:
            self._live += 1
            name = f"{self._name}_{next(self._numbers)}"
            threading.Thread(target=self._work, args=(_Worker(),), name=name, daemon=True).start()

    def _work(self, worker: _Worker) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    self._idle += 1
                    self._ready.wait()
                    self._idle -= 1
                future, call = self._queue.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                self._running[future] = worker
            try:
                result = call()
            except BaseException as err:  # handed to the waiter, like concurrent.futures does
                error: BaseException | None = err
            else:
                error = None
            with self._lock:
                del self._running[future]
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
            if worker.detached:  # its place among the live threads was taken when it was detached
                return


def _metric_key(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


@dataclass
class AbandonedCheck:
    key: str
    owner: str | None
    detached: bool
    since: float = field(default_factory=time.monotonic)


class AbandonedChecks:
    """The abandoned checks still running in this process (thread-safe: they end in their own threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._detached_by_key: collections.Counter[str] = collections.Counter()
        self._running_by_owner: collections.Counter[str] = collections.Counter()
        self.detached = 0

    def sizes(self) -> dict[str, int]:
        """Abandoned checks still running, and the owners and keys they count for (triggers/registries.py)."""
        with self._lock:
            return {
                "detached": self.detached,
                "owners": len(self._running_by_owner),
                "keys": len(self._detached_by_key),
            }

    def running(self, owner: str | None) -> bool:
        return owner is not None and self._running_by_owner[owner] > 0

    def add(
        self, key: str, owner: str | None, per_key: int, overall: int, detach: Callable[[], bool]
    ) -> AbandonedCheck:
        """Record an abandoned check; ``detach()`` is called when the budget allows it."""
        with self._lock:
            within = self._detached_by_key[key] < per_key and self.detached < overall
            record = AbandonedCheck(key, owner, within and detach())
            if record.detached:
                self._detached_by_key[key] += 1
                self.detached += 1
            if owner is not None:
                self._running_by_owner[owner] += 1
            on_key = self._detached_by_key[key]
            self._report(key)
        compat.locations.Stats.incr(METRIC_ABANDONED)
        if record.detached:
            log.warning(
                "a check on %s was abandoned (over its time limit or its trigger ended); its thread is "
                "detached and its slot released (%d abandoned on this key, %d in all)",
                key,
                on_key,
                self.detached,
            )
        else:
            compat.locations.Stats.incr(METRIC_ABANDONED_OVER_BUDGET)
            log.warning(
                "a check on %s was abandoned, but the abandoned-check budget is full (%d of %d on this key, "
                "%d of %d in all): it keeps its slot and its thread until it ends",
                key,
                on_key,
                per_key,
                self.detached,
                overall,
            )
        return record

    def ended(self, record: AbandonedCheck) -> None:
        with self._lock:
            if record.detached:
                self._detached_by_key[record.key] -= 1
                if self._detached_by_key[record.key] <= 0:
                    del self._detached_by_key[record.key]
                self.detached -= 1
            if record.owner is not None:
                self._running_by_owner[record.owner] -= 1
                if self._running_by_owner[record.owner] <= 0:
                    del self._running_by_owner[record.owner]
            self._report(record.key)
        log.warning("an abandoned check on %s ended after %.1fs", record.key, time.monotonic() - record.since)

    def _report(self, key: str) -> None:
        compat.locations.Stats.gauge(METRIC_ABANDONED_RUNNING, self.detached)
        compat.locations.Stats.gauge(
            f"{METRIC_ABANDONED_RUNNING}.{_metric_key(key)}", self._detached_by_key[key]
        )
