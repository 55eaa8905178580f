"""### BusinessDaysTimetable on a Sunday-Thursday calendar: Israel

The ``holidays`` library models each calendar's own weekend: Israel rests on Friday and Saturday, so
``country="IL"`` runs Sunday to Thursday (the summary says so: "IL business days (weekend Fri/Sat)").
With ``window="since_previous"`` Sunday's run covers Friday, Saturday and Sunday.

Preview it::

    python -m airflow_smart_ext.preview example_dags/timetable_israel_business_days.py --at 2024-12-08T12:00
"""

from __future__ import annotations

import pendulum
from airflow import DAG

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import BusinessDaysTimetable

JERUSALEM = "Asia/Jerusalem"

with DAG(
    dag_id="timetable_israel_business_days",
    schedule=BusinessDaysTimetable(country="IL", window="since_previous", timezone=JERUSALEM),
    start_date=pendulum.datetime(2024, 12, 5, tz=JERUSALEM),
    end_date=pendulum.datetime(2024, 12, 12, tz=JERUSALEM),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables"],
    doc_md=__doc__,
):

    @task
    def load(data_interval_start=None, data_interval_end=None):
        start = pendulum.instance(data_interval_start).in_tz(JERUSALEM)
        end = pendulum.instance(data_interval_end).in_tz(JERUSALEM)
        print(f"loading {start} -> {end}")

    load()
