"""``BackoffTrigger``: a sensor's backoff schedule, run in the triggerer.

Everything the trigger needs is in its kwargs (policy, seed, absolute ``started_at`` and ``deadline``, the
check spec), so a rebuilt trigger (triggerer restart, HA reassignment) continues the same schedule from
``(started_at, now)``: missed checks are skipped and the deadline is not reset. The schedule is a pure
function of the kwargs and the clock; the number of checks made is counted alongside (``checks`` in the
event: checks this trigger instance received an answer to). A rebuilt trigger cannot know how many checks
its predecessor made (Airflow keeps the kwargs of the deferral, not the trigger's memory): its event then
says ``checks_complete: False`` and its count is a lower bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow_smart_ext import clock, compat, secret_kwargs
from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck
from airflow_smart_ext.conditions import (
    make_shared_check,
    runtime,
    sharing_key,
    validate_check_spec,
)
from airflow_smart_ext.errors import resolve_error_types
from airflow_smart_ext.triggers import check_groups, gc_tuning, log_lines
from airflow_smart_ext.triggers.events import WaitEvents, before_yield, iso
from airflow_smart_ext.triggers.interpreters import LazyInterpreter
from airflow_smart_ext.triggers.last_check_writes import Write, last_check
from airflow_smart_ext.triggers.transient_errors import ErrorRideOut
from airflow_smart_ext.triggers.wait_schedule import WaitSchedule
from airflow_smart_ext.wait_model import deferral_paths, parameters, timeline
from airflow_smart_ext.wait_model.last_check import XCOM_KEY
from airflow_smart_ext.wait_model.sharing import coalescing_window, sharing_window_config

CLASSPATH = deferral_paths.BACKOFF_TRIGGER

# After the deadline, how long the final check may still run before the trigger reports its timeout anyway.
FINAL_CHECK_GRACE_SECONDS = 10.0


class BackoffTrigger(compat.locations.BaseTrigger):
    """Wait for a condition, checking on the times of a ``BackoffPolicy``; yield exactly one event.

    :param check: the check spec (``{"type": "sensor", ...}`` or ``{"type": "sql", ...}``: ``conditions/spec.py``).
    :param policy: ``BackoffPolicy.to_dict()``.
    :param seed: the task's jitter seed (``backoff.task_seed``).
    :param started_at: epoch seconds the schedule is anchored to (check #0 is relative to it).
    :param deadline: epoch seconds of the sensor timeout, or None for no deadline.
    :param after: index of the last check already done (on the worker).
    :param share: share the check with identical waits in this triggerer process.
    :param transient_errors: dotted paths of extra exception types to ride out (``errors.classify`` decides
        for the rest): a transient error is "not yet", the schedule goes on to the deadline.
    :param silent_fail: every failing check is "not yet" (the sensor's ``silent_fail``), in the triggerer.
    :param check_timeout: seconds one check may run (None: ``[smart_ext] check_time_limit`` or derived from
        the schedule); a check over it is a failed check (transient).
    :param rate_limit: checks per second on the check's connection (None: ``[smart_ext]
        max_checks_per_second_per_connection``; 0 there: no limit).
    :param due_at: epoch seconds the wait is due by (the sensor's ``due=``), or None.
    :param late_told: this try already said it is late. If not, the first check scheduled at or after
        ``due_at`` that finds the condition not met ends the trigger with a ``late`` event (a worker says it
        and defers again): the rule is the wait model's (``Timeline.tells_late``), nothing is remembered.
    """

    #: the start of a zero-worker wait's try (check #0 is still the trigger's to make); None: worker-first
    try_started_at: float | None = None

    def __init__(
        self,
        check: dict[str, Any],
        policy: dict[str, Any],
        seed: str,
        started_at: float,
        deadline: float | None,
        after: int = 0,
        share: bool = True,
        transient_errors: list[str] | None = None,
        silent_fail: bool = False,
        check_timeout: float | None = None,
        rate_limit: float | None = None,
        due_at: float | None = None,
        late_told: bool = False,
    ) -> None:
        super().__init__()
        # Built in the triggerer from sealed kwargs: open them (in memory only) and ship the sealed form on.
        self._shipped_check = check if secret_kwargs.is_sealed(check) else None
        #: Why the sealed check could not be opened: reported by ``run`` as this wait's error event. Airflow
        #: fails only a TypeError from a trigger's constructor as one trigger; any other error stops the
        #: whole triggerer process (and every wait in it), again each time the row is picked up.
        self._unreadable: str | None = None
        self._opened: list[Any] = []  # the opened secrets: run() has the supervisor's masker hide them too
        if self._shipped_check is not None:
            try:
                check = secret_kwargs.unseal(check, self._opened)
            except secret_kwargs.SealedValueUnreadable as err:
                self._unreadable = str(err)
        parameters.check_trigger_arguments(
            {"check_timeout": check_timeout, "rate_limit": rate_limit},
            policy=policy,
            check=check if self._unreadable is None else None,
        )
        if self._unreadable is None:
            validate_check_spec(check)
        self.check = check
        self.policy = policy
        self.seed = seed
        self.started_at = started_at
        self.deadline = deadline
        self.after = after
        self.share = share
        self.transient_errors = list(transient_errors or [])
        self.silent_fail = bool(silent_fail)
        self.check_timeout = check_timeout
        self.rate_limit = rate_limit
        self.due_at = None if due_at is None else float(due_at)
        self.late_told = bool(late_told)
        # Imported here, in the triggerer (validated at parse; a trigger may also be built by hand).
        self._transient_types = resolve_error_types(
            self.transient_errors,
            importer=runtime.import_object,  # DAGs-folder modules too, as on workers
        )
        # transient errors (or any, with silent_fail) are "not yet": the schedule goes on, no worker resumes
        self._ride_out = ErrorRideOut(self._transient_types, self.silent_fail)
        self._backoff_policy = BackoffPolicy.from_dict(policy)  # validates; ValueError names the parameter
        # The schedule followed: our own (seed, started_at) until ``run`` joins a group that already follows
        # one for this policy; ``started_at`` and the deadline stay this wait's own.
        self._schedule = WaitSchedule(self._backoff_policy, seed, started_at)
        self._check_zero_since: float | None = None  # check #0 on a joined schedule: served since then
        self._group: check_groups.CheckGroup | None = None
        self._subscription: check_groups.Subscription | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Rendered secrets never reach the trigger row in plaintext (Airflow 3 stores it unencrypted).
        if self._shipped_check is None:
            self._shipped_check = {
                key: value
                if key == "type"
                else secret_kwargs.seal(value, f"{self.check['type']} check {key!r}")
                for key, value in self.check.items()
            }
        return (
            CLASSPATH,
            {
                "check": self._shipped_check,
                "policy": self.policy,
                "seed": self.seed,
                "started_at": self.started_at,
                "deadline": self.deadline,
                "after": self.after,
                "share": self.share,
                "transient_errors": self.transient_errors,
                "silent_fail": self.silent_fail,
                "check_timeout": self.check_timeout,
                "rate_limit": self.rate_limit,
                # only a wait with a due time: every other trigger row stays as earlier releases wrote it
                **({"due_at": self.due_at, "late_told": self.late_told} if self.due_at is not None else {}),
            },
        )

    def __repr__(self) -> str:  # never the kwargs (Airflow's default would print the rendered arguments)
        return f"<{CLASSPATH} check={compat.locations.redact_secrets(self.check)!r}>"

    # -- schedule --

    async def _next(self, after: int) -> ScheduledCheck | None:
        return await self._schedule.next(after, self.deadline, self.try_started_at)

    async def _sharing_window(self, scheduled: ScheduledCheck, config: tuple[float, float]) -> float:
        """How much earlier than due another check of the group may serve this one (:func:`coalescing_window`);
        check #0 of a wait that joined the group: any check since the wait's start."""
        window = coalescing_window(await self._schedule.interval_before(scheduled), config)
        if scheduled.index == 0 and self._check_zero_since is not None:
            window = max(window, scheduled.at - self._check_zero_since)
        return window

    # -- run --

    async def run(self) -> AsyncIterator[Any]:
        run_started = clock.now()
        for secret in self._opened:  # 3.x: the log files are written by the triggerer's supervisor
            await compat.secret_masking.amask_secret(secret)
        if self._unreadable is not None:
            self.log.error("BackoffTrigger: %s", self._unreadable)
            await before_yield(run_started)
            yield WaitEvents(self.started_at, self.deadline).event(
                "error", self.after, None, self._unreadable, run_started
            )
            return
        gc_tuning.start()
        interpret = LazyInterpreter(self.check, self.log)  # its import error ends the wait as a check error
        window_config = sharing_window_config()  # once per run, not per check
        limits = self._limits()
        group = check_groups.join(sharing_key(self.check), lambda: make_shared_check(self.check), self.share)
        self._group = group
        self._subscription = subscription = group.subscribe()
        try:
            scheduled = await self._next(self.after)
            events = WaitEvents(
                self.started_at,
                self.deadline,
                checks_complete=scheduled is not None and scheduled.index <= max(self.after, -1) + 1,
            )
            joined = self._schedule.join(group)
            if joined:
                scheduled = await self._first_on_group_schedule()
            log_lines.emit(
                self.log,
                "info",
                "BackoffTrigger: %s; seed=%s started_at=%s (%.3f) deadline=%s; resuming after check #%d; "
                "next check #%s at %s; sharing=%s (group of %d%s)",
                self._backoff_policy.describe(),
                self.seed,
                iso(self.started_at),
                self.started_at,
                iso(self.deadline),
                self.after,
                scheduled.index if scheduled else "-",
                iso(scheduled.at if scheduled else None),
                "on" if self.share else "off",
                group.subscribers,
                f"; joined its schedule, anchored {iso(self._schedule.anchor)}" if joined else "",
            )
            while True:
                if scheduled is None:
                    # Only when the deadline passed while nobody was checking (e.g. triggerer down).
                    event = events.timeout(self.after, self.deadline or self.started_at)
                    await before_yield(run_started)
                    yield event
                    return
                window = await self._sharing_window(scheduled, window_config)
                failure = await interpret.failure()
                try:
                    if failure is None:
                        result = await group.wait(
                            subscription,
                            scheduled.at,
                            window,
                            self.check.get("context", {}),
                            interpret,
                            limits,
                        )
                    else:
                        result = check_groups.WaitResult(failure, scheduled.at, shared=False, early=False)
                except check_groups.WaitAbandoned:
                    # The check hangs past the deadline (and its grace): report our own timeout now.
                    log_lines.emit(
                        self.log,
                        "warning",
                        "check #%d did not report by the deadline %s (+%gs); timing out",
                        scheduled.index,
                        iso(self.deadline),
                        FINAL_CHECK_GRACE_SECONDS,
                    )
                    await before_yield(run_started)
                    yield events.timeout(scheduled.index, self.deadline or scheduled.at)
                    return
                events.count(result.outcome)
                outcome = self._ride_out(self.log, scheduled.index, result.outcome)
                group.last_check.record(
                    last_check(result.outcome, outcome, self._ride_out, result.checked_at),
                    self._last_check_writer(),
                )
                following = None
                if not (outcome.is_terminal or scheduled.final):
                    following = await self._next(scheduled.index)
                # The required per-check line; one pre-formatted message (no extra processor work).
                log_lines.emit(
                    self.log,
                    "info",
                    f"check #{scheduled.index} at={scheduled.at:.3f} (scheduled {iso(scheduled.at)})"
                    f"{' early' if result.early else (' shared' if result.shared else '')}: {outcome.status}"
                    f"{f' ({outcome.message})' if outcome.message else ''}; group of {group.subscribers}; "
                    f"next check {f'#{following.index} at {iso(following.at)}' if following else 'none'}",
                )
                event = events.after_check(
                    scheduled, outcome, result.checked_at, last=scheduled.final or following is None
                )
                if not outcome.is_terminal and self._tells_late(scheduled, result.checked_at):
                    # a late event, or the timeout after the last check saying it too (then timed out)
                    event = events.late(
                        scheduled.index, outcome, result.checked_at, float(self.due_at or 0), event
                    )
                if event is not None:
                    await before_yield(run_started)
                    yield event
                    return
                scheduled = following
        finally:
            self._leave()

    def _tells_late(self, scheduled: ScheduledCheck, checked_at: float) -> bool:
        """Whether this check, not met, says the wait is late: the try has not said it, and the check is
        scheduled at or after the due time (so it is the first such check: an earlier one would have said it)."""
        if self.due_at is None or self.late_told:
            return False
        return timeline.past_due(scheduled.at, checked_at, self.due_at)

    async def _first_on_group_schedule(self) -> ScheduledCheck | None:
        """Our first check once we follow the group's schedule (``wait.timeline.Timeline.began``). A worker-first
        wait with no check made this try (``after < 0``, e.g. a rate-limited deferral) checks #0 now, as poke
        mode's first poke, served by any check of the group since our start (``_sharing_window``)."""
        scheduled = await self._schedule.began(self.after, self.deadline, self.try_started_at)
        if self.after < 0 and self.try_started_at is None and scheduled is not None and scheduled.index == 0:
            self._check_zero_since = self.started_at
        return scheduled

    def _last_check_writer(self) -> Write | None:
        """Writes the group's last-check record as this wait's XCom (None: no task instance, e.g. dag.test())."""
        ti = getattr(self, "task_instance", None)
        if ti is None:
            return None
        return lambda record: compat.task_xcoms.aset_task_xcom(ti, XCOM_KEY, record)

    def _limits(self) -> check_groups.CheckLimits:
        rate = runtime.connection_rate_limit(self.rate_limit)
        return check_groups.CheckLimits(
            time_limit=runtime.check_time_limit(self.check_timeout, self._backoff_policy.initial),
            rate_limit=rate,
            not_after=self.deadline,
            give_up_at=None if self.deadline is None else self.deadline + FINAL_CHECK_GRACE_SECONDS,
        )

    def _leave(self) -> None:
        group, self._group = self._group, None
        subscription, self._subscription = self._subscription, None
        if group is not None:
            if subscription is not None:
                group.unsubscribe(subscription)
            group.leave()

    async def cleanup(self) -> None:
        """Release local resources only (our group membership); never touches the condition itself."""
        self._leave()

    async def on_kill(self) -> None:
        """Nothing external to cancel: a check is a read. Idempotent, safe on reassignment (3.3)."""
        self._leave()
