"""Live timetable test DAG (tests/integration/test_timetables_live.py): catchup=False, start_date years ago.

Stays paused: the test compares the next run the dag-processor/scheduler planned (the ``dag`` table's
``next_dagrun*`` columns) with ``next_dagrun_info(catchup=False)`` of the timetable: the latest due run, not
the first one since 2020 (the same answer as after a pause with a last run far in the past). A monthly
schedule, so the expected run changes only once a month (no race with the clock).
"""

from __future__ import annotations

import pendulum
from airflow import DAG

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import MonthlyBusinessDayTimetable

TZ = "America/New_York"

with DAG(
    dag_id="tt_catchup_false_live",
    schedule=MonthlyBusinessDayTimetable(n=1, market="NYSE", timezone=TZ),
    start_date=pendulum.datetime(2020, 1, 1, tz=TZ),
    catchup=False,
    tags=["airflow-smart-ext", "integration"],
):

    @task
    def noop() -> None:
        pass

    noop()
