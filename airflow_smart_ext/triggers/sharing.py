"""In-process sharing of identical checks between ``BackoffTrigger`` instances.

Triggers whose checks have the same sharing key (``checks.sharing_key``) join one ``CheckGroup`` in the
triggerer process. A subscriber due at ``t`` reuses the group's latest observation when that check started
at or after ``t - window`` (its coalescing window), or joins a check already in flight that started in that
window; otherwise it runs a new check for the group. So a subscriber is never checked later than its own
schedule, at most ``window`` seconds earlier. Every new observation is offered to all subscribers at once:
one that is positive (or a failure) for a subscriber completes it immediately, even before its due time.

A check that raises is reported as an ``error`` outcome to the subscribers that took part in that round
only; the others keep their schedule and will run a fresh check when due.

Scope: one registry per event loop, i.e. per triggerer process (HA triggerers each share within their own
process). Works the same on Airflow 2.11 and 3.x: nothing here depends on 3.3's shared streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.triggers.checks import SharedCheck

log = logging.getLogger(__name__)

METRIC_CHECKS = "smart_ext.trigger.checks"
METRIC_CHECKS_SAVED = "smart_ext.trigger.checks_saved"
METRIC_GROUPS = "smart_ext.trigger.groups"
METRIC_SUBSCRIBERS = "smart_ext.trigger.subscribers"

# Clock and sleep hooks: tests patch these to run schedules on a virtual clock.
_clock: Callable[[], float] = time.time
_sleep: Callable[[float], Any] = asyncio.sleep


def now() -> float:
    return _clock()


def sleep(seconds: float) -> Awaitable[Any]:
    # A plain function, not a coroutine: the sleep starts at the call, not when a task wrapping it first
    # runs (a virtual clock may have moved on by then).
    return _sleep(max(0.0, seconds))


@dataclass(frozen=True)
class Observation:
    """One run of a group's shared check. ``observed_at`` is when it started (a conservative data time)."""

    seq: int
    observed_at: float
    raw: Any = None
    error: str | None = None


class CheckGroup:
    """Subscribers of one sharing key, the latest observation, and the round in flight (if any)."""

    def __init__(self, key: str, shared_check: SharedCheck, registry: SharingRegistry | None) -> None:
        self.key = key
        self.shared_check = shared_check
        self.subscribers = 0
        self.latest: Observation | None = None
        self.checks_run = 0
        self._registry = registry
        self._seq = 0
        self._inflight: tuple[float, asyncio.Task[Observation]] | None = None
        self._changed = asyncio.Event()

    # -- observations --

    async def _round(self, observed_at: float, context: Mapping[str, Any]) -> Observation:
        try:
            raw = await self.shared_check.run(context)
            error = None
        except (Exception, compat.AirflowTaskTimeout) as err:  # the latter is a BaseException on 3.x
            raw, error = None, f"{type(err).__name__}: {err}"
        self._seq += 1
        observation = Observation(self._seq, observed_at, raw, error)
        self.latest = observation
        self.checks_run += 1
        compat.Stats.incr(METRIC_CHECKS)
        # Wake every waiting subscriber; a fresh Event for the next round.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return observation

    async def observe(
        self, due_at: float, window: float, context: Mapping[str, Any]
    ) -> tuple[Observation, bool]:
        """An observation that started at or after ``due_at - window``; ``True`` when it was shared."""
        oldest_acceptable = due_at - window
        while True:
            latest = self.latest
            if latest is not None and latest.observed_at >= oldest_acceptable:
                compat.Stats.incr(METRIC_CHECKS_SAVED)
                return latest, True
            if self._inflight is not None and self._inflight[1].done():
                # A finished round whose done-callback has not run yet (it runs on the next loop turn).
                # Awaiting a done task does not yield to the loop, so looping on it would spin forever and
                # freeze the triggerer; forget it here (``latest`` already holds its observation).
                self._round_done(self._inflight[1])
            if self._inflight is not None:
                started, task = self._inflight
                # shield: a cancelled subscriber must not cancel the round the others wait for.
                observation = await asyncio.shield(task)
                if started >= oldest_acceptable:
                    compat.Stats.incr(METRIC_CHECKS_SAVED)
                    return observation, True
                continue
            started = now()
            task = asyncio.ensure_future(self._round(started, context))
            self._inflight = (started, task)
            task.add_done_callback(self._round_done)
            return await asyncio.shield(task), False

    def _round_done(self, task: asyncio.Task[Observation]) -> None:
        if self._inflight is not None and self._inflight[1] is task:
            self._inflight = None

    async def wait_for_news(self, seen_seq: int, timeout: float) -> Observation | None:
        """Sleep up to ``timeout``; return early with a newer observation than ``seen_seq`` if one arrives."""
        if self.latest is not None and self.latest.seq > seen_seq:
            return self.latest
        if timeout <= 0:
            return None
        changed = asyncio.ensure_future(self._changed.wait())
        timer = asyncio.ensure_future(sleep(timeout))
        try:
            await asyncio.wait({changed, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            timer.cancel()
        if self.latest is not None and self.latest.seq > seen_seq:
            return self.latest
        return None

    @property
    def seq(self) -> int:
        return self._seq

    # -- membership --

    def leave(self) -> None:
        self.subscribers -= 1
        if self._registry is not None:
            self._registry.release(self)
        elif self.subscribers <= 0:
            self.close()

    def close(self) -> None:
        if self._inflight is not None:
            self._inflight[1].cancel()
            self._inflight = None


class SharingRegistry:
    """The groups of one event loop (= one triggerer process)."""

    def __init__(self) -> None:
        self.groups: dict[str, CheckGroup] = {}

    def join(self, key: str, factory: Callable[[], SharedCheck]) -> CheckGroup:
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = CheckGroup(key, factory(), self)
        group.subscribers += 1
        self._report()
        return group

    def release(self, group: CheckGroup) -> None:
        # The last one out tears the group down.
        if group.subscribers <= 0 and self.groups.get(group.key) is group:
            del self.groups[group.key]
            group.close()
        self._report()

    @property
    def subscriber_count(self) -> int:
        return sum(group.subscribers for group in self.groups.values())

    def _report(self) -> None:
        compat.Stats.gauge(METRIC_GROUPS, len(self.groups))
        compat.Stats.gauge(METRIC_SUBSCRIBERS, self.subscriber_count)


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharingRegistry] = (
    weakref.WeakKeyDictionary()
)


def registry() -> SharingRegistry:
    loop = asyncio.get_running_loop()
    if loop not in _registries:
        _registries[loop] = SharingRegistry()
    return _registries[loop]


def join(key: str, factory: Callable[[], SharedCheck], share: bool) -> CheckGroup:
    """Join the group for ``key`` (or a private one when ``share`` is False)."""
    if share:
        return registry().join(key, factory)
    group = CheckGroup(key, factory(), None)
    group.subscribers = 1
    return group


@contextlib.contextmanager
def membership(key: str, factory: Callable[[], SharedCheck], share: bool) -> Any:
    group = join(key, factory, share)
    try:
        yield group
    finally:
        group.leave()
