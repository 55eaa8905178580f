"""Live timetable test DAG (tests/integration/test_timetables_live.py): BusinessDaysTimetable.

US federal business days in America/Chicago with ``window="since_previous"``; catchup from local midnight five
days before the session's day (tt_live_today.py; always at least one business day in such a span).
"""

from __future__ import annotations

from airflow import DAG
from tt_live_today import session_today

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import BusinessDaysTimetable

TZ = "America/Chicago"

with DAG(
    dag_id="tt_business_days_live",
    schedule=BusinessDaysTimetable(country="US", window="since_previous", timezone=TZ),
    start_date=session_today("tt_business_days_live", TZ).subtract(days=5),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "integration"],
):

    @task
    def noop() -> None:
        pass

    noop()
