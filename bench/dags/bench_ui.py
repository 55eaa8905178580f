"""bench_ui.py: one DAG of deferred SQL waits for the UI to list (parameters: bench_ui.json)."""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from bench_dag_support import dag_params

from airflow_smart_ext.sensors import BackoffSqlSensor

PARAMS = dag_params(__file__)

with DAG(
    dag_id="bench_ui",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
):
    for i in range(PARAMS["tasks"]):
        BackoffSqlSensor(
            task_id=f"wait_{i}",
            conn_id="bench_ui_db",
            sql=f"SELECT ok FROM cond WHERE k = 'c{i % PARAMS['k']}'",
            deferrable=True,
            poke_interval=60,
            max_wait=600,
            timeout=86400,
        )
