"""In-process sharing of identical checks between ``BackoffTrigger`` instances.

Triggers whose checks have the same sharing key (``checks.sharing_key``) join one ``CheckGroup`` in the
triggerer process. A subscriber due at ``t`` reuses the group's latest observation when that check started
at or after ``t - window`` (its coalescing window), or joins a check already in flight that started in that
window; otherwise it starts a new check for the group right away, even when an older check is still in
flight (a group may have several rounds in flight). So a subscriber is never checked later than its own
schedule, at most ``window`` seconds earlier. Every new observation is offered to all subscribers at once
(a large group is woken paced, ``FANOUT_SLICE`` every ``FANOUT_PAUSE`` seconds, so the fan-out never stalls
the loop): one that is positive (or a failure) for a subscriber completes it, even before its due time or
while its own round is still running.

A check that raises is reported as an ``error`` outcome to the subscribers that took part in that round
only; the others keep their schedule and will run a fresh check when due.

Scope: one registry per event loop, i.e. per triggerer process (HA triggerers each share within their own
process). Works the same on Airflow 2.11 and 3.x: nothing here depends on 3.3's shared streams.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import clock, compat
from airflow_smart_ext.conditions import Interpreter, Outcome, SharedCheck
from airflow_smart_ext.conditions.runtime import (
    CHECK_OWNER,
    CHECK_TIME_LIMIT,
    CheckTimeLimitExceeded,
    loop_entries,
)
from airflow_smart_ext.triggers.last_check_writes import LastCheckRecorder

log = logging.getLogger(__name__)

METRIC_CHECKS = "smart_ext.trigger.checks"
METRIC_CHECKS_SAVED = "smart_ext.trigger.checks_saved"
METRIC_GROUPS = "smart_ext.trigger.groups"
METRIC_SUBSCRIBERS = "smart_ext.trigger.subscribers"
METRIC_RATE_LIMITED = "smart_ext.trigger.checks_rate_limited"
METRIC_TIME_LIMIT_EXCEEDED = "smart_ext.trigger.checks_over_time_limit"
# Wake-ups due together (fan-in) are cheap: WAKE_SLICE per loop iteration. Delivering an observation to a
# large group (fan-out) is not: each subscriber then logs its check and may end its task (Airflow logs the
# event in its executor threads), so it is paced in time, FANOUT_SLICE subscribers every FANOUT_PAUSE
# seconds (1,000 per second): the loop and Airflow's logging threads keep up, no stall builds.
WAKE_SLICE = 20
FANOUT_SLICE = 5
FANOUT_PAUSE = 0.005


@dataclass(frozen=True)
class Observation:
    """One run of a group's shared check. ``observed_at`` is when it started (a conservative data time)."""

    observed_at: float
    raw: Any = None
    error: BaseException | None = None  # the shared check raised (kept for classification)


@dataclass(frozen=True)
class CheckLimits:
    """Bounds on one subscriber's check.

    ``time_limit``: seconds a round it starts may run (None: unbounded); ``rate_limit``: checks per second
    allowed on the check's concurrency key (None: no limit); ``not_after``: a round it starts waits for the
    rate limit no later than this moment (its deadline); ``give_up_at``: stop waiting for a round then.
    """

    time_limit: float | None = None
    rate_limit: float | None = None
    not_after: float | None = None
    give_up_at: float | None = None


NO_LIMITS = CheckLimits()


class WaitAbandoned(TimeoutError):
    """A subscriber stopped waiting for a check that had not reported by its ``give_up_at``."""


@dataclass(frozen=True)
class WaitResult:
    """What one scheduled check of one subscriber concluded."""

    outcome: Outcome
    checked_at: float  # the time the outcome is about (its scheduled time, or the observation's if early)
    shared: bool  # served by another subscriber's check
    early: bool  # completed before its due time by another subscriber's observation


def interpret(observation: Observation, interpreter: Interpreter) -> Outcome:
    """One subscriber's outcome of an observation of its group."""
    if observation.error is not None:
        err = observation.error
        return Outcome("error", message=f"{type(err).__name__}: {err}", error=err)
    return interpreter(observation.raw)


