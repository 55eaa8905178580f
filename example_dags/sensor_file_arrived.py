"""### A custom sensor that only swapped its base class: poke and reschedule mode

``FileArrivedSensor`` (see ``sensor_common.py``) is an ordinary file sensor; the only change for smart
backoff is ``class FileArrivedSensor(BackoffSensor)`` instead of ``BaseSensorOperator``. Every
``BaseSensorOperator`` argument keeps its meaning: ``poke_interval`` is the first interval, ``max_wait``
caps the growing interval, ``timeout`` is the deadline (the last check lands exactly on it).

``deliver`` makes a file appear ~8 s after it ran; both sensors wait for it, one holding a worker slot
(``mode="poke"``), one giving it back between checks (``mode="reschedule"``). Each task log shows the
schedule: ``Poke #2 (check #1): condition not met; next check #2 in 2.718s at ...``.

Trigger manually; no connection or setup needed. Finishes in well under a minute.
"""

from __future__ import annotations

import datetime as dt

from airflow import DAG
from sensor_common import RUN_DIR_TEMPLATE, FileArrivedSensor, deliver_later

from airflow_smart_ext.compat.locations import task

DROP_FILE = RUN_DIR_TEMPLATE + "/orders.csv"

with DAG(
    dag_id="sensor_file_arrived",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["airflow-smart-ext", "sensors"],
    doc_md=__doc__,
):

    @task
    def deliver(path: str) -> str:
        deliver_later(8, "file", path, "order_id,amount\n1,9.99\n")
        print(f"{path} will appear in ~8 s")
        return path

    common = {
        "path": DROP_FILE,
        "poke_interval": 2,  # first interval; then x2 (backoff_factor) ...
        "max_wait": 8,  # ... up to 8 s, with full jitter (seeded per task run)
        "timeout": 60,
    }
    delivered = deliver(DROP_FILE)
    delivered >> FileArrivedSensor(task_id="wait_poke", mode="poke", **common)
    delivered >> FileArrivedSensor(task_id="wait_reschedule", mode="reschedule", **common)
