"""Deferrable mode, worker-first: check #0 on a worker, then ``BackoffTrigger`` waits in the triggerer; and the
resume, shared with the zero-worker path, which ends the task exactly as poke mode would."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_smart_ext import clock, compat, units
from airflow_smart_ext.conditions import Ending, task_ending
from airflow_smart_ext.conditions.outcomes import rebuild_error
from airflow_smart_ext.conditions.runtime import config_non_negative_float
from airflow_smart_ext.errors import error_type_paths
from airflow_smart_ext.sensors import late, late_record, poke_mode
from airflow_smart_ext.wait_model import timeline
from airflow_smart_ext.wait_model.late_told import CUT_SHORT, TOLD
from airflow_smart_ext.wait_model.sharing import wait_seed

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor


def execute_deferrable(sensor: BackoffSensor, context: Any) -> Any:
    started_at = clock.now()
    # Identical waits get one schedule (seed of the condition, not of the task), so the triggerer's
    # shared check serves all of them on the same cycle instead of one check per task.
    seed = wait_seed(sensor.deferrable_check(context))
    if _rate_limited(sensor):
        # The connection has a check budget, which only the triggerer can keep (it sees every pending
        # check): check #0 runs there too, paced with the others, instead of on every worker at once.
        return defer(sensor, context, seed, started_at, after=-1, worker_pokes=0)
    # A cheap positive needs no deferral: check #0 runs on the worker.
    done, xcom_value = poke_mode.poke_once(sensor, context, 0, 1)
    if done:
        return poke_mode.succeeded(sensor, context, started_at, 1, xcom_value, "deferrable")
    return defer(sensor, context, seed, started_at, after=0, worker_pokes=1, checked_here=True)


def _rate_limited(sensor: BackoffSensor) -> bool:
    return bool(sensor.rate_limit or config_non_negative_float("max_checks_per_second_per_connection", 0.0))


def defer(
    sensor: BackoffSensor,
    context: Any,
    seed: str,
    started_at: float,
    *,
    after: int,
    worker_pokes: int,
    late_told: bool = False,
    checked_here: bool = False,
) -> Any:
    """Defer to ``BackoffTrigger`` with check ``after`` made. ``late_told``: this try already said it is late
    (``due=``); ``checked_here``: check ``after`` (#0) ran on this worker just now and was not met."""
    # The try's timeline, on the ``poke_interval`` grid (waits started seconds apart align). It stops at the
    # earlier deadline: a "timeout" at the execution deadline resumes into AirflowTaskTimeout (see resume).
    wait = poke_mode.sensor_try(sensor, seed, started_at, on_grid=True)
    line, ends = wait.line, wait.deadlines
    due_at = None if sensor.due is None else late.due_epoch(sensor.due, context, started_at)
    if due_at is not None and not late_told:
        try_number = int(getattr(poke_mode.task_instance(context), "try_number", 1) or 1)
        recorded = late_record.state(context, units.iso(due_at), try_number) if try_number > 1 else None
        # A first try, or no record (before 3.3): a retry after the due time takes it as said.
        if recorded is None:
            late_told = timeline.retried_after_due(try_number > 1, started_at, due_at)
        else:
            late_told = recorded == TOLD
        late_told = late_told or (
            checked_here and poke_mode.say_if_late(sensor, context, line, after, None, started_at)
        )
    now = clock.now()
    nxt = line.next_check(now, after)
    if nxt is None:
        poke_mode.schedule_ran_out(sensor, context, started_at, worker_pokes, line)
    if worker_pokes and after >= 0:
        poke_mode.log_not_yet(sensor, worker_pokes, after, nxt, now)
    # Slots of the schedule that passed before this deferral were no checks: the trigger starts after them.
    after = max(after, nxt.index - 1)
    from airflow_smart_ext.triggers import BackoffTrigger, routing  # lazy: keep DAG parsing cheap

    check = sensor.deferrable_check(context)
    routing.route(sensor, check)
    trigger = BackoffTrigger(
        check=check,
        policy=sensor.backoff_policy.to_dict(),
        seed=seed,
        started_at=line.anchor,
        deadline=ends.schedule,
        after=after,
        transient_errors=error_type_paths(sensor.transient_error_types),
        silent_fail=bool(getattr(sensor, "silent_fail", False)),
        check_timeout=sensor.check_timeout,
        rate_limit=sensor.rate_limit,
        due_at=due_at,
        late_told=late_told,
    )
    # The deadline never moves: every (re)defer gets only the time left (Deadlines.backstop).
    sensor.defer(
        trigger=trigger,
        method_name="execute_complete",
        kwargs={
            "started_at": started_at,
            "deadline": ends.timeout,
            "seed": seed,
            "worker_pokes": worker_pokes,
            "after": after,
            # only with a due time: a worker of an earlier release resumes every other deferral unchanged
            **({"late_told": late_told} if due_at is not None else {}),
        },
        timeout=datetime.timedelta(seconds=ends.backstop(now)),
    )


def resume(
    sensor: BackoffSensor,
    context: Any,
    event: Mapping[str, Any] | None,
    started_at: float | None,
    deadline: float | None,
    seed: str | None,
    worker_pokes: int,
    after: int | None,
    *,
    late_told: bool = False,
) -> Any:
    """Resume after ``BackoffTrigger`` (or the zero-worker start trigger) fired; outcomes map as in poke mode.
    A ``late`` event: say the wait is late, then defer again on the same schedule and deadline (a timeout
    after a last check that found it late says it first, then times out)."""
    event = dict(event or {})
    status = event.get("status")
    # Resumed from the zero-worker path: the try's start, deadline and seed travel in the event.
    started_at = event.get("started_at", started_at)
    deadline = event.get("deadline", deadline)
    seed = event.get("seed", seed)
    if event.get("checks") is not None:  # checks the trigger made (a lower bound after a triggerer restart)
        pokes = int(worker_pokes) + int(event["checks"])
        if event.get("checks_complete") is False:
            sensor.log.info(
                "The trigger was rebuilt (triggerer restart) or started late: checks made before it are not "
                "counted; %d poke(s) is a lower bound.",
                pokes,
            )
    elif after is not None and event.get("check_index") is not None:  # an event of an older version
        pokes = int(worker_pokes) + max(0, int(event["check_index"]) - int(after))
    else:
        pokes = max(int(worker_pokes), int(event.get("pokes", 0) or 0))
    started = float(started_at) if started_at is not None else clock.now()
    message = str(event.get("message") or "")
    sensor.log.info(
        "Trigger finished: status=%s after %d check(s) in the triggerer (last check #%s): %s",
        status,
        pokes - int(worker_pokes),
        event.get("check_index"),
        message,
    )
    if event.get("due_at") is not None and status in (timeline.LATE_EVENT, "timeout"):
        ti = poke_mode.task_instance(context) or poke_mode.StandInTaskInstance(sensor)
        try_number = int(getattr(ti, "try_number", 1) or 1)
        due_at = float(event["due_at"])
        recorded = late_record.state(context, units.iso(due_at), try_number)
        # No store, or one that cannot be read: a zero-worker event (its trigger took nothing as said, and it
        # carries the try's start) takes a retry after the due time as said, as ``defer`` does for a worker-first
        # try; a worker-first trigger's late event is one its deferral found owed.
        zero_worker = "started_at" in event
        if recorded is None:
            told = zero_worker and timeline.retried_after_due(try_number > 1, started, due_at)
        else:
            told = recorded == TOLD
        if sensor.due is not None and not told:
            resent = recorded == CUT_SHORT
            poke_mode.say_late(sensor, context, late.resumed_notice(sensor, ti, event, resent=resent))
    if status == timeline.LATE_EVENT and seed is not None:
        # The event's check number may be its sharing group's: the wait's own schedule goes on from now.
        return defer(sensor, context, seed, started, after=-1, worker_pokes=pokes, late_told=True)
    execution_end = event.get("execution_deadline")
    if execution_end is None and started_at is not None:
        execution_end = poke_mode.deadlines(sensor, float(started_at)).execution
    if (
        status == "timeout"
        and event.get("deadline_reached")
        and execution_end is not None
        and (deadline is None or execution_end < deadline)
    ):
        poke_mode.execution_timed_out(
            sensor
        )  # the trigger ended at the execution deadline, before the timeout
    if status == "timeout":  # the deadline (or a check that said time is up): skipped as on Airflow's base
        poke_mode.timed_out(sensor, context, started, pokes, resumed=True)
        return None
    if status not in ("success", "skip", "failure", "error"):
        raise compat.locations.AirflowException(f"Unexpected event from BackoffTrigger: {event!r}")
    if status == "failure":
        poke_mode.incr(sensor, "failures", context)
    ending = task_ending(
        status,
        soft_fail=sensor.soft_fail,
        never_fail=getattr(sensor, "never_fail", False),
        silent_fail=getattr(sensor, "silent_fail", False),
    )
    if ending is Ending.SUCCEED:
        return poke_mode.succeeded(sensor, context, started, pokes, event.get("xcom_value"), "deferrable")
    if ending is Ending.NOT_YET and deadline is not None and seed is not None:
        # silent_fail: a failing check is "not yet"; continue the same schedule and deadline, from now (the
        # event's check number may be its sharing group's, not this wait's).
        sensor.log.error("Check failed in the triggerer; silent_fail=True: continuing. %s", message)
        return defer(sensor, context, seed, started, after=-1, worker_pokes=pokes, late_told=late_told)
    if status == "skip":  # the poke raised AirflowSkipException in the triggerer, as in poke mode
        raise compat.locations.AirflowSkipException(message)
    if status == "failure":
        if ending is Ending.SKIP:
            raise compat.locations.AirflowSkipException(
                f"Failure criteria met; skipping (soft_fail/never_fail): {message}"
            )
        raise compat.locations.AirflowFailException(f"Failure criteria met: {message}")
    if ending is Ending.SKIP:
        raise compat.locations.AirflowSkipException(f"Check failed; skipping (never_fail=True): {message}")
    rebuilt = rebuild_error(event.get("error_class"), message)
    if rebuilt is not None:  # the check's own class, as poke mode raises it (retry policies read the class)
        sensor.log.error("The check raised in the triggerer: %s", message)
        raise rebuilt
    raise compat.locations.AirflowException(f"Check failed in the triggerer: {message}")


def deferral_timed_out(sensor: BackoffSensor) -> NoReturn:
    """Airflow's trigger timeout (the backstop) fired: the wait ends as poke mode does at the deadline it backs
    up, on every version. The execution deadline: a retryable task timeout. Else a sensor timeout, never
    retried (2.11 would raise a retryable TaskDeferralError), skipped as Airflow's base skips a resumed
    deferral's timeout (soft_fail; never_fail on 3.1+)."""
    if poke_mode.deadlines(sensor, 0.0).ends_by == timeline.EXECUTION_TIMEOUT:
        poke_mode.execution_timed_out(sensor)
    message = "Sensor has timed out: the deferral reached its timeout before the trigger reported."
    poke_mode.skip_timeout(sensor, message, resumed=True)
    raise compat.locations.AirflowSensorTimeout(message)


#: A key every deferral of ours carries in its resume kwargs (worker-first and zero-worker alike).
_OUR_RESUME_KEY = "worker_pokes"


def is_our_resume(next_kwargs: Mapping[str, Any] | None) -> bool:
    """Whether ``execute_complete`` resumes a deferral of ours (``defer`` above, or the zero-worker start)."""
    return _OUR_RESUME_KEY in (next_kwargs or {})
