"""Integration-test DAG for riding out a database outage (issue 14): ten deferrable ``BackoffSqlSensor``s
waiting on one shared condition (``dag_run.conf``: ``conn_id``, ``sql``, ``params``), with retries, so a
failed try would show as ``up_for_retry`` / ``try_number > 1``.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG

from airflow_smart_ext.sensors import BackoffSqlSensor

with DAG(
    dag_id="sn_sql_outage",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    render_template_as_native_obj=True,
    max_active_tasks=16,
    tags=["airflow-smart-ext", "integration"],
):
    for n in range(10):
        BackoffSqlSensor(
            task_id=f"wait_{n:02d}",
            conn_id="{{ dag_run.conf['conn_id'] }}",
            sql="{{ dag_run.conf['sql'] }}",
            parameters="{{ dag_run.conf['params'] }}",
            success="sn_sensors.is_done",
            deferrable=True,
            poke_interval=2,
            max_wait=5,
            timeout=400,
            retries=2,
            retry_delay=dt.timedelta(seconds=1),
        )
