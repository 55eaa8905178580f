"""### RollingWindowTimetable: a 3-day window across the Berlin DST change

One run per local day D in ``Europe/Berlin``; each run covers the last three local days
``[D-2 00:00, D+1 00:00)``, so consecutive intervals overlap (retention / D-3 style re-processing).

The window is counted in local calendar days, not 72-hour blocks: windows containing 2024-03-31 (clocks go
from 02:00 to 03:00) are 71 hours long and still start and end at local midnight.
"""

from __future__ import annotations

import pendulum
from airflow import DAG
from timetable_common import show_interval

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
    show_interval(BERLIN, length_in="hours")
