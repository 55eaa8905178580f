"""Deferrable sensors templated with a connection password (issue 23): worker-first unmapped, worker-first
mapped, and the zero-worker path (where this Airflow starts a templated sensor in the triggerer).

``BackoffSqlSensor`` tasks whose bound ``parameters`` hold a secret Variable and the connection password
(issue 35): poke path (the query runs on a worker) and deferred path (it runs in the triggerer), each plain
and mapped. Each query counts the row the test inserts with exactly those values for its path, so a task
succeeds only where both secrets were bound intact.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from sc_sensors import TokenFileSensor

from airflow_smart_ext.sensors import BackoffSqlSensor

TOKEN = "{{ conn.sc_secret_conn.password }}"
# sc_api_secret: a Variable under a sensitive key (Airflow masks its value wherever it is read).
SQL_CONN_ID = "sc_sql_db"
SQL = "SELECT COUNT(*) FROM released WHERE api_secret = ? AND password = ? AND path = ?"
# retries: a try lost to a loaded machine (an execution-API timeout) must not fail the scenario.
COMMON = {
    "poke_interval": 1,
    "max_wait": 2,
    "timeout": 300,
    "deferrable": True,
    "retries": 2,
    "retry_delay": dt.timedelta(seconds=1),
}


def sql_parameters(path: str) -> list[str]:
    return ["{{ var.value.sc_api_secret }}", TOKEN, path]


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

    # Poke path: its row exists before the run (a poke-mode sensor holds 2.11's only SequentialExecutor slot).
    BackoffSqlSensor(
        task_id="sql_poke",
        conn_id=SQL_CONN_ID,
        sql=SQL,
        parameters=sql_parameters("worker"),
        **{**COMMON, "deferrable": False, "mode": "poke"},
    )
    BackoffSqlSensor.partial(
        task_id="sql_poke_mapped",
        conn_id=SQL_CONN_ID,
        sql=SQL,
        **{**COMMON, "deferrable": False, "mode": "poke"},
    ).expand(parameters=[sql_parameters("worker")])
    # Deferred path: its row is inserted once every deferrable task waits in the triggerer.
    BackoffSqlSensor(
        task_id="sql_deferred",
        conn_id=SQL_CONN_ID,
        sql=SQL,
        parameters=sql_parameters("triggerer"),
        start_from_trigger=False,
        **COMMON,
    )
    BackoffSqlSensor.partial(
        task_id="sql_deferred_mapped", conn_id=SQL_CONN_ID, sql=SQL, start_from_trigger=False, **COMMON
    ).expand(parameters=[sql_parameters("triggerer")])
