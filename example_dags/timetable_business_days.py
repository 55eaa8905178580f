"""### BusinessDaysTimetable: NYSE trading days around Thanksgiving, weekend covered

One run per NYSE business day (``holidays`` library's NYSE calendar) in ``America/New_York``, at 01:00
local time after the day ends. ``window="since_previous"`` makes each run's data interval reach back to
the end of the previous business day's interval, so nothing is left uncovered:

* Friday 2024-11-29's run covers Thanksgiving (Thursday 28th, market closed) and the Friday;
* Monday 2024-12-02's run covers Saturday, Sunday and Monday.

With the default ``window="day"`` each run covers only its own business day.
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow import DAG
from timetable_common import show_interval

from airflow_smart_ext.timetables import BusinessDaysTimetable

NEW_YORK = "America/New_York"

with DAG(
    dag_id="timetable_business_days",
    schedule=BusinessDaysTimetable(
        market="NYSE", window="since_previous", delay=dt.timedelta(hours=1), timezone=NEW_YORK
    ),
    start_date=pendulum.datetime(2024, 11, 25, tz=NEW_YORK),
    end_date=pendulum.datetime(2024, 11, 30, 12, tz=NEW_YORK),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables"],
    doc_md=__doc__,
):
    show_interval(NEW_YORK)
