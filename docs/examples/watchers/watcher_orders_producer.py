"""### Condition watcher example, the producer: five partition days land over ~2 minutes

``load_days`` inserts one row per day into ``orders_loaded`` (a SQLite file behind the connection
``smart_ext_example_sqlite``), one every ~25 s. Nothing here knows about the consumer: the watcher on the asset
``orders_daily`` (``watcher_orders_consumer.py``) sees ``max(day)`` change and starts one consumer run per day.

Airflow >= 3.0. Trigger manually. (Draft for issue 27: kept out of example_dags/ until the demo knows an
asset-scheduled consumer; see WATCHERS-STATUS.md.)
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import time

from airflow.sdk import DAG, task

CONN_ID = "smart_ext_example_sqlite"
DAYS = 5
SECONDS_BETWEEN_DAYS = 25


def database_path() -> str:
    """The SQLite file of ``CONN_ID`` (defaulted under $AIRFLOW_HOME when the connection is not set)."""
    default = os.path.join(os.environ.get("AIRFLOW_HOME", "."), "smart_ext_examples", "example.db")
    return os.environ.get("SMART_EXT_EXAMPLE_SQLITE_PATH", default)


with DAG(
    dag_id="watcher_orders_producer",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["airflow-smart-ext", "watchers"],
    doc_md=__doc__,
):

    @task
    def load_days() -> list[str]:
        path = database_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with sqlite3.connect(path, timeout=30) as db:
            db.execute("CREATE TABLE IF NOT EXISTS orders_loaded (day TEXT)")
            newest = db.execute("SELECT max(day) FROM orders_loaded").fetchone()[0]
        start = dt.date.fromisoformat(newest) + dt.timedelta(days=1) if newest else dt.date(2026, 1, 1)
        loaded = []
        for offset in range(DAYS):
            day = (start + dt.timedelta(days=offset)).isoformat()
            with sqlite3.connect(path, timeout=30) as db:
                db.execute("INSERT INTO orders_loaded VALUES (?)", (day,))
            print(f"loaded {day} into {path}")
            loaded.append(day)
            time.sleep(SECONDS_BETWEEN_DAYS)
        return loaded

    load_days()
