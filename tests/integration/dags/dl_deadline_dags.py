"""Integration-test DAG for ``DueTimeDeadline`` (tests/integration/test_deadlines_live.py). Airflow >= 3.3.

A DAG-level ``DeadlineAlert`` due 09:30 New York on the first NYSE session on or after the run's logical date,
with no grace. The test triggers runs with logical dates in the past, so each run is past its deadline as
soon as it exists; its one task waits for the file ``dag_run.conf["path"]`` so the run is not done when the
scheduler checks the deadline. The alert's callback (tests/integration/plugins/dl_callbacks.py, run by the
triggerer) appends a line to ``$AIRFLOW_HOME/dl_deadline_calls.jsonl``. On Airflow < 3.3 this file defines no DAG.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow import DAG
from sn_sensors import FileArrivedSensor

from airflow_smart_ext.compat.deadlines import CUSTOM_DEADLINE_REFERENCES
from airflow_smart_ext.timetables import DueTime

# Where the callback writes: a path fixed at parse (a deadline callback's kwargs are the DAG's, not the run's).
CALLS = os.path.join(os.environ.get("AIRFLOW_HOME", "/tmp"), "dl_deadline_calls.jsonl")
NYSE_0930 = DueTime("09:30", market="NYSE", timezone="America/New_York", reference="logical_date")

if CUSTOM_DEADLINE_REFERENCES:
    from airflow.sdk import AsyncCallback, DeadlineAlert

    from airflow_smart_ext.deadlines import DueTimeDeadline

    with DAG(
        dag_id="dl_due_nyse",
        schedule=None,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        tags=["airflow-smart-ext", "integration"],
        deadline=DeadlineAlert(
            reference=DueTimeDeadline(NYSE_0930),
            interval=dt.timedelta(0),
            callback=AsyncCallback("dl_callbacks.record_missed", kwargs={"path": CALLS}),
        ),
    ):
        FileArrivedSensor(
            task_id="wait",
            path="{{ dag_run.conf['path'] }}",
            mode="reschedule",
            poke_interval=3,
            max_wait=6,
            jitter="none",
            splay=0,
            timeout=300,
        )
