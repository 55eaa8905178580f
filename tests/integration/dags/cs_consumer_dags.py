"""Live consumer DAGs (tests/integration/test_consumers_live.py), Airflow >= 3.0 only (the helper: 3.3+).

The asset ``cs_values`` has one condition watcher on ``SELECT max(v) FROM cs_values`` in the SQLite database
``$AIRFLOW_HOME/cs_conditions.db`` (connection ``cs_conditions``, made by the test). Two consumers, each
``max_active_runs=1`` and a ~15 s run, record in that database's ``processed`` table what they processed:

* ``cs_every_new_value``: ``every_new_value(cs_values)`` (the helper), one row per value, then the run's work;
* ``cs_last_event_only``: ``triggering_asset_events[cs_values][-1]`` (what README examples once showed),
  one row per run.

Unpaused by the test (a watcher starts only for an asset of an unpaused DAG).
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from airflow_smart_ext import compat

CONN_ID = "cs_conditions"
RUN_SECONDS = 15
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
TAGS = ["airflow-smart-ext", "integration", "watchers"]


def record(
    consumer: str, run_id: str, value: Any, seq: int, event_id: int, mark_seconds: float | None
) -> None:
    path = Path(os.environ["AIRFLOW_HOME"]) / "cs_conditions.db"
    with sqlite3.connect(path, timeout=30) as db:
        db.execute(
            "INSERT INTO processed (consumer, run_id, value, seq, event_id, mark_seconds, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (consumer, run_id, value, seq, event_id, mark_seconds, time.time()),
        )


if compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
    from airflow.sdk import DAG, Asset, AssetWatcher, task

    from airflow_smart_ext.consumers import every_new_value
    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    values = Asset(
        "cs_values",
        watchers=[
            AssetWatcher(
                name="cs_values_landed",
                trigger=ConditionWatcher(
                    sql_condition(CONN_ID, "SELECT max(v) FROM cs_values"),
                    poke_interval=1,
                    max_wait=2,
                    state_key="cs_values",
                ),
            )
        ],
    )

    with DAG(
        dag_id="cs_every_new_value",
        schedule=[values],
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=TAGS,
    ):

        @task(inlets=[values])
        def consume(run_id: str | None = None) -> None:
            news = every_new_value(values)
            while True:
                started = time.monotonic()
                new = next(news, None)  # marks the value before (its body below returned)
                if new is None:
                    record("mark", run_id, None, 0, 0, time.monotonic() - started)
                    break
                record(
                    "every_new_value", run_id, new.value, new.seq, new.event_id, time.monotonic() - started
                )
            time.sleep(RUN_SECONDS)

        consume()

    with DAG(
        dag_id="cs_last_event_only",
        schedule=[values],
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=TAGS,
    ):

        @task
        def consume_last(run_id: str | None = None, triggering_asset_events: Any = None) -> None:
            last = triggering_asset_events[values][-1]
            record(
                "last_event_only",
                run_id,
                last.extra["payload"]["value"],
                last.extra["payload"]["seq"],
                0,  # a triggering event carries no id
                None,
            )
            time.sleep(RUN_SECONDS)

        consume_last()
