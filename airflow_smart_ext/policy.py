"""The package's Airflow DAG policy (``airflow.policy`` entry point): a DAG whose schedule needs holiday
data its calendar does not have fails to import, with the reason, instead of silently never running.

Airflow calls ``dag_policy`` for every DAG it parses (DagBag.bag_dag: the dag-processor on 3.x, the
scheduler's DAG processing on 2.11) and records an ``AirflowClusterPolicyViolation`` as the file's import
error. Skipped while a worker parses the file to run a task (that run exists: its days were covered, and
the time-dependent check must not fail the last covered run's tasks). A DAG that does not use one of our timetables costs one attribute read and a type check. Switch off
with ``[smart_ext] check_holiday_coverage = False`` (``AIRFLOW__SMART_EXT__CHECK_HOLIDAY_COVERAGE=False``).
"""

from __future__ import annotations

import datetime
from typing import Any

from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.policies import hookimpl

_PACKAGE = __name__.rpartition(".")[0] + "."


@hookimpl
def dag_policy(dag: Any) -> None:
    timetable = getattr(dag, "timetable", None)
    if not type(timetable).__module__.startswith(_PACKAGE):
        return  # not ours: nothing imported, nothing computed
    # imported here: the entry point loads while Airflow's settings initialise, before the timetables can
    from airflow.configuration import conf  # noqa: PLC0415

    from airflow_smart_ext.compat.dag_parsing import parsing_for_a_task  # noqa: PLC0415
    from airflow_smart_ext.timetables.local_day import LocalDayTimetable  # noqa: PLC0415
    from airflow_smart_ext.timetables.uncovered_day import coverage_problem  # noqa: PLC0415

    if not isinstance(timetable, LocalDayTimetable):
        return
    if not conf.getboolean("smart_ext", "check_holiday_coverage", fallback=True):
        return
    if parsing_for_a_task():
        return  # a worker running a task of an existing run: its data was covered; never fail that task
    start, end, catchup = time_restriction(dag)
    problem = coverage_problem(
        timetable, start=start, end=end, catchup=catchup, now=datetime.datetime.now(datetime.timezone.utc)
    )
    if problem is not None:
        raise AirflowClusterPolicyViolation(f"DAG {dag.dag_id!r}: {problem}")


def time_restriction(dag: Any) -> tuple[datetime.datetime | None, datetime.datetime | None, bool]:
    """(earliest, latest, catchup) as the scheduler derives them (Airflow's ``DAG._time_restriction``: the
    earliest task or DAG start_date; end_date only when every task has one)."""
    tasks = list(getattr(dag, "tasks", ()))
    starts = [t.start_date for t in tasks if t.start_date] + ([dag.start_date] if dag.start_date else [])
    ends = [t.end_date for t in tasks if t.end_date]
    latest = dag.end_date
    if tasks and len(ends) == len(tasks):
        latest = max(ends + ([dag.end_date] if dag.end_date else []))
    return (min(starts) if starts else None), latest, bool(dag.catchup)
