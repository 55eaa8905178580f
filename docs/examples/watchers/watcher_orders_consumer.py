"""### Condition watcher example, the consumer: one run per new partition day, no sensor task

The asset ``orders_daily`` has a ``ConditionWatcher``: in the triggerer it checks
``SELECT max(day) FROM orders_loaded`` every 5 s at first, backing off to 40 s while nothing changes and
back to 5 s after each new day, and emits one asset event per new ``max(day)``. This DAG is scheduled on the
asset: each run reads its day from the triggering asset event (``extra["payload"]["value"]``).

Connection: ``smart_ext_example_sqlite`` must be visible to the triggerer (and the producer writes to its file):
e.g. ``AIRFLOW_CONN_SMART_EXT_EXAMPLE_SQLITE=sqlite://%2Fpath%2Fto%2Fexample.db`` for every component and
``SMART_EXT_EXAMPLE_SQLITE_PATH=/path/to/example.db``.

Run ``watcher_orders_producer`` to load five days: this DAG runs five times, once per day. Airflow >= 3.0
(on 3.3+ the watermark survives triggerer restarts: docs/watchers.md). (Draft for issue 27.)
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

CONN_ID = "smart_ext_example_sqlite"
orders_daily = Asset(
    "orders_daily",
    watchers=[
        AssetWatcher(
            name="orders_loaded",
            trigger=ConditionWatcher(
                sql_condition(CONN_ID, "SELECT max(day) FROM orders_loaded"),
                poke_interval=5,
                max_wait=40,
                state_key="watcher_orders_example",
            ),
        )
    ],
)

with DAG(
    dag_id="watcher_orders_consumer",
    schedule=[orders_daily],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["airflow-smart-ext", "watchers"],
    doc_md=__doc__,
):

    @task
    def report_day(triggering_asset_events: dict | None = None) -> list[str]:
        days = [
            event.extra["payload"]["value"] for event in (triggering_asset_events or {}).get(orders_daily, [])
        ]
        print(f"processing day(s) {days}")
        return days

    report_day()
