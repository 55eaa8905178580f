"""When a wait's checks happen: its deadline, its anchor, the time of check *k*, the first and the next check,
the interval before check *k*, the checks made at any instant, which check says the wait is late (its due time)
and how a wait that ran out of checks ends — one
:class:`Timeline` per try, asked by every driver: the sensor's modes, both triggers, the watcher (a timeline
without a deadline) and the view. Only this module asks ``BackoffPolicy`` for a check.

Terms:

* **anchor**: the instant the schedule's offsets count from (``BackoffPolicy.offset(seed, k)`` is check *k*'s
  distance from it). A zero-worker wait anchors at the start of its try moved back onto the ``poke_interval``
  grid (``aligned_start``), so identical waits that start apart check together; a worker-first wait carries the
  anchor its worker used.
* **deadline**: when the wait stops checking (its last check is placed exactly there): the sensor's timeout,
  or the ``execution_timeout`` when that comes first, counted from the start of the try. A DAG run's
  ``dagrun_timeout`` may end the wait earlier (:func:`wait_ends`): the scheduler skips the task then.
* **check #0 of a zero-worker wait**: no worker made it, so the trigger does. Its grid slot may lie before the
  start of the try; a trigger that begins within one ``poke_interval`` of the start of the try then checks at
  once, otherwise at the slot (:func:`first_check`).
* **checks made**: the checks a trigger that ran without a gap since ``first_run_at`` has made by ``now``
  (:meth:`Timeline.progress`); a worker-first wait adds the worker's own (``after + 1``).

Pure: a function of (policy, seed, anchor, deadline, now).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck, aligned_start

OffsetOf = Callable[[int], float]

TIMEOUT = "timeout"  # the sensor's timeout ends the wait: AirflowSensorTimeout, never retried
EXECUTION_TIMEOUT = "execution_timeout"  # the task's execution_timeout ends it first: retried as in poke mode

#: Seconds added to a deferral's Airflow timeout so the trigger's own final check and "timeout" event
#: always win over Airflow's trigger timeout (2.11 would turn that into a retryable TaskDeferralError).
DEFERRAL_GRACE_SECONDS = 60.0
#: The status of a trigger's event that says the wait is late (``due=``): a worker says it and defers again.
LATE_EVENT = "late"


class Offsets:
    """``policy.offset(seed, k)``, memoised: each offset is asked for several times (a trigger's step, the
    Waits view's waits on one condition). ``keep``: clear the memo once it holds more (a trigger needs only
    its current step's few); None keeps every offset (one report)."""

    def __init__(self, policy: BackoffPolicy, seed: str, keep: int | None = None) -> None:
        self.policy, self.seed, self.keep = policy, seed, keep
        self._memo: dict[int, float] = {}

    def __call__(self, index: int) -> float:
        offset = self._memo.get(index)
        if offset is None:
            if self.keep is not None and len(self._memo) > self.keep:
                self._memo.clear()
            offset = self._memo[index] = self.policy.offset(self.seed, index)
        return offset


@dataclass(frozen=True)
class Deadlines:
    """A zero-worker wait's deadlines, counted from the start of its try."""

    timeout: float  # the sensor's timeout
    execution: float | None  # the task's execution_timeout, if set
    schedule: float  # the earlier of the two: when the schedule stops

    @property
    def execution_first(self) -> bool:
        """Whether the wait ends at the execution deadline rather than at the sensor timeout."""
        return self.execution is not None and self.execution < self.timeout

    @property
    def ends_by(self) -> str:
        """What ends the schedule: ``"execution_timeout"`` (a retryable task timeout) or ``"timeout"``."""
        return EXECUTION_TIMEOUT if self.execution_first else TIMEOUT

    def backstop(self, now: float, *, capped_by_execution: bool = False) -> float:
        """Airflow's trigger timeout for a wait deferred at ``now``: the time left to the end of the schedule
        plus :data:`DEFERRAL_GRACE_SECONDS`, so the trigger's own final check and "timeout" event come first.
        ``capped_by_execution``: as the scheduler applies it to a task it starts in the triggerer, which caps
        it at the execution deadline (``defer_task``; the zero-worker trigger derives the start of the try
        from it)."""
        seconds = max(0.0, self.schedule - now) + DEFERRAL_GRACE_SECONDS
        if capped_by_execution and self.execution is not None:
            seconds = min(seconds, max(0.0, self.execution - now))
        return seconds


def deadlines(try_started_at: float, timeout: float, execution_timeout: float | None) -> Deadlines:
    """The sensor timeout's and the execution timeout's deadlines (the wait ends at the earlier)."""
    sensor = try_started_at + float(timeout)
    execution = None if execution_timeout is None else try_started_at + float(execution_timeout)
    return Deadlines(sensor, execution, sensor if execution is None else min(sensor, execution))


def run_deadline(run_started_at: float | None, dagrun_timeout: float | None) -> float | None:
    """When the scheduler times the DAG run out: ``dagrun_timeout`` after the run started. It then fails the
    run and skips every unfinished task — a wait too, whatever its own deadline (the trigger does not know it;
    Airflow cancels the trigger)."""
    if run_started_at is None or dagrun_timeout is None:
        return None
    return run_started_at + float(dagrun_timeout)


def wait_ends(deadline: float | None, by: str, run_ends: float | None) -> tuple[float | None, str]:
    """(when the wait ends at the latest, what ends it): its own ``deadline`` (set ``by`` its timeout or its
    ``execution_timeout``) or the run's ``dagrun_timeout``, whichever comes first."""
    if run_ends is not None and (deadline is None or run_ends < deadline):
        return run_ends, "dagrun_timeout"
    return deadline, by


def anchor(try_started_at: float, policy: BackoffPolicy) -> float:
    """A zero-worker wait's anchor: the start of its try on the ``poke_interval`` grid."""
    return aligned_start(try_started_at, policy.initial)


def first_check(
    scheduled: ScheduledCheck | None, now: float, try_started_at: float, policy: BackoffPolicy
) -> ScheduledCheck:
    """Check #0 of a zero-worker wait whose trigger begins at ``now``; ``scheduled`` is the schedule's first
    check not missed by then (None: the deadline passed). Past the deadline: one final check now (as poke
    mode's final check). A grid slot #0 already passed, within one ``poke_interval`` of the start of the try:
    check at once. Later: the schedule goes on (a rebuilt trigger skips what it missed)."""
    if scheduled is None:
        return ScheduledCheck(0, now, True)
    if scheduled.index > 0 and now < try_started_at + policy.initial:
        return ScheduledCheck(0, now, False)
    return scheduled


def past_due(scheduled_at: float, now: float, due_at: float) -> bool:
    """Whether a check scheduled at ``scheduled_at``, made at ``now``, is at or after the due time: the first
    such check of a try that finds the condition not met says the wait is late (:meth:`Timeline.tells_late`;
    a deferred wait's trigger asks it too)."""
    return now >= due_at and scheduled_at >= due_at


def retried_after_due(retry: bool, try_started_at: float, due_at: float) -> bool:
    """Whether a try has nothing to say about lateness: a retry that started after the due time (the earlier
    try was late too). Sensor, triggers and the Waits view ask it."""
    return retry and try_started_at > due_at


@dataclass(frozen=True)
class Timeline:
    """A wait's checks: ``policy`` from ``(seed, anchor)`` up to ``deadline``. ``try_started_at`` is set for a
    zero-worker wait (check #0 still to do: :func:`first_check`). ``own`` is set when the wait follows its
    sharing group's schedule (:meth:`joined`): the timeline it had before it joined."""

    policy: BackoffPolicy
    seed: str
    anchor: float
    deadline: float | None
    try_started_at: float | None = None
    own: Timeline | None = None
    ends_by: str = TIMEOUT  # what the deadline is (Deadlines.ends_by): how a wait that ran out of checks ends

    def joined(self, seed: str, anchor: float) -> Timeline:
        """This wait once it follows the schedule its sharing group already runs for its policy: the first
        member's ``(seed, anchor)`` (one condition, one schedule per triggerer process), its own deadline and
        try start. Itself when that schedule is its own."""
        if (seed, anchor) == (self.seed, self.anchor):
            return self
        return replace(self, seed=seed, anchor=anchor, own=self)

    def began(self, now: float, after: int, offset_of: OffsetOf | None = None) -> ScheduledCheck | None:
        """The first check of a trigger that begins at ``now`` with check ``after`` made. On its own schedule:
        :meth:`next_check`. On its group's: a zero-worker wait's check #0 as :func:`first_check` places it on
        the group's grid; a worker-first wait keeps a final (or no) check of its own, checks #0 at once when
        its worker made none, else takes the group's next check (its numbering), never one due right now."""
        if self.own is None:
            return self.next_check(now, after, offset_of)
        if self.try_started_at is not None:
            return self.next_check(now, -1, offset_of)
        own = self.own.next_check(now, after)
        if own is None or own.final:
            return own
        if after < 0:
            return ScheduledCheck(0, now, False)
        scheduled = self.next_check(now, -1, offset_of)
        if scheduled is not None and scheduled.at <= now:
            scheduled = self.next_check(now, scheduled.index, offset_of)
        return scheduled

    def at(self, index: int, offset_of: OffsetOf | None = None) -> float:
        """The grid time of check ``index``."""
        return self.anchor + (offset_of(index) if offset_of else self.policy.offset(self.seed, index))

    def scheduled_at(self, index: int) -> float:
        """When check ``index`` is due: its grid time, or the deadline for the final check placed there."""
        at = self.at(index)
        return at if self.deadline is None else min(at, self.deadline)

    def tells_late(self, index: int, previous: int | None, due_at: float, now: float, *, retry: bool) -> bool:
        """Whether check ``index``, made at ``now`` and not met, is the one that says the wait is late (one per
        try and due time): the first check of the try scheduled at or after ``due_at``, whenever it ran.
        ``previous``: the check this try made before it (None: it is the try's first). A try that starts after
        the due time says so at its first check on the first try only (a retry's earlier try was late too)."""
        if not past_due(self.scheduled_at(index), now, due_at):
            return False
        if previous is None:
            return not retried_after_due(retry, self.anchor, due_at)
        return self.scheduled_at(previous) < due_at

    def splay(self) -> float:
        """How far after the anchor check #0 is due (sensors created together spread over ``[0, splay)``)."""
        return self.policy.offset(self.seed, 0)

    def first_check_at(self) -> float:
        """When check #0 is due: the splayed start of the schedule, never after the deadline. (Not
        ``next_check(now, -1)``: that is the first check due *from now*, check #1 once a small splay passed.)"""
        first = self.at(0)
        return first if self.deadline is None else min(first, self.deadline)

    def interval_before(self, scheduled: ScheduledCheck, offset_of: OffsetOf | None = None) -> float:
        """Seconds from the check before ``scheduled`` to it: the coalescing window's base. Check #0 has no
        check before it: it stands for one ``poke_interval``."""
        if scheduled.index <= 0:
            return self.policy.initial
        return scheduled.at - self.at(scheduled.index - 1, offset_of)

    def next_check(self, now: float, after: int, offset_of: OffsetOf | None = None) -> ScheduledCheck | None:
        """What the trigger checks next at ``now``, check ``after`` made (``-1``: none yet)."""
        scheduled = self.policy.next_check(self.seed, self.anchor, now, self.deadline, after, offset_of)
        if after >= 0 or self.try_started_at is None:
            return scheduled
        return first_check(scheduled, now, self.try_started_at, self.policy)

    def progress(
        self, now: float, first_run_at: float, after: int, offset_of: OffsetOf | None = None
    ) -> tuple[ScheduledCheck | None, int]:
        """(the next check, the checks the trigger made) at ``now``, for a trigger that began at
        ``first_run_at`` with check ``after`` made and has run since: each check at its time, none missed."""
        first = self.began(first_run_at, after, offset_of)
        if first is None:
            return None, 0
        if first.at >= now:
            return first, 0
        if first.final:
            return None, 1

        def index_at(moment: float) -> int:  # the first check after ``first`` not before ``moment``
            found = self.policy.next_check(self.seed, self.anchor, moment, None, first.index, offset_of)
            assert found is not None  # no deadline: there is always one
            return found.index

        following = self.next_check(now, first.index, offset_of)
        if following is not None:
            return following, 1 + following.index - index_at(first.at)
        # Past the deadline: every check before it, then the final one at it.
        assert self.deadline is not None
        return None, 1 + index_at(self.deadline) - index_at(first.at) + 1


@dataclass(frozen=True)
class SensorTry:
    """One try of a sensor's wait, built once per try: its deadlines and its checks (``line``: the policy up
    to the earlier deadline, which says how a wait that ran out of checks ends)."""

    deadlines: Deadlines
    line: Timeline

    @classmethod
    def from_start(
        cls,
        policy: BackoffPolicy,
        seed: str,
        try_started_at: float,
        ends: Deadlines,
        *,
        on_grid: bool = False,
    ) -> SensorTry:
        """The try's checks from its start (moved back onto the ``poke_interval`` grid with ``on_grid``:
        deferrable waits started seconds apart align) up to the earlier of its deadlines ``ends``."""
        start = anchor(try_started_at, policy) if on_grid else try_started_at
        return cls(ends, Timeline(policy, seed, start, ends.schedule, ends_by=ends.ends_by))


class PollSchedule:
    """When the next check is due: ``policy`` from an anchor, with no deadline (a watcher never ends).

    The first anchor is the start moved back onto the ``poke_interval`` grid (watchers of one condition that
    start apart check together and share); :meth:`restart` anchors a fresh schedule at the check that saw a new
    value, so the next check is one initial interval later and the backoff grows from there again.
    """

    def __init__(self, policy: BackoffPolicy, seed: str, started_at: float) -> None:
        self.line = Timeline(policy, seed, anchor(started_at, policy), None)
        self.after = -1

    def next_check(self, now: float) -> ScheduledCheck:
        scheduled = self.line.next_check(now, self.after)
        assert scheduled is not None  # no deadline: there is always a next check
        return scheduled

    def done(self, scheduled: ScheduledCheck) -> None:
        self.after = scheduled.index

    def restart(self, at: float) -> None:
        """A new value was seen by the check at ``at`` (check #0 of a fresh schedule, its splay included)."""
        self.line = replace(self.line, anchor=at - self.line.splay())
        self.after = 0

    def interval_before(self, scheduled: ScheduledCheck) -> float:
        return self.line.interval_before(scheduled)