def _gave(round_: asyncio.Future[Observation], observation: Observation | None) -> bool:
    """The round has ended with ``observation`` (its done-callback, which forgets it, may still be pending)."""
    if observation is None or not round_.done() or round_.cancelled() or round_.exception() is not None:
        return False
    return round_.result() is observation


def completes_early(outcome: Outcome) -> bool:
    """Another subscriber's observation ends our wait before our due time only when it is decisive."""
    return outcome.status in ("positive", "failure")


class Subscription:
    """One subscriber's inbox: every observation of its group since it last looked; it is also its own
    wake-up entry in the waker (no alarm object per wait)."""

    __slots__ = ("_due", "_future", "news", "served")

    def __init__(self) -> None:
        self.news: list[Observation] = []
        self._future: asyncio.Future[None] | None = None
        self._due: float | None = None  # the moment a pending wait() wakes up at (armed in the waker)
        # The observation that served its last check: it serves no other (:meth:`CheckGroup.observe`).
        self.served: Observation | None = None

    def _wake(self) -> None:
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def take(self) -> Sequence[Observation]:
        if not self.news:
            return ()
        news = self.news[:]
        self.news.clear()
        return news

    async def wait(self, until: float | None = None) -> bool:
        """Wait for news (or until the moment ``until``); ``True`` when there is news."""
        if self.news:
            return True
        if until is not None and until <= clock.now():
            return False
        future = self._future = asyncio.get_running_loop().create_future()
        if until is not None:
            self._due = until
            _waker().arm(until, self)
        try:
            await future
        finally:
            self._future = None
            if self._due is not None:  # woken by news (or cancelled) before its moment: no entry stays
                _waker().disarm(self._due, self)
            self._due = None
        return bool(self.news)


class _Waker:
    """Wake-ups that fall due together are run a slice per loop iteration, never all in one.

    Thousands of waits on shared conditions share their schedules, so their due times coincide: one loop
    timer per due moment (not one per waiter), and its waiters woken ``WAKE_SLICE`` per iteration, so the
    loop's other callbacks run in between (event-loop lag stays bounded by one slice). A subscription whose
    wait ended meanwhile (``_due`` changed) is skipped.
    """

    def __init__(self) -> None:
        # moment -> (its subscriptions, in order, and its loop timer)
        self._due: dict[float, tuple[dict[Subscription, None], clock.Cancellable]] = {}

    def arm(self, at: float, subscription: Subscription) -> None:
        entry = self._due.get(at)  # waits on one shared schedule are due at the very same moment
        if entry is None:
            entry = self._due[at] = ({}, clock.call_later(max(0.0, at - clock.now()), lambda: self._fire(at)))
        entry[0][subscription] = None

    def disarm(self, at: float, subscription: Subscription) -> None:
        """A wait that ended before its moment leaves it; the last one out cancels the moment's timer (a
        wait for a far deadline must not hold an entry until then)."""
        entry = self._due.get(at)
        if entry is None:
            return
        entry[0].pop(subscription, None)
        if not entry[0]:
            del self._due[at]
            entry[1].cancel()

    def _fire(self, at: float) -> None:
        batch, _timer = self._due.pop(at, ({}, None))
        due = [subscription for subscription in batch if subscription._due == at]
        run_sliced(due, Subscription._wake)


def run_sliced(
    items: list[Any], action: Callable[[Any], None], size: int = WAKE_SLICE, pause: float = 0.0
) -> None:
    """``action(item)`` for every item, ``size`` at a time: the next slice in the next loop iteration, or
    ``pause`` seconds later (paced)."""
    if len(items) <= size:
        for item in items:
            action(item)
        return
    loop = asyncio.get_running_loop()

    def from_(start: int) -> None:
        for item in items[start : start + size]:
            action(item)
        if start + size < len(items):
            if pause > 0:
                clock.call_later(pause, lambda: from_(start + size))
            else:
                loop.call_soon(from_, start + size)

    from_(0)


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waker] = weakref.WeakKeyDictionary()


def _waker() -> _Waker:
    """This event loop's waker (fan-in of wake-ups due at the same moment)."""
    loop = asyncio.get_running_loop()
    waker = _wakers.get(loop)
    if waker is None:
        waker = _wakers[loop] = _Waker()
    return waker


