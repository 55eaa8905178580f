"""Live timetable test DAG (tests/integration/test_timetables_live.py): RollingWindowTimetable(days=2).

America/New_York; catchup from local midnight three days before the session's day D (tt_live_today.py): runs
for D-3 and D-2 are due, each covering two whole local days ending at the next local midnight.
"""

from __future__ import annotations

from airflow import DAG
from tt_live_today import session_today

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import RollingWindowTimetable

TZ = "America/New_York"

with DAG(
    dag_id="tt_rolling_window_live",
    schedule=RollingWindowTimetable(days=2, timezone=TZ),
    start_date=session_today("tt_rolling_window_live", TZ).subtract(days=3),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "integration"],
):

    @task
    def noop() -> None:
        pass

    noop()
