"""### RollingWindowTimetable on business days: a 5-day window, New York business days only

``RollingWindowTimetable`` takes the same business-day calendar keywords as ``BusinessDaysTimetable``
(``market="NYSE"``, ``country=``/``subdivision=``, ``extra_holidays=``, ...; or ``calendar=BusinessCalendar(...)``):
it then runs only on business days of that calendar (here: US holidays for the state of New York plus one
company holiday, Friday 2024-07-05), and each run covers the last five local calendar days
``[D-4 00:00, D+1 00:00)``.

Independence Day (Thursday 2024-07-04) and the company holiday get no run; Monday 2024-07-08's window
still covers them.
"""

from __future__ import annotations

import pendulum
from airflow import DAG
from timetable_common import show_interval

from airflow_smart_ext.timetables import RollingWindowTimetable

NEW_YORK = "America/New_York"

with DAG(
    dag_id="timetable_business_rolling",
    schedule=RollingWindowTimetable(
        days=5, country="US", subdivision="NY", extra_holidays=["2024-07-05"], timezone=NEW_YORK
    ),
    start_date=pendulum.datetime(2024, 6, 27, tz=NEW_YORK),
    end_date=pendulum.datetime(2024, 7, 5, tz=NEW_YORK),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables"],
    doc_md=__doc__,
):
    show_interval(NEW_YORK, length_in=None)
