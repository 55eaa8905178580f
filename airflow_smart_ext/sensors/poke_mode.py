"""Poke mode, and what every mode shares: the schedule's clock, one poke with Airflow's exception semantics,
and the endings (success, timeout) with their log lines, metrics and stats XCom."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_smart_ext import clock, compat, units
from airflow_smart_ext.backoff import ScheduledCheck, task_seed
from airflow_smart_ext.conditions import Ending, outcome_from_exception
from airflow_smart_ext.conditions.outcomes import STATS_XCOM_KEY, outcome_ending
from airflow_smart_ext.sensors import late, late_record
from airflow_smart_ext.wait_model import timeline

if TYPE_CHECKING:
    from airflow_smart_ext.compat.locations import PokeReturnValue
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor

METRIC_PREFIX = "smart_ext.sensor"


def task_instance(context: Any) -> Any:
    """The context's task instance, or None: Airflow's own base runs ``execute({})`` / ``execute(None)`` (its
    tests and many users' unit tests do), so every mode's bookkeeping must do without one."""
    return context.get("ti") if isinstance(context, Mapping) else None


class StandInTaskInstance:
    """The task identity of a sensor run without a task instance in its context (``execute({})``)."""

    def __init__(self, sensor: Any) -> None:
        self.dag_id = str(getattr(sensor, "dag_id", "") or "")
        self.task_id = str(sensor.task_id)
        self.run_id, self.map_index, self.try_number = "", -1, 1


def with_task_instance(sensor: Any, context: Any) -> Mapping[str, Any]:
    """``context`` itself when it has a task instance, else a copy with a stand-in (for the check spec)."""
    if task_instance(context) is not None:
        return context
    return {**(context if isinstance(context, Mapping) else {}), "ti": StandInTaskInstance(sensor)}


def task_schedule_seed(context: Any, sensor: Any = None) -> str:
    ti = task_instance(context)
    if ti is None:  # no task instance (execute({})): the task's identity alone
        ti = StandInTaskInstance(sensor)
    map_index = getattr(ti, "map_index", -1)
    return task_seed(
        ti.dag_id,
        ti.task_id,
        ti.run_id,
        -1 if map_index is None else int(map_index),
        int(getattr(ti, "try_number", 1) or 1),
    )


def deadlines(sensor: BackoffSensor, started_at: float) -> timeline.Deadlines:
    """A try's deadlines from ``started_at``: the sensor timeout's, the ``execution_timeout``'s, the earlier."""
    limit = sensor.execution_timeout
    return timeline.deadlines(started_at, sensor.timeout, units.seconds(limit) if limit else None)


def sensor_try(
    sensor: BackoffSensor, seed: str, started_at: float, *, on_grid: bool = False
) -> timeline.SensorTry:
    """This try as the wait model states it (``timeline.SensorTry``), from the sensor's policy and timeouts.
    Every mode asks it, none asks the policy."""
    ends = deadlines(sensor, started_at)
    return timeline.SensorTry.from_start(sensor.backoff_policy, seed, started_at, ends, on_grid=on_grid)


def execution_timed_out(sensor: BackoffSensor) -> NoReturn:
    """What poke mode raises at ``execution_timeout``: AirflowTaskTimeout, retried while retries remain."""
    assert sensor.execution_timeout is not None
    raise compat.locations.AirflowTaskTimeout(
        f"Sensor reached its execution_timeout of {units.seconds(sensor.execution_timeout):g}s before its "
        f"timeout of {sensor.timeout:g}s (as in poke mode: a task timeout, retried while retries remain)."
    )


def poke_once(sensor: BackoffSensor, context: Any, index: int, pokes: int) -> tuple[bool, Any]:
    """One poke with Airflow's exception semantics (soft_fail / silent_fail / never_fail)."""
    incr(sensor, "pokes", context)
    try:
        result: bool | PokeReturnValue = sensor.poke(context)
    except compat.locations.AirflowSkipException:
        raise
    except compat.locations.CHECK_ERRORS as err:
        outcome = outcome_from_exception(err)
        ending, error_class = outcome_ending(
            outcome,
            sensor.transient_error_types,
            soft_fail=sensor.soft_fail,
            never_fail=getattr(sensor, "never_fail", False),
            silent_fail=getattr(sensor, "silent_fail", False),
        )
        if ending is Ending.NOT_YET:
            sensor.consecutive_errors += 1
            if error_class is not None and error_class.transient:
                sensor.log.warning(
                    "Poke #%d (check #%d) failed with a transient error (%s, %d in a row): %s; "
                    "treating it as 'not yet'",
                    pokes,
                    index,
                    error_class.reason,
                    sensor.consecutive_errors,
                    outcome.message,
                )
                incr(sensor, "transient_errors", context)
            else:
                sensor.log.exception(
                    "Poke #%d (check #%d) failed (%d in a row); silent_fail=True: treating it as 'not yet'",
                    pokes,
                    index,
                    sensor.consecutive_errors,
                )
            incr(sensor, "poke_errors", context)
            return False, None
        if ending is Ending.SKIP:
            flag = "soft_fail" if sensor.soft_fail and outcome.status != "error" else "never_fail"
            raise compat.locations.AirflowSkipException(f"Skipping due to {flag} is set to True.") from err
        raise  # the poke's own exception decides retries, as in Airflow
    sensor.consecutive_errors = 0
    if isinstance(result, compat.locations.PokeReturnValue):
        return bool(result.is_done), result.xcom_value
    return bool(result), None


def say_if_late(
    sensor: BackoffSensor,
    context: Any,
    line: timeline.Timeline,
    index: int,
    previous: int | None,
    try_started_at: float,
) -> bool:
    """After check ``index`` (``previous``: the try's check before it) found the condition not met: say once
    that the wait is late when this is the check that says it (``due=``; ``sensors/late.py``). Whether it
    said so."""
    if sensor.due is None:
        return False
    ti = task_instance(context) or StandInTaskInstance(sensor)
    notice = late.notice(sensor, context, ti, line, index, previous, try_started_at, clock.now())
    if notice is None:
        return False
    say_late(sensor, context, notice)
    return True


def say_late(sensor: BackoffSensor, context: Any, notice: dict[str, Any]) -> None:
    """Say it, recorded for the task instance's retries (``late_record``: begun, then done)."""
    try_number = int(getattr(task_instance(context), "try_number", 1) or 1)
    late_record.mark(context, notice["due"], try_number, telling=True)
    incr(sensor, "late", context)
    late.announce(sensor, context, notice)
    late_record.mark(context, notice["due"], try_number, telling=False)


def log_not_yet(sensor: BackoffSensor, pokes: int, index: int, nxt: ScheduledCheck, now: float) -> None:
    sensor.log.info(
        "Poke #%d (check #%d): condition not met; next check #%d in %.3fs at %s%s",
        pokes,
        index,
        nxt.index,
        max(0.0, nxt.at - now),
        units.iso(nxt.at),
        " (final check, at the timeout)" if nxt.final else "",
    )


def schedule_ran_out(
    sensor: BackoffSensor, context: Any, started_at: float, pokes: int, line: timeline.Timeline
) -> NoReturn:
    """No check is left before the schedule ends: ended as ``line.ends_by`` says — the execution timeout (a
    retryable ``AirflowTaskTimeout``, as poke mode's process is stopped there), else the sensor timeout."""
    if line.ends_by == timeline.EXECUTION_TIMEOUT:
        execution_timed_out(sensor)
    timed_out(sensor, context, started_at, pokes)


def timed_out(
    sensor: BackoffSensor, context: Any, started_at: float, pokes: int, *, resumed: bool = False
) -> NoReturn:
    """The sensor timeout: ``AirflowSensorTimeout`` (never retried), skipped with ``soft_fail``; with
    ``never_fail`` only when a deferral resumed (``resumed``) on an Airflow whose base skips it there (3.1+),
    as Airflow's poke mode does not skip a timeout with ``never_fail``."""
    waited = clock.now() - started_at
    incr(sensor, "timeouts", context)
    message = f"Sensor has timed out after {pokes} poke(s) and {waited:.1f}s (timeout {sensor.timeout:g}s)."
    skip_timeout(sensor, message, resumed)
    raise compat.locations.AirflowSensorTimeout(message)


def skip_timeout(sensor: BackoffSensor, message: str, resumed: bool) -> None:
    """Skip a timeout as this Airflow's base does: with ``soft_fail``; with ``never_fail`` after a deferral
    resumed, on 3.1+ (``compat.sensor_timeouts.NEVER_FAIL_SKIPS_A_RESUMED_TIMEOUT``)."""
    if sensor.soft_fail:
        raise compat.locations.AirflowSkipException(message + " Skipping (soft_fail=True).")
    if (
        resumed
        and compat.sensor_timeouts.NEVER_FAIL_SKIPS_A_RESUMED_TIMEOUT
        and getattr(sensor, "never_fail", False)
    ):
        raise compat.locations.AirflowSkipException(
            message + " Skipping (never_fail=True, as Airflow's base skips a resumed deferral's timeout)."
        )


def succeeded(
    sensor: BackoffSensor, context: Any, started_at: float, pokes: int, xcom_value: Any, mode: str
) -> Any:
    waited = max(0.0, clock.now() - started_at)
    sensor.log.info(
        "Success criteria met after %d poke(s), %.3fs after the start (%s mode, %s).",
        pokes,
        waited,
        mode,
        sensor.backoff_policy.describe(),
    )
    incr(sensor, "successes", context)
    ti = task_instance(context)
    if sensor.do_xcom_push and ti is not None:
        ti.xcom_push(
            key=STATS_XCOM_KEY, value={"pokes": pokes, "waited_seconds": round(waited, 3), "mode": mode}
        )
    return xcom_value


def incr(sensor: BackoffSensor, what: str, context: Any) -> None:
    ti = task_instance(context) or StandInTaskInstance(sensor)
    try:
        compat.locations.Stats.incr(
            f"{METRIC_PREFIX}.{what}",
            tags={"dag_id": ti.dag_id, "task_id": ti.task_id, "sensor": type(sensor).__name__},
        )
    except Exception:  # metrics must never fail a sensor
        sensor.log.debug("Could not emit metric %s", what, exc_info=True)


#: How long before Airflow's own ``execution_timeout`` alarm poke mode ends the try itself (see below).
EXECUTION_DEADLINE_MARGIN = 0.5


def execution_deadline(sensor: BackoffSensor, context: Any, started_at: float) -> float | None:
    """When poke mode ends a try at its ``execution_timeout`` itself, just before Airflow's SIGALRM would.

    Airflow 3's alarm handler logs through structlog, whose writer holds a non-reentrant lock: an alarm that
    lands while the task writes a log line (our line per check; a slow supervisor makes that write block)
    deadlocks the task, which then heartbeats "running" for ever. Ending the try from our own sleep, before
    the alarm, raises the same ``AirflowTaskTimeout`` and disarms the alarm on the way out. Counted from the
    try's start (the API server sets it before the worker arms the alarm), less a margin for clock skew.
    None: no ``execution_timeout``, or one too short to end first (the alarm does it, as before).
    """
    limit = sensor.execution_timeout
    if limit is None or units.seconds(limit) <= 2 * EXECUTION_DEADLINE_MARGIN:
        return None
    ti_start = getattr(task_instance(context), "start_date", None)
    try_started_at = (
        min(started_at, units.epoch(ti_start)) if isinstance(ti_start, datetime.datetime) else started_at
    )
    execution = deadlines(sensor, try_started_at).execution  # the wait model's execution deadline
    assert execution is not None  # an execution_timeout is set (above)
    return execution - EXECUTION_DEADLINE_MARGIN


def execute_poke(sensor: BackoffSensor, context: Any, seed: str) -> Any:
    """Poke mode: the whole wait on one worker, sleeping between the checks of the schedule."""
    started_at = clock.now()
    line = sensor_try(sensor, seed, started_at).line
    execution_ends_at = execution_deadline(sensor, context, started_at)
    index, pokes = 0, 1
    sensor.log.info(
        "Backoff schedule: %s; timeout %gs (poke mode)", sensor.backoff_policy.describe(), sensor.timeout
    )
    first_at = line.first_check_at()
    if execution_ends_at is not None and first_at >= execution_ends_at:
        clock.sleep(execution_ends_at - clock.now())
        execution_timed_out(sensor)
    if first_at > clock.now():
        # The splay: sensors created together spread their first poke over [0, splay).
        sensor.log.info("First poke splayed by %.3fs to %s", first_at - started_at, units.iso(first_at))
        clock.sleep(first_at - clock.now())
    previous: int | None = None
    while True:
        done, xcom_value = poke_once(sensor, context, index, pokes)
        if done:
            return succeeded(sensor, context, started_at, pokes, xcom_value, "poke")
        say_if_late(sensor, context, line, index, previous, started_at)
        nxt = line.next_check(clock.now(), index)
        if execution_ends_at is not None and (nxt is None or nxt.at >= execution_ends_at):
            sensor.log.info(
                "Poke #%d (check #%d): condition not met; the try ends at its execution_timeout at %s",
                pokes,
                index,
                units.iso(execution_ends_at),
            )
            clock.sleep(execution_ends_at - clock.now())
            execution_timed_out(sensor)
        if nxt is None:
            schedule_ran_out(sensor, context, started_at, pokes, line)
        now = clock.now()
        log_not_yet(sensor, pokes, index, nxt, now)
        if nxt.at > now:
            clock.sleep(nxt.at - now)
        previous, index, pokes = index, nxt.index, pokes + 1
