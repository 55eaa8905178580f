"""bench_worker_slots.py: one DAG per mode, M sensors waiting for a file (parameters: bench_worker_slots.json)."""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from bench_dag_support import dag_params
from sn_sensors import FileArrivedSensor

PARAMS = dag_params(__file__)

for mode in ("poke", "reschedule", "deferrable"):
    with DAG(
        dag_id=f"bench_slots_{mode}",
        schedule=None,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_tasks=PARAMS["sensors"],
    ):
        for number in range(PARAMS["sensors"]):
            FileArrivedSensor(
                task_id=f"wait_{number:02d}",
                path="{{ dag_run.conf['path'] }}",
                counter_path="{{ dag_run.conf['counter_path'] }}",
                poke_interval=PARAMS["poke_interval"],
                max_wait=PARAMS["max_wait"],
                timeout=1800,
                mode="poke" if mode == "poke" else "reschedule",
                deferrable=mode == "deferrable",
                start_from_trigger=False,  # worker-first deferral; the zero-worker path: bench_zero_worker.py
            )
