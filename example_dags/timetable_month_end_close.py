"""### MonthlyBusinessDayTimetable: month-end close on the last NYSE business day

One run per month on its last NYSE business day (``n=-1``), at 06:00 New York time the next morning.
With the default ``window="since_previous"`` the data intervals tile time: each run covers every day since
the previous close's interval ended, through its own close day.

2024-03-29 is Good Friday (NYSE closed), so March closes on Thursday the 28th; the April run then covers
2024-03-29 through 2024-04-30.
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow import DAG

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import MonthlyBusinessDayTimetable

NEW_YORK = "America/New_York"

with DAG(
    dag_id="timetable_month_end_close",
    schedule=MonthlyBusinessDayTimetable(n=-1, market="NYSE", delay=dt.timedelta(hours=6), timezone=NEW_YORK),
    start_date=pendulum.datetime(2024, 1, 1, tz=NEW_YORK),
    end_date=pendulum.datetime(2024, 4, 30, tz=NEW_YORK),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables"],
    doc_md=__doc__,
):

    @task
    def close_month(data_interval_start=None, data_interval_end=None):
        start = pendulum.instance(data_interval_start).in_tz(NEW_YORK)
        end = pendulum.instance(data_interval_end).in_tz(NEW_YORK)
        print(
            f"closing {start.to_date_string()} .. {end.subtract(days=1).to_date_string()} (interval {start} -> {end})"
        )

    close_month()
