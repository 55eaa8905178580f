"""bench_watchers.py: asset-watcher DAGs and the sensor DAGs they are compared with (parameters:
bench_watchers.json)."""

from __future__ import annotations

import datetime as dt

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher
from bench_dag_support import dag_params, start_counter

from airflow_smart_ext.sensors import BackoffSqlSensor
from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

PARAMS = dag_params(__file__)
START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

partition = Asset(
    "bw_partition",
    watchers=[
        AssetWatcher(
            name="bw_partition_landed",
            trigger=ConditionWatcher(
                sql_condition("bw_pg", "SELECT bench_value('watcher')"),
                poke_interval=PARAMS["interval"],
                max_wait=PARAMS["interval"],
                jitter="none",
            ),
        )
    ],
)
with DAG(dag_id="bw_watcher", schedule=[partition], start_date=START, catchup=False):
    EmptyOperator(task_id="process")  # no callback: the scheduler completes it, no task process

unshared = Asset(
    "bw_partition_unshared",
    watchers=[
        AssetWatcher(
            name="bw_partition_landed_unshared",
            trigger=ConditionWatcher(
                sql_condition("bw_pg", "SELECT bench_value('watcher_unshared')"),
                poke_interval=PARAMS["interval"],
                max_wait=PARAMS["interval"],
                jitter="none",
                share=False,
            ),
        )
    ],
)
with DAG(dag_id="bw_watcher_unshared", schedule=[unshared], start_date=START, catchup=False):
    EmptyOperator(task_id="process")

for leg in ("zero_worker", "worker_first"):
    with DAG(dag_id=f"bw_{leg}", schedule=None, start_date=START, catchup=False):
        BackoffSqlSensor(
            task_id="wait",
            conn_id="bw_pg",
            sql="SELECT bench_value(%(leg)s) IS NOT NULL",
            parameters={"leg": leg},
            deferrable=True,
            start_from_trigger=None if leg == "zero_worker" else False,
            poke_interval=PARAMS["interval"],
            exponential_backoff=False,
            timeout=3600,
            on_execute_callback=start_counter(PARAMS["starts"]),
        ) >> EmptyOperator(task_id="process")
