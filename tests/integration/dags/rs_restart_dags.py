"""Live watcher-restart DAG (tests/integration/test_watcher_restarts_live.py), Airflow >= 3.0 only.

``rs_values``: one watcher on ``SELECT max(v) FROM vals`` of a SQLite file (connection ``rs_values``, made by the
test), checked every second; the consumer ``rs_values_consumer`` only makes the watcher run
(Airflow starts a watcher only for an asset of an active, unpaused DAG). The test stops the triggerer between
an event and its commit and counts the asset events per ``seq``.
"""

from __future__ import annotations

import datetime as dt

from airflow_smart_ext import compat

if compat.ASSET_WATCHERS_SUPPORTED:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Asset, AssetWatcher

    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    values = Asset(
        "rs_values",
        watchers=[
            AssetWatcher(
                name="rs_values_loaded",
                trigger=ConditionWatcher(
                    sql_condition("rs_values", "SELECT max(v) FROM vals"),
                    poke_interval=1,
                    max_wait=1,
                    check_timeout=5,
                    state_key="rs_values",
                ),
            )
        ],
    )
    with DAG(
        dag_id="rs_values_consumer",
        schedule=[values],
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        tags=["airflow-smart-ext", "integration", "watchers"],
    ):
        EmptyOperator(task_id="consume")
