"""bench_wait_memory.py: one wait alone, and waits in a DAG of 200 tasks (parameters: bench_wait_memory.json)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow import DAG
from airflow.providers.standard.operators.empty import EmptyOperator
from bench_dag_support import dag_params
from wm_sensors import NeverFileSensor

PARAMS = dag_params(__file__)

WAIT: dict[str, Any] = dict(
    path="/nonexistent/bench-wait-memory/{{ run_id }}/{{ ti.task_id }}",
    deferrable=True,
    poke_interval=3600,
    timeout=7200,
)


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=PARAMS["max_runs"],
        max_active_tasks=PARAMS["max_tasks"],
    )


with _dag("wm_one"):
    NeverFileSensor(task_id="wait", **WAIT)

for dag_id, start_from_trigger in (("wm_big", None), ("wm_big_worker_first", False)):
    with _dag(dag_id):
        sensors = [
            NeverFileSensor(task_id=f"wait_{i:02d}", start_from_trigger=start_from_trigger, **WAIT)
            for i in range(PARAMS["sensors"])
        ]
        for i in range(PARAMS["other"]):
            sensors[i % PARAMS["sensors"]] >> EmptyOperator(task_id=f"after_{i:03d}")
