"""Live timetable test DAGs (tests/integration/test_timetables_live.py), one per row: each catches up from a few
days before the session's day D (tt_live_today.py: the first parse's day, read back by every parse and the
test), so the scheduler must create exactly the runs due in that span.

* ``tt_delayed_daily_live``: DelayedDailyTimetable, 5 min after local midnight in Asia/Kathmandu (UTC+05:45,
  local midnight far from UTC's); from D-3: the runs of those three local days.
* ``tt_rolling_window_live``: RollingWindowTimetable(days=2) in America/New_York; from D-3: runs for D-3 and
  D-2, each covering two whole local days ending at the next local midnight.
* ``tt_business_days_live``: US federal business days in America/Chicago, ``window="since_previous"``; from
  D-5 (always at least one business day in such a span).
* ``tt_month_end_live``: the last US business day of the month in Europe/Berlin; from the first day of the
  month before D's: exactly one run (the previous month's close) is due.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from tt_live_today import session_today

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)

# dag_id -> (time zone, its timetable in that zone, its start date from the session's day D)
LIVE = {
    "tt_delayed_daily_live": (
        "Asia/Kathmandu",
        lambda tz: DelayedDailyTimetable(delay=dt.timedelta(minutes=5), timezone=tz),
        lambda today: today.subtract(days=3),
    ),
    "tt_rolling_window_live": (
        "America/New_York",
        lambda tz: RollingWindowTimetable(days=2, timezone=tz),
        lambda today: today.subtract(days=3),
    ),
    "tt_business_days_live": (
        "America/Chicago",
        lambda tz: BusinessDaysTimetable(country="US", window="since_previous", timezone=tz),
        lambda today: today.subtract(days=5),
    ),
    "tt_month_end_live": (
        "Europe/Berlin",
        lambda tz: MonthlyBusinessDayTimetable(n=-1, country="US", timezone=tz),
        lambda today: today.start_of("month").subtract(months=1),
    ),
}

for dag_id, (tz, timetable, start) in LIVE.items():
    with DAG(
        dag_id=dag_id,
        schedule=timetable(tz),
        start_date=start(session_today(dag_id, tz)),
        catchup=True,
        max_active_runs=2,
        tags=["airflow-smart-ext", "integration"],
    ) as dag:

        @task
        def noop() -> None:
            pass

        noop()
    globals()[dag_id] = dag
