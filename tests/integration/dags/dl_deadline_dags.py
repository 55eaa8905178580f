"""Integration-test DAGs for ``DueTimeDeadline`` (tests/integration/test_deadlines_live.py). Airflow >= 3.3.

Each has a DAG-level ``DeadlineAlert`` whose reference is the first NYSE session's 09:30 New York at or after
a run instant, with no grace, and one task that waits for a file, so a run is not done when its deadline
passes. The alert's callback (tests/integration/plugins/dl_callbacks.py, run by the triggerer) appends a line
to ``$AIRFLOW_HOME/dl_deadline_calls.jsonl``.

* ``dl_due_nyse``: counts from the logical date; the test triggers it (the api-server creates the run and
  evaluates the reference) with past logical dates and ``conf["path"]``.
* ``dl_due_nyse_scheduled``: daily at 00:00 UTC (``CronTriggerTimetable``: the interval ends at the run time)
  with catchup over one past day, so the scheduler creates exactly one run, at 2025-11-27 00:00 UTC, and
  evaluates the reference from its ``data_interval_end``; it waits for ``$AIRFLOW_HOME/dl_scheduled_landed``.

On Airflow < 3.3 this file defines no DAG.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow import DAG
from sn_sensors import FileArrivedSensor

from airflow_smart_ext.compat.deadlines import CUSTOM_DEADLINE_REFERENCES
from airflow_smart_ext.timetables import DueTime

HOME = os.environ.get("AIRFLOW_HOME", "/tmp")
# Where the callback writes: fixed at parse (a deadline callback's kwargs are the DAG's, not the run's).
CALLS = os.path.join(HOME, "dl_deadline_calls.jsonl")
SCHEDULED_FLAG = os.path.join(HOME, "dl_scheduled_landed")
UTC = dt.timezone.utc
WAIT = {"mode": "reschedule", "poke_interval": 3, "max_wait": 6, "jitter": "none", "splay": 0, "timeout": 900}

if CUSTOM_DEADLINE_REFERENCES:
    from airflow.sdk import AsyncCallback, DeadlineAlert
    from airflow.timetables.trigger import CronTriggerTimetable

    from airflow_smart_ext.deadlines import DueTimeDeadline

    def nyse_0930(reference: str) -> DeadlineAlert:
        return DeadlineAlert(
            reference=DueTimeDeadline(
                DueTime("09:30", market="NYSE", timezone="America/New_York", reference=reference)
            ),
            interval=dt.timedelta(0),
            callback=AsyncCallback("dl_callbacks.record_missed", kwargs={"path": CALLS}),
        )

    with DAG(
        dag_id="dl_due_nyse",
        schedule=None,
        start_date=dt.datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        tags=["airflow-smart-ext", "integration"],
        deadline=nyse_0930("logical_date"),
    ):
        FileArrivedSensor(task_id="wait", path="{{ dag_run.conf['path'] }}", **WAIT)

    with DAG(
        dag_id="dl_due_nyse_scheduled",
        schedule=CronTriggerTimetable("0 0 * * *", timezone="UTC"),
        start_date=dt.datetime(2025, 11, 27, tzinfo=UTC),
        end_date=dt.datetime(2025, 11, 27, 12, tzinfo=UTC),
        catchup=True,
        tags=["airflow-smart-ext", "integration"],
        deadline=nyse_0930("data_interval_end"),
    ):
        FileArrivedSensor(task_id="wait", path=SCHEDULED_FLAG, **WAIT)
