"""### BackoffSqlSensor on SQLite: common-sql's SqlSensor arguments, a backoff schedule, bound parameters

``prepare`` creates an ``orders`` table in the SQLite database of the connection
``smart_ext_example_sqlite`` and arranges for this run's batch row to arrive ~8 s later with the status
``loaded``. ``wait_for_batch`` polls with backoff until the first row meets ``success``; a ``failed``
status would fail the task at once (``failure``), without retries.

``parameters`` are bound by the driver (``:batch``), never formatted into the SQL, so a run id such as
``x' OR '1'='1`` is just a value.

Connection: none to create. ``sensor_common`` defaults ``AIRFLOW_CONN_SMART_EXT_EXAMPLE_SQLITE`` to
``$AIRFLOW_HOME/smart_ext_examples/example.db`` unless that environment variable is already set.
Trigger manually; finishes in well under a minute.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from sensor_common import EXAMPLE_CONN_ID, deliver_later, is_failed, is_loaded, sqlite_path

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.sensors import BackoffSqlSensor

with DAG(
    dag_id="sensor_sql_sqlite",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["airflow-smart-ext", "sensors"],
    doc_md=__doc__,
):

    @task
    def prepare(run_id: str | None = None) -> None:
        import os
        import sqlite3

        db = sqlite_path(EXAMPLE_CONN_ID)
        os.makedirs(os.path.dirname(db), exist_ok=True)
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (batch TEXT, status TEXT)")
        deliver_later(8, "sql", db, "INSERT INTO orders (batch, status) VALUES (?, 'loaded')", str(run_id))
        print(f"batch {run_id!r} will arrive in {db} in ~8 s")

    prepare() >> BackoffSqlSensor(
        task_id="wait_for_batch",
        conn_id=EXAMPLE_CONN_ID,
        sql="SELECT status FROM orders WHERE batch = :batch",
        parameters={"batch": "{{ run_id }}"},  # templated, then bound
        success=is_loaded,
        failure=is_failed,  # AirflowFailException: no retries
        poke_interval=2,
        max_wait=8,
        timeout=60,
        retries=2,
    )
