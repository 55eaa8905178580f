"""Integration-test DAGs for ``BackoffSqlSensor`` (poke and deferrable), driven by ``dag_run.conf``:
``conn_id``, ``sql`` and ``params`` (bound by the driver, never formatted into the SQL).

Criteria are dotted paths into ``sn_sensors`` so the deferrable variant can ship them to the triggerer.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG

from airflow_smart_ext.sensors import BackoffSqlSensor

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

VARIANTS = {
    # dag_id suffix: (deferrable, timeout)
    "poke": (False, 90),
    "deferrable": (True, 90),
    "deferrable_timeout": (True, 8),
}

for variant, (deferrable, timeout) in VARIANTS.items():
    with DAG(
        dag_id=f"sn_sql_{variant}",
        schedule=None,
        start_date=START,
        catchup=False,
        render_template_as_native_obj=True,  # conf["params"] stays a dict/list, not its repr
        tags=["airflow-smart-ext", "integration"],
    ):
        BackoffSqlSensor(
            task_id="wait",
            conn_id="{{ dag_run.conf['conn_id'] }}",
            sql="{{ dag_run.conf['sql'] }}",
            parameters="{{ dag_run.conf['params'] }}",
            success="sn_sensors.is_done",
            failure="sn_sensors.is_error",
            deferrable=deferrable,
            start_from_trigger=False,  # worker-first (the zero-worker path: zw_dags.py)
            poke_interval=1,
            max_wait=3,
            timeout=timeout,
            retries=2,  # a matched failure criterion / a timeout must not retry
            retry_delay=dt.timedelta(seconds=1),
        )
