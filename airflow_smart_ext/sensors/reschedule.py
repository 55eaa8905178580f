"""Reschedule mode: one poke per worker run; between checks the task waits in the scheduler (up_for_reschedule)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_smart_ext import clock, compat, units
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.sensors import poke_mode
from airflow_smart_ext.wait_model import timeline

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor

# Reschedule mode waits for a splayed first poke only when the splay offset is at least this long: a
# shorter wait is not worth a trip through the scheduler (poke mode always sleeps it).
SPLAY_RESCHEDULE_MIN_SECONDS = 1.0


def min_gap_seconds() -> float:
    """The least time to a reschedule: ``[smart_ext] reschedule_min_gap_seconds`` (Airflow 3: 5, else 0).
    A scheduler whose loop stalls for longer than this on a busy machine may need more (see compat)."""
    return runtime.config_non_negative_float(
        "reschedule_min_gap_seconds", compat.rescheduling.RESCHEDULE_MIN_GAP_SECONDS
    )


def execute_reschedule(sensor: BackoffSensor, context: Any, seed: str) -> Any:
    # The exact number of earlier pokes of this try and the try's anchor, from Airflow's records
    # (not re-estimated by replaying intervals as Airflow's own sensor does).
    count, first_date = compat.rescheduling.sensor_reschedule_state(context)
    started_at = units.epoch(first_date) if first_date is not None else clock.now()
    line = poke_mode.sensor_try(sensor, seed, started_at).line
    # Earlier pokes of this try were checks 0..count-1 in order; a late reschedule skips checks whose
    # time has passed, which next_check(now=...) skips anyway, so `after=count` gives the same answer.
    # A splay of at least SPLAY_RESCHEDULE_MIN_SECONDS costs the first run a reschedule without a poke;
    # whether it did is a pure function of the seed, so later runs know which index they are at.
    # Airflow 3 needs a reschedule at least min_gap ahead (executor race): a shorter splay is slept on the
    # worker instead.
    min_gap = min_gap_seconds()
    splay_wait = line.splay() >= max(SPLAY_RESCHEDULE_MIN_SECONDS, min_gap)
    if count == 0:
        sensor.log.info(
            "Backoff schedule: %s; timeout %gs (reschedule mode)",
            sensor.backoff_policy.describe(),
            sensor.timeout,
        )
        first_at = line.first_check_at()
        if first_at > clock.now():
            sensor.log.info(
                "First poke splayed by %.3fs to %s",
                first_at - started_at,
                units.iso(first_at),
            )
            if splay_wait:
                run_at = max(first_at, clock.now() + min_gap)
                raise compat.locations.AirflowRescheduleException(units.utc(run_at))
            clock.sleep(first_at - clock.now())  # too short for a reschedule: as poke mode does
    assert line.deadline is not None  # a sensor's try always has one
    if count > 0 and line.ends_by == timeline.EXECUTION_TIMEOUT and clock.now() >= line.deadline:
        # Brought back at or after the execution deadline (Airflow's minimum reschedule gap, a late
        # scheduler): poke mode's process would have been stopped by then, so no check is made.
        poke_mode.execution_timed_out(sensor)
    index = count - 1 if splay_wait and count > 0 else count
    pokes = index + 1
    done, xcom_value = poke_mode.poke_once(sensor, context, index, pokes)
    if done:
        return poke_mode.succeeded(sensor, context, started_at, pokes, xcom_value, "reschedule")
    if count == 0:
        # Later runs anchor on the first reschedule's recorded start date: predict it now, so a slow
        # first poke does not shift the schedule (and the deadline) between this run and the next.
        started_at = compat.rescheduling.first_reschedule_anchor(context, clock.now())
        line = poke_mode.sensor_try(sensor, seed, started_at).line
    poke_mode.say_if_late(sensor, context, line, index, index - 1 if index > 0 else None, started_at)
    # execution_timeout ends the try as in poke mode (one process there, one per check here): the timeline
    # stops at the earlier deadline, and reaching the execution deadline is a retryable AirflowTaskTimeout.
    nxt = line.next_check(clock.now(), index)
    if nxt is None:
        poke_mode.schedule_ran_out(sensor, context, started_at, pokes, line)
    now = clock.now()
    poke_mode.log_not_yet(sensor, pokes, index, nxt, now)
    run_at = max(nxt.at, now + min_gap)
    if run_at > nxt.at:
        sensor.log.info(
            "Check #%d runs %.3fs late: Airflow reschedules no sooner than %gs (executor race)",
            nxt.index,
            run_at - nxt.at,
            min_gap,
        )
    raise compat.locations.AirflowRescheduleException(units.utc(run_at))
