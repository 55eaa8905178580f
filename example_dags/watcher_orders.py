"""### Condition watcher: a DAG that runs once per new partition day, with no sensor task

``watcher_orders_producer`` (triggered by hand) loads five partition days into the table ``orders_loaded``,
one every ~20 s. Nothing in it knows about the consumer.

``watcher_orders_consumer`` is scheduled on the asset ``orders_daily``, which has a ``ConditionWatcher``: in
the triggerer it runs ``SELECT max(day) FROM orders_loaded`` every 5 s at first, backing off to 40 s while
nothing changes and back to 5 s after each new day, and emits one asset event per new ``max(day)`` with the
day in the event (``extra["payload"]["value"]``). So the consumer runs five times, once per day, and each
run knows its day. No task waits anywhere: there is no sensor in either DAG. Until the producer creates the
table, the watcher's checks fail with "no such table": ridden out as "not yet" (a warning in the triggerer
log), as a sensor would.

On Airflow 3.3+ the last day reported is kept in Airflow's asset state store, so a triggerer restart neither
repeats a day nor loses one that landed while it was down (docs/watchers.md). Airflow 2.11 has no asset
watchers: this file defines no DAG there (a ``ConditionWatcher`` fails at DAG parse on 2.11, naming 3.0 and
the alternative, a deferrable sensor).

Connection ``smart_ext_example_sqlite``: defaulted by ``sensor_common`` (see there), which the watcher's
``success`` criterion imports in the triggerer too.
"""

from __future__ import annotations

import datetime as dt

from sensor_common import EXAMPLE_CONN_ID, sqlite_path

from airflow_smart_ext import compat

DAYS = 5
SECONDS_BETWEEN_DAYS = 20
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

if compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
    from airflow.sdk import DAG, Asset, AssetWatcher, task

    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    orders_daily = Asset(
        "orders_daily",
        watchers=[
            AssetWatcher(
                name="orders_loaded",
                trigger=ConditionWatcher(
                    sql_condition(
                        EXAMPLE_CONN_ID, "SELECT max(day) FROM orders_loaded", success="sensor_common.is_day"
                    ),
                    poke_interval=5,
                    max_wait=40,
                ),
            )
        ],
    )

    with DAG(
        dag_id="watcher_orders_producer",
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["airflow-smart-ext", "watchers"],
        doc_md=__doc__,
    ) as producer:

        @task
        def load_days() -> list[str]:
            import sqlite3
            import time

            path = sqlite_path(EXAMPLE_CONN_ID)
            with sqlite3.connect(path, timeout=30) as db:
                db.execute("CREATE TABLE IF NOT EXISTS orders_loaded (day TEXT)")
                newest = db.execute("SELECT max(day) FROM orders_loaded").fetchone()[0]
            first = dt.date.fromisoformat(newest) + dt.timedelta(days=1) if newest else dt.date(2026, 7, 1)
            loaded = []
            for offset in range(DAYS):
                day = (first + dt.timedelta(days=offset)).isoformat()
                with sqlite3.connect(path, timeout=30) as db:
                    db.execute("INSERT INTO orders_loaded VALUES (?)", (day,))
                print(f"loaded {day} into {path}")
                loaded.append(day)
                time.sleep(SECONDS_BETWEEN_DAYS)
            return loaded

        load_days()

    with DAG(
        dag_id="watcher_orders_consumer",
        schedule=[orders_daily],
        start_date=START,
        catchup=False,
        tags=["airflow-smart-ext", "watchers"],
        doc_md=__doc__,
    ) as consumer:

        @task
        def process_day(triggering_asset_events: dict | None = None) -> list[str]:
            days = [
                e.extra["payload"]["value"] for e in (triggering_asset_events or {}).get(orders_daily, [])
            ]
            print(f"processing partition day(s) {days}")
            return days

        process_day()
