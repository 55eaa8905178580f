"""Zero-worker integration DAGs (issue 15): deferrable sensors that start and end in the triggerer.

Driven by ``dag_run.conf``; criteria are dotted paths into ``sn_sensors``; the custom sensor lives in
``zw_sensors``. Every sensor may retry (``retries=2``): a timeout or a failure criterion must still not.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from zw_sensors import MarkerFileSensor, record_success

from airflow_smart_ext.sensors import BackoffSqlSensor

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
COMMON = {"poke_interval": 2, "max_wait": 4, "retries": 2, "retry_delay": dt.timedelta(seconds=1)}


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        render_template_as_native_obj=True,  # conf["params"] stays a dict, in the triggerer too
        tags=["airflow-smart-ext", "integration"],
    )


# dag_id: (timeout, soft_fail)
for dag_id, (timeout, soft_fail) in {
    "zw_sql": (600, False),  # long: 2.11 creates runs one CLI call at a time
    "zw_sql_timeout": (8, False),
    "zw_sql_soft": (8, True),
}.items():
    with _dag(dag_id):
        BackoffSqlSensor(
            task_id="wait",
            conn_id="{{ dag_run.conf['conn_id'] }}",
            sql="{{ dag_run.conf['sql'] }}",
            parameters="{{ dag_run.conf['params'] }}",
            success="sn_sensors.is_done",
            failure="sn_sensors.is_error",
            deferrable=True,
            timeout=timeout,
            soft_fail=soft_fail,
            **COMMON,
        )

# Nothing templated: the zero-worker path on 2.11 too. zw_callback: a success callback must still run.
for dag_id, day, callbacks in (
    ("zw_sql_static", "d1", {}),
    ("zw_callback", "d2", {"on_success_callback": record_success}),
):
    with _dag(dag_id):
        BackoffSqlSensor(
            task_id="wait",
            conn_id="sn_sqlite",
            sql="SELECT status FROM zw_static WHERE day = :day",
            parameters={"day": day},
            success="sn_sensors.is_done",
            deferrable=True,
            timeout=600,
            **callbacks,
            **COMMON,
        )

with _dag("zw_file"):
    MarkerFileSensor(
        task_id="wait",
        path="{{ dag_run.conf['path'] }}",
        counter_path="{{ dag_run.conf['counter_path'] }}",
        deferrable=True,
        timeout=600,
        **COMMON,
    )

with _dag("zw_fallbacks"):
    # Mapped: Airflow starts every mapped task instance on a worker (the reason goes to the task log).
    MarkerFileSensor.partial(task_id="mapped", deferrable=True, timeout=600, **COMMON).expand(
        path=["{{ dag_run.conf['path'] }}"]
    )
    # Worker-first asked for explicitly.
    MarkerFileSensor(
        task_id="worker_first",
        path="{{ dag_run.conf['path'] }}",
        deferrable=True,
        start_from_trigger=False,
        timeout=600,
        **COMMON,
    )
