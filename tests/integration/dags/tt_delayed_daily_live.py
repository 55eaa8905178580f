"""Live timetable test DAG (tests/integration/test_timetables_live.py): DelayedDailyTimetable.

Asia/Kathmandu (UTC+05:45) so that local midnight is far from UTC midnight; catchup from local midnight three
days before the session's day (its first parse's, read back by every parse and the test: tt_live_today.py):
the scheduler must create exactly the runs for those three local days.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from tt_live_today import session_today

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import DelayedDailyTimetable

TZ = "Asia/Kathmandu"

with DAG(
    dag_id="tt_delayed_daily_live",
    schedule=DelayedDailyTimetable(delay=dt.timedelta(minutes=5), timezone=TZ),
    start_date=session_today("tt_delayed_daily_live", TZ).subtract(days=3),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "integration"],
):

    @task
    def noop() -> None:
        pass

    noop()
