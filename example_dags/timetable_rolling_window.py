"""### RollingWindowTimetable: a 3-day window across the Berlin DST change

One run per local day D in ``Europe/Berlin``; each run covers the last three local days
``[D-2 00:00, D+1 00:00)``, so consecutive intervals overlap (retention / D-3 style re-processing).

The window is counted in local calendar days, not 72-hour blocks: windows containing 2024-03-31 (clocks go
from 02:00 to 03:00) are 71 hours long and still start and end at local midnight.
"""

from __future__ import annotations

import pendulum
from airflow import DAG

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import RollingWindowTimetable

BERLIN = "Europe/Berlin"

with DAG(
    dag_id="timetable_rolling_window",
    schedule=RollingWindowTimetable(days=3, timezone=BERLIN),
    start_date=pendulum.datetime(2024, 3, 28, tz=BERLIN),
    end_date=pendulum.datetime(2024, 4, 1, tz=BERLIN),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables"],
    doc_md=__doc__,
):

    @task
    def show_interval(data_interval_start=None, data_interval_end=None):
        start = pendulum.instance(data_interval_start).in_tz(BERLIN)
        end = pendulum.instance(data_interval_end).in_tz(BERLIN)
        print(f"data interval {start.isoformat()} -> {end.isoformat()} ({(end - start).in_hours()} h)")

    show_interval()
