"""### Calendar algebra + business-day lag: settle trades of days both NYSE and LSE trade, at T+2

``BusinessCalendar(market="NYSE") & BusinessCalendar(market="XLON")`` is the set of days **both** markets
are open; ``lag=2`` processes business day D at 06:00 New York time on the 2nd such day after D (T+2). The
data interval stays the trading day D; only the run time moves.

Christmas 2024: 12-25 both closed, 12-26 LSE closed (Boxing Day) - so Monday 12-23 settles on Friday 12-27
and Tuesday 12-24 on Monday 12-30. Preview it::

    python -m airflow_smart_ext.preview example_dags/timetable_cross_market_settlement.py --at 2024-12-23
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow import DAG

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import BusinessDaysTimetable

NEW_YORK = "America/New_York"
BOTH_OPEN = BusinessCalendar(market="NYSE") & BusinessCalendar(market="XLON")

with DAG(
    dag_id="timetable_cross_market_settlement",
    schedule=BusinessDaysTimetable(calendar=BOTH_OPEN, lag=2, delay=dt.timedelta(hours=6), timezone=NEW_YORK),
    start_date=pendulum.datetime(2024, 12, 20, tz=NEW_YORK),
    end_date=pendulum.datetime(2024, 12, 31, tz=NEW_YORK),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables"],
    doc_md=__doc__,
):

    @task
    def settle(data_interval_start=None, data_interval_end=None):
        day = pendulum.instance(data_interval_start).in_tz(NEW_YORK)
        print(
            f"settling trades of {day.to_date_string()} (interval {data_interval_start} -> {data_interval_end})"
        )

    settle()
