"""Deferrable sensors templated with a connection password (issue 23): worker-first unmapped, worker-first
mapped, and the zero-worker path (where this Airflow starts a templated sensor in the triggerer)."""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from sc_sensors import TokenFileSensor

TOKEN = "{{ conn.sc_secret_conn.password }}"
# retries: a try lost to a loaded machine (an execution-API timeout) must not fail the scenario.
COMMON = {
    "poke_interval": 1,
    "max_wait": 2,
    "timeout": 300,
    "deferrable": True,
    "retries": 2,
    "retry_delay": dt.timedelta(seconds=1),
}

with DAG(
    dag_id="sc_secret",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["airflow-smart-ext", "integration"],
):
    TokenFileSensor(
        task_id="worker_first",
        path="{{ dag_run.conf['path'] }}",
        token=TOKEN,
        start_from_trigger=False,
        **COMMON,
    )
    TokenFileSensor.partial(task_id="mapped", token=TOKEN, **COMMON).expand(
        path=["{{ dag_run.conf['path'] }}"]
    )
    TokenFileSensor(task_id="zero_worker", path="{{ dag_run.conf['path'] }}", token=TOKEN, **COMMON)
