"""bench_cluster.py: one DAG of zero-worker SQL waits (parameters: bench_cluster.json)."""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from bench_dag_support import dag_params, start_counter

from airflow_smart_ext.sensors import BackoffSqlSensor

PARAMS = dag_params(__file__)

with DAG(
    dag_id=PARAMS["dag_id"],
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_tasks=PARAMS["n"],
    max_active_runs=PARAMS["runs"],
):
    for number in range(PARAMS["tasks"]):
        BackoffSqlSensor(
            task_id=f"s{number:03d}",
            conn_id="bench_cluster_pg",
            sql="SELECT bench_check(%(cond)s)",  # records the check with its time, returns ok
            parameters={"cond": f"c{number % PARAMS['k']}"},
            deferrable=True,
            poke_interval=PARAMS["interval"],
            exponential_backoff=False,
            timeout=7200,
            retries=2,  # a retry would show as try_number 2
            on_execute_callback=start_counter(PARAMS["starts"]),
        )