class CheckGroup:
    """Subscribers of one sharing key, the latest observation, and the rounds in flight."""

    def __init__(self, key: str, shared_check: SharedCheck, registry: SharingRegistry | None) -> None:
        self.key = key
        self.shared_check = shared_check
        self.subscribers = 0
        self.latest: Observation | None = None
        self._registry = registry
        # Rounds in flight -> the time each started; several when a subscriber's due time came while an
        # older round (too old for its window) was still running.
        self._inflight: dict[asyncio.Future[Observation], float] = {}
        self._subscriptions: set[Subscription] = set()
        self._schedules: dict[Hashable, tuple[str, float]] = {}  # policy -> (seed, anchor) of its schedule
        self.last_check = LastCheckRecorder()  # one record per group, not per member (its write throttle)

    def schedule_for(self, policy: Hashable, own: tuple[str, float]) -> tuple[str, float]:
        """The (seed, anchor) this group's waits of ``policy`` follow: the first one's, for the group's life."""
        return self._schedules.setdefault(policy, own)

    # -- observations --

    async def _round(
        self, observed_at: float, context: Mapping[str, Any], limits: CheckLimits
    ) -> Observation:
        delay = rate_limiter(self.shared_check.concurrency_key, limits.rate_limit).reserve(limits.not_after)
        if delay > 0:  # over the connection's budget: delayed, never dropped, never past the deadline
            compat.locations.Stats.incr(METRIC_RATE_LIMITED)
            await clock.asleep(delay)
            observed_at = clock.now()
        task = asyncio.current_task()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            if task is not None:
                task.cancel()

        timer = clock.call_later(limits.time_limit, expire) if limits.time_limit else None
        CHECK_TIME_LIMIT.set(limits.time_limit)  # this round's own task: nothing to reset
        CHECK_OWNER.set(self.key)  # a condition whose abandoned check still runs starts no second one
        try:
            raw = await self.shared_check.run(context)
            error: BaseException | None = None
        except asyncio.CancelledError:
            if not expired:
                raise
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            raw, error = (
                None,
                CheckTimeLimitExceeded(
                    f"the check did not report within its time limit of {limits.time_limit:g}s and was "
                    f"given up (on {self.shared_check.concurrency_key}; a call still running is abandoned and "
                    "this condition starts no other until it returns)"
                ),
            )
            compat.locations.Stats.incr(METRIC_TIME_LIMIT_EXCEEDED)
        except compat.locations.CHECK_ERRORS as err:
            raw, error = None, err
        finally:
            if timer is not None:
                timer.cancel()
        observation = Observation(observed_at, raw, error)
        # Rounds may finish out of order: ``latest`` is the freshest data, i.e. the latest *start*.
        if self.latest is None or observed_at >= self.latest.observed_at:
            self.latest = observation
        compat.locations.Stats.incr(METRIC_CHECKS)
        self._announce(observation)
        return observation

    def _announce(self, observation: Observation) -> None:
        """Offer an observation to every subscriber; thousands are woken paced in time (fan-out)."""
        subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            subscription.news.append(observation)
        run_sliced(subscriptions, Subscription._wake, FANOUT_SLICE, FANOUT_PAUSE)

    def _start_round(self, context: Mapping[str, Any], limits: CheckLimits) -> asyncio.Future[Observation]:
        started = clock.now()
        task = asyncio.ensure_future(self._round(started, context, limits))
        self._inflight[task] = started
        task.add_done_callback(self._round_done)
        return task

    async def observe(
        self,
        due_at: float,
        window: float,
        context: Mapping[str, Any],
        subscription: Subscription | None = None,
        accept: Callable[[Observation], bool] | None = None,
        limits: CheckLimits | None = None,
        served: Observation | None = None,
    ) -> tuple[Observation, bool]:
        """An observation that started at or after ``due_at - window``, other than ``served`` (the one that
        served the caller's previous check); ``True`` when it was shared.

        A check that started late (a busy loop, a rate limit's delay) may fall inside the next check's window
        too: it serves one of a caller's checks, never two (the second would count one check, and its error,
        twice).

        Meanwhile, an observation of *any* round for which ``accept`` is true (terminal for this subscriber)
        is returned as soon as it arrives (as shared). The round is never awaited directly: a cancelled
        subscriber does not cancel a round that others wait for.
        """
        oldest_acceptable = due_at - window
        latest = self.latest
        if latest is not None and latest is not served and latest.observed_at >= oldest_acceptable:
            compat.locations.Stats.incr(METRIC_CHECKS_SAVED)
            return latest, True
        round_: asyncio.Future[Observation] | None = None
        for task, started in self._inflight.items():  # the freshest round in our window, if any
            fresher = round_ is None or started > self._inflight[round_]
            if started >= oldest_acceptable and fresher and not task.cancelled() and not _gave(task, served):
                round_ = task
        shared = round_ is not None
        if round_ is None:
            round_ = self._start_round(context, limits or NO_LIMITS)
        if subscription is None:
            subscription = Subscription()
            self._subscriptions.add(subscription)
            private = True
        else:
            private = False
        try:
            while True:
                news = subscription.take()
                if accept is not None:
                    own = round_.result() if round_.done() and not round_.cancelled() else None
                    for observation in news:
                        if observation is not own and accept(observation):
                            return observation, True
                if round_.done():
                    observation = round_.result()  # a cancelled round (group closed) raises here
                    if shared:
                        compat.locations.Stats.incr(METRIC_CHECKS_SAVED)
                    return observation, shared
                give_up_at = limits.give_up_at if limits is not None else None
                if give_up_at is None:
                    await subscription.wait()
                elif not await subscription.wait(give_up_at) and clock.now() >= give_up_at:
                    raise WaitAbandoned(f"gave up waiting for the check at {give_up_at:.3f}")
        finally:
            if private:
                self._subscriptions.discard(subscription)

    def _round_done(self, task: asyncio.Future[Observation]) -> None:
        self._inflight.pop(task, None)
        if task.cancelled():  # (group closed) nobody may keep waiting for a round that will never report
            for subscription in self._subscriptions:
                subscription._wake()

    def subscribe(self) -> Subscription:
        """An inbox that receives every observation of this group until :meth:`unsubscribe`."""
        subscription = Subscription()
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    # -- the wait protocol --

    async def wait(
        self,
        subscription: Subscription,
        due_at: float,
        window: float,
        context: Mapping[str, Any],
        interpreter: Interpreter,
        limits: CheckLimits = NO_LIMITS,
    ) -> WaitResult:
        """Wait until ``due_at`` and check (or reuse a shared check within ``window``); one subscriber's
        outcome. A group observation that is decisive for us completes the wait early.
        """
        while True:
            for news in subscription.take():
                outcome = interpret(news, interpreter)
                # Another subscriber's check found our condition (or a failure criterion): done now.
                if completes_early(outcome):
                    return WaitResult(outcome, min(news.observed_at, due_at), True, True)
            if due_at <= clock.now():
                break
            await subscription.wait(due_at)  # news, or our due time (a spurious wake just loops)
        decisive: list[Outcome] = []

        def accept(observation: Observation) -> bool:
            # While our own round runs: another round's result that is decisive for us completes us too.
            outcome = interpret(observation, interpreter)
            if completes_early(outcome):
                decisive.append(outcome)
                return True
            return False

        observation, shared = await self.observe(
            due_at, window, context, subscription, accept, limits, subscription.served
        )
        subscription.served = observation
        if decisive:
            return WaitResult(decisive[-1], due_at, True, False)
        return WaitResult(interpret(observation, interpreter), due_at, shared, False)

    # -- membership --

    def leave(self) -> None:
        self.subscribers -= 1
        if self._registry is not None:
            self._registry.release(self)
        elif self.subscribers <= 0:
            self.close()

    def close(self) -> None:
        inflight, self._inflight = self._inflight, {}
        for task in inflight:
            task.cancel()
        forget_idle_bucket(self.shared_check.concurrency_key)


