"""### DelayedDailyTimetable across the New York spring-forward day

One run per local day in ``America/New_York``; each run covers ``[D 00:00, D+1 00:00)`` local time and
starts at 02:00 local time the next morning (``delay=timedelta(hours=2)``: yesterday's data, processed when
a third party has delivered it).

The range crosses 2024-03-10, when New York skips 02:00-03:00: that day's interval is 23 hours long, and
the run for 2024-03-09, due at 02:00 on the 10th (a time that does not exist), starts at 03:00 EDT.
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow import DAG
from timetable_common import show_interval

from airflow_smart_ext.timetables import DelayedDailyTimetable

NEW_YORK = "America/New_York"

with DAG(
    dag_id="timetable_delayed_daily",
    schedule=DelayedDailyTimetable(delay=dt.timedelta(hours=2), timezone=NEW_YORK),
    start_date=pendulum.datetime(2024, 3, 8, tz=NEW_YORK),
    end_date=pendulum.datetime(2024, 3, 12, tz=NEW_YORK),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables"],
    doc_md=__doc__,
):
    show_interval(NEW_YORK, length_in="hours")
