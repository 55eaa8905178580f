"""bench_ha.py: one DAG per file copy, ``<dag_id>.py`` (parameters: ``<dag_id>.json``; a worker parses only
its own DAG)."""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from bench_dag_support import dag_params

from airflow_smart_ext.sensors import BackoffSqlSensor

PARAMS = dag_params(__file__)

with DAG(
    dag_id=PARAMS["dag_id"],
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_tasks=PARAMS["tasks"],
    max_active_runs=PARAMS["runs"],
):
    for number in range(PARAMS["tasks"]):
        BackoffSqlSensor(
            task_id=f"s{number:03d}",
            conn_id="bench_ha_pg",
            sql="SELECT bench_check(%(cond)s)",  # records the check with its time, returns ok
            parameters={"cond": f"c{number % PARAMS['k']}"},
            deferrable=True,
            start_from_trigger=False if PARAMS["worker_first"] else None,
            poke_interval=PARAMS["interval"],
            exponential_backoff=False,
            timeout=3600,
            retries=2,  # a retry would show as try_number 2
            retry_delay=dt.timedelta(seconds=1),
        )
