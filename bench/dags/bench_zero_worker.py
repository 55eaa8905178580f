"""bench_zero_worker.py: one DAG per path of SQL waits (parameters: bench_zero_worker.json)."""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from bench_dag_support import dag_params, start_counter

from airflow_smart_ext.sensors import BackoffSqlSensor

PARAMS = dag_params(__file__)

for path, tasks, runs in PARAMS["paths"]:
    with DAG(
        dag_id=f"bench_zw_{path}",
        schedule=None,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_tasks=tasks,
        max_active_runs=runs,
    ):
        for number in range(tasks):
            BackoffSqlSensor(
                task_id=f"s{number:03d}",
                conn_id="bench_zw_pg",
                sql="SELECT bench_check(%(cond)s)",  # records the check with its time, returns ok
                parameters={"cond": f"c{number % PARAMS['k']}"},
                deferrable=path != "reschedule",
                start_from_trigger=False if path == "worker_first" else None,
                mode="reschedule" if path == "reschedule" else "poke",
                poke_interval=PARAMS["poke_interval"],
                exponential_backoff=False,
                timeout=3600,
                on_execute_callback=start_counter(PARAMS["starts"]),
            )
