"""HA-triggerer integration DAG (tests/integration/test_ha_triggerers_live.py): WAITS deferrable waits on
CONDITIONS shared conditions (a marker file each), zero-worker and worker-first mixed, every condition with
both kinds. A fixed 3 s interval (no growth, no jitter) makes "checks per condition per cycle" measurable.

Nothing is templated (the folder comes from the environment at parse time), so the zero-worker waits start
in the triggerer on 2.11 as well.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from typing import Any

from airflow import DAG
from ha_sensors import ConditionFileSensor, record_late

from airflow_smart_ext.timetables import DueTime

HA_DIR = os.environ.get("SMART_EXT_HA_DIR") or os.path.join(tempfile.gettempdir(), "smart-ext-ha")
WAITS, CONDITIONS, INTERVAL = 24, 4, 3
LATE_WAITS, LATE_AFTER = 4, 20  # ha_late: waits due 20 s after their run's reference instant


def wait(task_id: str, condition: str, zero_worker: bool, **late: Any) -> None:
    """One deferrable wait on ``condition``'s marker file, fixed interval; retries=2 would show as try_number 2:
    every wait must end on its first try."""
    ConditionFileSensor(
        task_id=f"{'zw' if zero_worker else 'wf'}_{task_id}",
        path=os.path.join(HA_DIR, f"{condition}.marker"),
        counter_path=os.path.join(HA_DIR, f"{condition}.checks.jsonl"),
        deferrable=True,
        start_from_trigger=None if zero_worker else False,
        poke_interval=INTERVAL,
        backoff_factor=1,
        jitter="none",
        timeout=600,
        retries=2,
        retry_delay=dt.timedelta(seconds=1),
        **late,
    )


def dag(dag_id: str, tasks: int) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_tasks=tasks,
        tags=["airflow-smart-ext", "integration"],
    )


with dag("ha_waits", WAITS):
    for number in range(WAITS):
        condition = number % CONDITIONS
        wait(f"c{condition}_{number:02d}", f"c{condition}", zero_worker=(number // CONDITIONS) % 2 == 0)

# Late waits on two triggerers: due LATE_AFTER s after the run's reference instant (a manual run: when it was
# triggered), so each says once that it is late (record_late) while both triggerers run, then keeps waiting
# through the kill -9 of the triggerer holding it; zero-worker and worker-first, on a condition of their own.
with dag("ha_late", LATE_WAITS):
    for number in range(LATE_WAITS):
        wait(
            f"late_{number:02d}",
            "late",
            zero_worker=number % 2 == 0,
            due=DueTime(after=dt.timedelta(seconds=LATE_AFTER)),
            on_late=record_late,
        )
