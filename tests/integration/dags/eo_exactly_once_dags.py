"""Live exactly-once DAGs (tests/integration/test_watcher_exactly_once_live.py), Airflow >= 3.3 only.

* ``eo_values``: an ``every_value=True`` watcher on ``SELECT v FROM vals WHERE v > :after ORDER BY v`` of a
  SQLite file (connection ``eo_values``, made by the test), checked every second. Its consumer
  ``eo_consumer`` (``max_active_runs=1``) processes the values with ``every_new_value`` and records each one
  it processed in that file's ``processed`` table (its own record, next to the Variable the helper keeps).
* ``eo_broken``: a watcher whose ``selector`` module imports here (at parse) but not in the triggerer
  (``eo_triggerer_missing``): a permanent import error, whose log lines the test counts. Its schedule is short
  (``poke_interval=1``, ``max_wait=8``, no jitter) so the backoff reaches its cap within a minute.

Unpaused by the test (Airflow starts a watcher only for an asset of an active, unpaused DAG).
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from airflow_smart_ext import compat

CONN_ID = "eo_values"
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
TAGS = ["airflow-smart-ext", "integration", "watchers"]
BROKEN_POLICY = {"poke_interval": 1, "max_wait": 8, "backoff_factor": 2, "jitter": "none"}


def record(run_id: Any, value: Any, seq: int, event_id: int, redelivered: bool) -> None:
    path = Path(os.environ["AIRFLOW_HOME"]) / "eo_values.db"
    with sqlite3.connect(path, timeout=30) as db:
        db.execute(
            "INSERT INTO processed (run_id, value, seq, event_id, redelivered, at) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, value, seq, event_id, redelivered, time.time()),
        )


if compat.consumers.CONSUMERS_SUPPORTED:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Asset, AssetWatcher, task
    from eo_triggerer_missing import first_cell

    from airflow_smart_ext.consumers import every_new_value
    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    values = Asset(
        "eo_values",
        watchers=[
            AssetWatcher(
                name="eo_values_landed",
                trigger=ConditionWatcher(
                    sql_condition(CONN_ID, "SELECT v FROM vals WHERE v > :after ORDER BY v"),
                    every_value=True,
                    start_after=0,
                    poke_interval=1,
                    max_wait=1,
                    check_timeout=5,
                    state_key="eo_values",
                ),
            )
        ],
    )
    broken = Asset(
        "eo_broken",
        watchers=[
            AssetWatcher(
                name="eo_broken_selector",
                trigger=ConditionWatcher(
                    sql_condition(CONN_ID, "SELECT max(v) FROM vals", selector=first_cell),
                    state_key="eo_broken",
                    **BROKEN_POLICY,
                ),
            )
        ],
    )

    with DAG(
        dag_id="eo_consumer",
        schedule=[values],
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=TAGS,
    ):

        @task(inlets=[values])
        def consume(run_id: str | None = None) -> None:
            for new in every_new_value(values):
                record(run_id, new.value, new.seq, new.event_id, new.redelivered)

        consume()

    with DAG(dag_id="eo_broken_consumer", schedule=[broken], start_date=START, catchup=False, tags=TAGS):
        EmptyOperator(task_id="consume")
