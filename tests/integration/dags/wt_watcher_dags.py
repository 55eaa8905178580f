"""Live condition-watcher DAGs (tests/integration/test_watchers_live.py), Airflow >= 3.0 only.

The condition database (PostgreSQL, connection ``wt_conditions``, made by the test) has ``wt_check(name)``:
it records the check (name, the database's clock) and returns the condition's value, so the test counts
checks at the database itself.

* ``wt_days``: one watcher on ``SELECT wt_check('days')`` (``max(day)`` of the table ``days``); the consumer
  ``wt_days_consumer`` runs once per asset event (an EmptyOperator: the scheduler completes it, no worker).
* ``wt_burst``: ``every_value=True`` on ``burst_days`` (the watermark bound as ``%(after)s``): one event per
  day, in order; the consumer ``wt_burst_consumer``.
* ``wt_shared_0`` .. ``wt_shared_9``: ten watchers on one condition (``wt_check('shared')``), each with its
  own watermark (``state_key``): ten trigger rows, one poll per cycle. ``wt_shared_consumer`` runs on any.

Unpaused by the test (Airflow starts a watcher only for an asset of an active, unpaused DAG). On Airflow 2.11
this file defines no DAG; the test checks the parse-time error with a separate file instead.
"""

from __future__ import annotations

import datetime as dt

from airflow_smart_ext import compat

CONN_ID = "wt_conditions"
SHARED = 10
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
TAGS = ["airflow-smart-ext", "integration", "watchers"]

if compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Asset, AssetAny, AssetWatcher

    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    days = Asset(
        "wt_days",
        watchers=[
            AssetWatcher(
                name="wt_days_loaded",
                trigger=ConditionWatcher(
                    sql_condition(CONN_ID, "SELECT wt_check('days')"),
                    poke_interval=2,
                    max_wait=4,
                    check_timeout=5,
                    state_key="wt_days",
                ),
            )
        ],
    )
    with DAG(dag_id="wt_days_consumer", schedule=[days], start_date=START, catchup=False, tags=TAGS):
        EmptyOperator(task_id="consume")

    burst = Asset(
        "wt_burst",
        watchers=[
            AssetWatcher(
                name="wt_burst_loaded",
                trigger=ConditionWatcher(
                    sql_condition(CONN_ID, "SELECT day FROM burst_days WHERE day > %(after)s ORDER BY day"),
                    every_value=True,
                    start_after="2026-01-01",
                    poke_interval=2,
                    max_wait=4,
                    state_key="wt_burst",
                ),
            )
        ],
    )
    with DAG(dag_id="wt_burst_consumer", schedule=[burst], start_date=START, catchup=False, tags=TAGS):
        EmptyOperator(task_id="consume")

    shared = [
        Asset(
            f"wt_shared_{i}",
            watchers=[
                AssetWatcher(
                    name=f"wt_shared_{i}",
                    trigger=ConditionWatcher(
                        sql_condition(CONN_ID, "SELECT wt_check('shared')"),
                        poke_interval=3,
                        max_wait=3,
                        jitter="none",
                        state_key=f"wt_shared_{i}",
                    ),
                )
            ],
        )
        for i in range(SHARED)
    ]
    with DAG(
        dag_id="wt_shared_consumer", schedule=AssetAny(*shared), start_date=START, catchup=False, tags=TAGS
    ):
        EmptyOperator(task_id="consume")
