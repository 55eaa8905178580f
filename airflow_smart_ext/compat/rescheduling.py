"""Sensor rescheduling: where a try's reschedules are counted (3.x: the task context; 2.11: TaskReschedule
rows of the metadata DB) and how soon a 3.x sensor may be rescheduled."""

from __future__ import annotations

import datetime
from typing import Any

from airflow_smart_ext import units
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS

__all__ = ["RESCHEDULE_MIN_GAP_SECONDS", "first_reschedule_anchor", "sensor_reschedule_state"]

# Airflow 3 (seen on 3.3.2 with LocalExecutor): a sensor rescheduled to run again soon can be failed by the
# scheduler when it drains the executor's "success" event of the previous run after the next run was queued
# (apache/airflow #71172, fix proposed in PR #71194; 3 s still lost runs on a loaded 2-core machine). The
# default of `[smart_ext] reschedule_min_gap_seconds`; reschedule mode never asks for a sooner reschedule.
RESCHEDULE_MIN_GAP_SECONDS = 5.0 if AIRFLOW_V_3_0_PLUS else 0.0


def sensor_reschedule_state(context: Any) -> tuple[int, datetime.datetime | None]:
    """Exact (number of reschedules, first reschedule start date) of the *current try*.

    3.x: the runner puts ``task_reschedule_count`` in the context and TaskReschedule rows belong to one
    try (a new try gets a new TI id), exactly what BaseSensorOperator.execute uses.
    2.11: TaskReschedule rows keep their try_number (a reschedule does not bump it, a clear deletes
    them); we read the rows of this try only, so a retry starts a new schedule like on 3.x.
    """
    ti = context["ti"]
    if AIRFLOW_V_3_0_PLUS:
        count = int(context.get("task_reschedule_count", 0) or 0)
        if count == 0:
            return 0, None
        first = ti.get_first_reschedule_date(context)
        # No first reschedule on record (a try whose reschedules were cleared): the try's first run, as
        # BaseSensorOperator.execute, which anchors on that date alone, takes it.
        return (count, first) if first is not None else (0, None)

    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    where = (
        TaskReschedule.dag_id == ti.dag_id,
        TaskReschedule.task_id == ti.task_id,
        TaskReschedule.run_id == ti.run_id,
        TaskReschedule.map_index == ti.map_index,
        TaskReschedule.try_number == ti.try_number,
    )
    with create_session() as session:
        count = session.scalar(select(func.count(TaskReschedule.id)).where(*where)) or 0
        first = session.scalar(
            select(TaskReschedule.start_date).where(*where).order_by(TaskReschedule.id.asc()).limit(1)
        )
    return int(count), first


def first_reschedule_anchor(context: Any, now: float) -> float:
    """Predict, in a sensor's first run, the first-reschedule date that later runs of the try will read.

    3.x: the API server stamps the TaskReschedule row when the reschedule is *reported*, i.e. just after the
    first run raises: ``now``. 2.11: the row carries the start_date of the run that raised (the TI's).
    Anchoring the first run there keeps its next check identical to what later runs compute, even when
    the first poke is slow.
    """
    if AIRFLOW_V_3_0_PLUS:
        return now
    start = getattr(context["ti"], "start_date", None)
    return units.epoch(start) if isinstance(start, datetime.datetime) else now
