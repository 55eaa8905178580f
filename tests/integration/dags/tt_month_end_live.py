"""Live timetable test DAG (tests/integration/test_timetables_live.py): MonthlyBusinessDayTimetable(n=-1).

Last US business day of the month in Europe/Berlin; catchup from the first day of the month before the
session's day's month (tt_live_today.py): exactly one run (the previous month's close) is due.
"""

from __future__ import annotations

from airflow import DAG
from tt_live_today import session_today

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import MonthlyBusinessDayTimetable

TZ = "Europe/Berlin"

with DAG(
    dag_id="tt_month_end_live",
    schedule=MonthlyBusinessDayTimetable(n=-1, country="US", timezone=TZ),
    start_date=session_today("tt_month_end_live", TZ).start_of("month").subtract(months=1),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "integration"],
):

    @task
    def noop() -> None:
        pass

    noop()
