"""Trigger-queue routing DAG (tests/integration/test_trigger_queues_live.py): WAITS worker-first deferrable
waits on CONDITIONS shared conditions (a marker file each), a fixed 3 s interval (no growth, no jitter) so
"checks per condition per cycle" is measurable. With ``[smart_ext] trigger_queues`` each wait's trigger goes to
the queue of its condition, so every condition is checked by one triggerer process.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile

from airflow import DAG
from ha_sensors import ConditionFileSensor

TQ_DIR = os.environ.get("SMART_EXT_TQ_DIR") or os.path.join(tempfile.gettempdir(), "smart-ext-tq")
WAITS, CONDITIONS, INTERVAL = 16, 4, 3

with DAG(
    dag_id="tq_waits",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_tasks=WAITS,
    tags=["airflow-smart-ext", "integration"],
):
    for number in range(WAITS):
        condition = number % CONDITIONS
        ConditionFileSensor(
            task_id=f"wf_c{condition}_{number:02d}",
            path=os.path.join(TQ_DIR, f"c{condition}.marker"),
            counter_path=os.path.join(TQ_DIR, f"c{condition}.checks.jsonl"),
            deferrable=True,
            start_from_trigger=False,
            poke_interval=INTERVAL,
            backoff_factor=1,
            jitter="none",
            timeout=600,
        )