class SharingRegistry:
    """The groups of one event loop (= one triggerer process)."""

    def __init__(self) -> None:
        self.groups: dict[str, CheckGroup] = {}
        self._subscribers = 0  # kept up to date on join/release: O(1) with any number of groups

    def join(self, key: str, factory: Callable[[], SharedCheck]) -> CheckGroup:
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = CheckGroup(key, factory(), self)
        group.subscribers += 1
        self._subscribers += 1
        self._report()
        return group

    def release(self, group: CheckGroup) -> None:
        """Called by ``group.leave()`` after it counted the subscriber out."""
        self._subscribers -= 1
        # The last one out tears the group down.
        if group.subscribers <= 0 and self.groups.get(group.key) is group:
            del self.groups[group.key]
            group.close()
        self._report()

    @property
    def subscriber_count(self) -> int:
        return self._subscribers

    def _report(self) -> None:
        compat.locations.Stats.gauge(METRIC_GROUPS, len(self.groups))
        compat.locations.Stats.gauge(METRIC_SUBSCRIBERS, self._subscribers)


class TokenBucket:
    """Checks per second on one concurrency key; a check over budget reserves the next free moment.

    Capacity one check (no burst): over any window of ``w`` seconds at most ``rate * w + 1`` checks start,
    except a check that reached its ``not_after`` (a deadline), which is never delayed past it.
    """

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._next_free = 0.0  # the earliest moment the next check may start

    def reserve(self, not_after: float | None = None) -> float:
        """Seconds the caller must wait before its check; the slot is taken (delayed, never dropped)."""
        current = clock.now()
        start = max(current, self._next_free)
        if not_after is not None and start > not_after:
            start = max(current, not_after)  # the deadline wins: this check goes over budget
        else:
            self._next_free = start + 1.0 / self.rate
        return start - current


