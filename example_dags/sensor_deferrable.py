"""### Deferrable backoff sensors: a custom sensor and BackoffSqlSensor waiting in the triggerer

With ``deferrable=True`` the first check runs on the worker; if the condition is not met yet the task
defers to ``BackoffTrigger``, which runs the very same checks on the same backoff schedule in the
triggerer (no worker slot held) and survives triggerer restarts without restarting the schedule.
Identical waits in one triggerer share their checks.

* ``FileArrivedSensor`` is re-created in the triggerer from its class path and constructor arguments,
  so the class must be importable by name there (it lives in ``sensor_common.py``, not in this file).
* ``BackoffSqlSensor`` ships its criteria as dotted paths (``"sensor_common.is_loaded"``), for the same
  reason; lambdas are refused at parse time (or use ``deferrable_fallback="reschedule"``).

``deliver`` makes the file and the row appear ~8 s later. Needs a running triggerer; connection
``smart_ext_example_sqlite`` as in ``sensor_sql_sqlite`` (defaulted by ``sensor_common``).
Trigger manually; finishes in well under a minute.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from sensor_common import EXAMPLE_CONN_ID, RUN_DIR_TEMPLATE, FileArrivedSensor, deliver_later, sqlite_path

from airflow_smart_ext.compat import task
from airflow_smart_ext.sensors import BackoffSqlSensor

DROP_FILE = RUN_DIR_TEMPLATE + "/report.json"

with DAG(
    dag_id="sensor_deferrable",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["airflow-smart-ext", "sensors", "deferrable"],
    doc_md=__doc__,
):

    @task
    def deliver(path: str, run_id: str | None = None) -> None:
        import os
        import sqlite3

        deliver_later(8, "file", path, '{"rows": 42}\n')
        db = sqlite_path(EXAMPLE_CONN_ID)
        os.makedirs(os.path.dirname(db), exist_ok=True)
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (batch TEXT, status TEXT)")
        deliver_later(8, "sql", db, "INSERT INTO orders (batch, status) VALUES (?, 'loaded')", str(run_id))

    delivered = deliver(DROP_FILE)
    delivered >> FileArrivedSensor(
        task_id="wait_for_file_deferred",
        path=DROP_FILE,
        deferrable=True,
        poke_interval=2,
        max_wait=8,
        timeout=60,
    )
    delivered >> BackoffSqlSensor(
        task_id="wait_for_row_deferred",
        conn_id=EXAMPLE_CONN_ID,
        sql="SELECT status FROM orders WHERE batch = :batch",
        parameters={"batch": "{{ run_id }}"},
        success="sensor_common.is_loaded",  # dotted paths: imported again in the triggerer
        failure="sensor_common.is_failed",
        deferrable=True,
        poke_interval=2,
        max_wait=8,
        timeout=60,
    )
