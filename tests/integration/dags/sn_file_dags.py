"""Integration-test DAGs for ``FileArrivedSensor(BackoffSensor)`` (tests/integration/test_sensors_live.py,
test_deferrable_live.py). The file path comes from ``dag_run.conf["path"]``; the test creates the file.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from sn_sensors import FileArrivedSensor, record_late

from airflow_smart_ext.timetables import DueTime

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
PATH = "{{ dag_run.conf['path'] }}"
COUNTER = "{{ dag_run.conf.get('counter_path') or '' }}"
NO_RETRY_PROOF = {"retries": 2, "retry_delay": dt.timedelta(seconds=1)}  # a sensor timeout must not retry

# Poke mode: the default seeded full-jitter schedule, 1 s growing x2 up to 4 s.
# Reschedule mode: a deterministic schedule (no jitter, no splay: checks at 0, 3, 9, 15, ... s) with gaps
# of >= 3 s, because Airflow 3.3.2 fails a sensor rescheduled within ~1-2 s: the executor's late "success"
# event of the previous run meets the next run already "running" and the scheduler marks it
# up_for_retry (the reschedule variant of the executor race in AIRFLOW-NOTES). Timeout 12 s: final check at 12.
MODES = {
    "poke": {"poke_interval": 1, "max_wait": 4},
    "reschedule": {"poke_interval": 3, "max_wait": 6, "jitter": "none", "splay": 0},
}
# Poke mode's 15 s: the final check is placed at the timeout only if the check before it ran in time; with 6 s
# a task process that started late under CI's load (2.11.2, PostgreSQL pass) reached the deadline first.
TIMEOUTS = {"poke": 15, "reschedule": 12}


def sensor_dag(dag_id: str) -> DAG:
    """A manually triggered test DAG."""
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["airflow-smart-ext", "integration"],
    )


for mode, schedule in MODES.items():
    with sensor_dag(f"sn_file_{mode}"):
        FileArrivedSensor(task_id="wait", path=PATH, mode=mode, timeout=90, **schedule, **NO_RETRY_PROOF)

    with sensor_dag(f"sn_file_{mode}_timeout"):
        FileArrivedSensor(
            task_id="wait", path=PATH, mode=mode, timeout=TIMEOUTS[mode], **schedule, **NO_RETRY_PROOF
        )
        FileArrivedSensor(
            task_id="wait_soft",
            path=PATH,
            mode=mode,
            timeout=TIMEOUTS[mode],
            soft_fail=True,
            **schedule,
            **NO_RETRY_PROOF,
        )

    # Late data: due 8 s after the run's reference instant (a manual run: when it was triggered), so the wait
    # is late while it still waits for the file; it says so once (record_late) and goes on to succeed.
    with sensor_dag(f"sn_file_{mode}_late"):
        FileArrivedSensor(
            task_id="wait",
            path=PATH,
            mode=mode,
            timeout=120,
            due=DueTime(after=dt.timedelta(seconds=8)),
            on_late=record_late,
            **schedule,
            **NO_RETRY_PROOF,
        )

# Deferrable: the sensor class lives in sn_sensors (importable by name in the triggerer).
with sensor_dag("sn_def_file"):
    FileArrivedSensor(
        task_id="wait",
        path=PATH,
        counter_path=COUNTER,
        deferrable=True,
        start_from_trigger=False,  # worker-first (the zero-worker path: zw_dags.py)
        poke_interval=2,
        max_wait=4,
        timeout=300,
        **NO_RETRY_PROOF,
    )

with sensor_dag("sn_def_file_timeout"):
    FileArrivedSensor(
        task_id="wait",
        path=PATH,
        deferrable=True,
        start_from_trigger=False,  # worker-first (the zero-worker path: zw_dags.py)
        poke_interval=1,
        max_wait=2,
        timeout=8,
        **NO_RETRY_PROOF,
    )
    FileArrivedSensor(
        task_id="wait_soft",
        path=PATH,
        deferrable=True,
        start_from_trigger=False,  # worker-first (the zero-worker path: zw_dags.py)
        poke_interval=1,
        max_wait=2,
        timeout=8,
        soft_fail=True,
        **NO_RETRY_PROOF,
    )

# Late data, deferred: due 8 s after the run's reference instant; the trigger finds it late, a worker says so
# once and defers again; the wait goes on to succeed. Worker-first, and zero-worker (on 2.11 a templated
# argument starts it on a worker: the same path as worker-first).
for start, from_trigger in (("worker_first", False), ("zero_worker", True)):
    with sensor_dag(f"sn_def_file_late_{start}"):
        FileArrivedSensor(
            task_id="wait",
            path=PATH,
            counter_path=COUNTER,
            deferrable=True,
            start_from_trigger=from_trigger,
            poke_interval=2,
            max_wait=4,
            timeout=300,
            due=DueTime(after=dt.timedelta(seconds=8)),
            on_late=record_late,
            **NO_RETRY_PROOF,
        )

# 20 deferred waits on one condition: identical check specs -> one shared check per cycle in the triggerer.
FANIN_TASKS = 20
with DAG(
    dag_id="sn_def_fanin",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_tasks=FANIN_TASKS,
    tags=["airflow-smart-ext", "integration"],
):
    for number in range(FANIN_TASKS):
        FileArrivedSensor(
            task_id=f"wait_{number:02d}",
            path=PATH,
            counter_path=COUNTER,
            deferrable=True,
            start_from_trigger=False,  # worker-first (the zero-worker path: zw_dags.py)
            poke_interval=3,
            backoff_factor=1,  # a fixed 3 s cycle (no jitter; splay spreads the phases over the cycle),
            jitter="none",  # so "checks per cycle" is well defined
            timeout=600,
        )

# Mapped: ``.partial()`` backoff arguments are checked at parse; each mapped instance is a BackoffSensor.
with sensor_dag("sn_file_mapped"):
    FileArrivedSensor.partial(
        task_id="wait", mode="poke", poke_interval=1, max_wait=2, jitter="equal", timeout=60, **NO_RETRY_PROOF
    ).expand(path=[PATH + ".a", PATH + ".b"])
