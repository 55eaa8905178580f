"""The distributed pass's DAG (issue 36): one wait in every mode on the CeleryExecutor topology.

``dag_run.conf``: ``path``, the marker file every task waits for; ``counters``, a folder where each task's
checks are counted (sn_sensors.FileArrivedSensor: when, where, which worker). The deferrable tasks other than
``unshared`` have identical arguments: one check per cycle per triggerer serves all of them; ``unshared``
differs in its counter only, so it has a condition, and checks, of its own.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from sn_sensors import FileArrivedSensor

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
PATH = "{{ dag_run.conf['path'] }}"


def counter(name: str) -> str:
    return "{{ dag_run.conf['counters'] }}/" + name + ".jsonl"


# A fixed 3 s cycle (no jitter, no growth), so checks per cycle are well defined. retries: a try Airflow
# fails (a killed worker) is retried, and shows as try 2.
COMMON = {
    "poke_interval": 3,
    "backoff_factor": 1,
    "jitter": "none",
    "timeout": 900,
    "retries": 2,
    "retry_delay": dt.timedelta(seconds=2),
}
SHARED = {"path": PATH, "counter_path": counter("shared"), "deferrable": True, **COMMON}

with DAG(
    dag_id="ds_modes",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_tasks=32,
    tags=["airflow-smart-ext", "integration"],
):
    FileArrivedSensor(task_id="poke", path=PATH, counter_path=counter("poke"), mode="poke", **COMMON)
    FileArrivedSensor(
        task_id="reschedule", path=PATH, counter_path=counter("reschedule"), mode="reschedule", **COMMON
    )
    FileArrivedSensor.partial(
        task_id="mapped_reschedule", path=PATH, counter_path=counter("mapped_reschedule"), mode="reschedule",
        **COMMON,
    ).expand(max_wait=[3, 4, 5])  # fmt: skip
    FileArrivedSensor(task_id="worker_first", start_from_trigger=False, **SHARED)
    FileArrivedSensor(task_id="zero_worker", **SHARED)
    FileArrivedSensor(task_id="zero_worker_twin", **SHARED)
    FileArrivedSensor.partial(
        task_id="mapped_deferrable", **{k: v for k, v in SHARED.items() if k != "path"}
    ).expand(
        path=[PATH, PATH]  # the same arguments as the other shared waits
    )
    # Its own counter: different arguments, a condition of its own, checked on its own.
    FileArrivedSensor(task_id="unshared", **{**SHARED, "counter_path": counter("unshared")})
