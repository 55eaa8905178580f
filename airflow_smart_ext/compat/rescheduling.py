"""Sensor rescheduling: where a try's reschedules are counted (3.x: the task context; 2.11: TaskReschedule
rows of the metadata DB), how soon a 3.x sensor may be rescheduled, and which TaskReschedule rows are a try's
(3.x: its TI id; 2.11: its try_number)."""

from __future__ import annotations

import datetime
from typing import Any

from airflow_smart_ext import units
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS

__all__ = [
    "RESCHEDULE_MIN_GAP_SECONDS",
    "first_reschedule_anchor",
    "sensor_reschedule_state",
    "task_instance_id",
    "try_reschedules",
]

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


def task_instance_id() -> Any:
    """The column :func:`try_reschedules` keys a try's rows by on 3.x (``TaskInstance.id``, new per try);
    2.11 has none (its rows carry the try_number): a NULL labelled alike."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import null

    return TaskInstance.id if AIRFLOW_V_3_0_PLUS else null().label("id")


def try_reschedules(session: Any, tis: Any) -> dict[tuple[Any, ...], tuple[int, Any, Any]]:
    """(how many, the first one's start_date, the last reschedule_date) of the reschedules of the current try
    of task instances ``tis`` (rows with ``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number`` and
    :func:`task_instance_id` as ``id``), by (dag_id, run_id, task_id, map_index); counted by the database.
    3.x: a try's rows carry its TI id; 2.11: its key and try_number."""
    from airflow.models.taskreschedule import TaskReschedule as Rows
    from sqlalchemy import func, select, tuple_

    found: dict[tuple[Any, ...], tuple[int, Any, Any]] = {}
    tis = list(tis)
    summary = (func.count(Rows.id), func.min(Rows.start_date), func.max(Rows.reschedule_date))
    if AIRFLOW_V_3_0_PLUS:
        key_of_id = {str(ti.id): (ti.dag_id, ti.run_id, ti.task_id, ti.map_index) for ti in tis}
        ids = [ti.id for ti in tis]
        for start in range(0, len(ids), 500):  # bound-parameter limits (SQLite's)
            chunk = ids[start : start + 500]
            by_id = select(Rows.ti_id, *summary).where(Rows.ti_id.in_(chunk)).group_by(Rows.ti_id)
            for ti_id, count, first, last in session.execute(by_id):
                found[key_of_id[str(ti_id)]] = (count, first, last)
        return found
    columns = (Rows.dag_id, Rows.run_id, Rows.task_id, Rows.map_index, Rows.try_number)
    tries = [(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number) for ti in tis]
    for start in range(0, len(tries), 100):  # five bound parameters each
        chunk = tries[start : start + 100]
        by_try = select(*columns, *summary).where(tuple_(*columns).in_(chunk)).group_by(*columns)
        for dag_id, run_id, task_id, map_index, _try, count, first, last in session.execute(by_try):
            found[dag_id, run_id, task_id, map_index] = (count, first, last)
    return found
