"""### Deferrable backoff sensors: a custom sensor and BackoffSqlSensor waiting in the triggerer

With ``deferrable=True`` the wait runs in the triggerer on the same backoff schedule as in poke mode
(no worker slot held), survives triggerer restarts without restarting the schedule, and identical waits in
one triggerer share their checks. Where Airflow allows it (3.3+; 2.11 for untemplated arguments) the task
takes the **zero-worker path**: the scheduler starts it in the triggerer (check #0 runs there, templates
rendered there) and a success ends it there — its state history is ``deferred > success``, no worker
process at all. ``wait_for_file_worker_first`` asks for the older worker-first deferral
(``start_from_trigger=False``: check #0 on a worker, then the triggerer, then a worker resume) for contrast;
its task log says so. See docs/deferrable.md, "Zero-worker waits".

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

from airflow_smart_ext.compat.locations import task
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
    delivered >> FileArrivedSensor(
        task_id="wait_for_file_worker_first",
        path=DROP_FILE,
        deferrable=True,
        start_from_trigger=False,
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