class _Unlimited:
    def reserve(self, not_after: float | None = None) -> float:
        return 0.0


_UNLIMITED = _Unlimited()
_buckets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, TokenBucket]] = (
    weakref.WeakKeyDictionary()
)


def rate_limiter(key: str, rate: float | None) -> TokenBucket | _Unlimited:
    """The bucket of ``key`` in this process; the lowest rate any of its checks asked for applies."""
    if not rate:
        existing = _buckets.get(asyncio.get_running_loop(), {}).get(key)
        return existing if existing is not None else _UNLIMITED
    per_loop = _buckets.setdefault(asyncio.get_running_loop(), {})
    bucket = per_loop.get(key)
    if bucket is None:
        bucket = per_loop[key] = TokenBucket(rate)
    elif rate < bucket.rate:
        bucket.rate = rate
    return bucket


def forget_idle_bucket(key: str) -> None:
    """Drop ``key``'s bucket once idle (its next free moment passed): an idle capacity-one bucket behaves as
    a new one, so a long-running triggerer keeps no bucket per connection it ever checked."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # closed outside a loop: no bucket of this loop to keep or drop
        return
    per_loop = _buckets.get(loop)
    bucket = per_loop.get(key) if per_loop is not None else None
    if per_loop is None or bucket is None:
        return
    busy_for = bucket._next_free - clock.now()
    if busy_for > 0:
        clock.call_later(busy_for, lambda: forget_idle_bucket(key))
        return
    del per_loop[key]
    if not per_loop:
        del _buckets[loop]


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharingRegistry] = (
    weakref.WeakKeyDictionary()
)


def registry_sizes() -> dict[str, int]:
    """The sizes of this module's per-loop registries, of the running loop (or of all loops outside one):
    groups and their subscribers, subscriptions and rounds in flight, armed wake-ups, token buckets, and
    how many event loops hold any of them (triggers/registries.py reports them)."""
    registries = loop_entries(_registries)
    groups = [group for found in registries for group in found.groups.values()]
    return {
        "groups": len(groups),
        "subscribers": sum(found.subscriber_count for found in registries),
        "subscriptions": sum(len(group._subscriptions) for group in groups),
        "rounds_in_flight": sum(len(group._inflight) for group in groups),
        "waker_due": sum(len(waker._due) for waker in loop_entries(_wakers)),
        "token_buckets": sum(len(buckets) for buckets in loop_entries(_buckets)),
        "event_loops": len(set(_registries) | set(_wakers) | set(_buckets)),
    }


def registry() -> SharingRegistry:
    loop = asyncio.get_running_loop()
    found = _registries.get(loop)
    if found is None:
        found = _registries[loop] = SharingRegistry()
    return found


def join(key: str, factory: Callable[[], SharedCheck], share: bool) -> CheckGroup:
    """Join the group for ``key`` (or a private one when ``share`` is False)."""
    if share:
        return registry().join(key, factory)
    group = CheckGroup(key, factory(), None)
    group.subscribers = 1
    return group
