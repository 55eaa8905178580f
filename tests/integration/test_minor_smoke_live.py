"""Live smoke of one Airflow minor (issue 41, part 8): the README's version claims, on the session's Airflow.

CI runs this module alone in each minor's venv (3.0, 3.1, 3.2). On 2.11 and 3.3+ it skips (allow-listed): those
run the whole real-Airflow tier, which proves each point below there (CI's minutes). It reuses DAGs that already
exist, so it proves what users run:

* a deferrable wait (``zw_sql_static`` of tests/integration/dags/zw_dags.py: untemplated, ``retries=2``)
  succeeds on try 1, read from the metadata DB; where Airflow starts tasks in the triggerer (2.11 for
  untemplated arguments, 3.3+) it never had a worker phase (state history, ``queued_dttm``, ``hostname``),
  on 3.0-3.2 it starts on a worker and its log says why;
* a condition watcher event lands on an asset (3.0+): the README's example ``watcher_orders_consumer``
  (example_dags/watcher_orders.py) on its own connection's SQLite database; its consumer run succeeds;
* the Waits view opens inside Airflow's UI in Chromium from Airflow's Browse menu and shows the deferred
  wait's row (3.1+).

The three share one module fixture (the watcher is started first, so its start-up overlaps the wait's).
The UI test runs while the wait is deferred: it precedes the test that lets the wait succeed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_smart_ext import compat
from tests.integration.live import (
    event_payload,
    sqlite_db,
    sqlite_exec,
    start_run,
    ti_row,
    wait_ti_state,
)

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(
        not compat.versions.AIRFLOW_V_3_0_PLUS or compat.versions.AIRFLOW_V_3_3_PLUS,
        reason="the minors' smoke runs on 3.0-3.2: 2.11 and 3.3+ run the whole real-Airflow tier",
    ),
]

WAIT_DAG, WAIT_TASK = "zw_sql_static", "wait"  # zw_dags.py: waits for day 'd1' in table zw_static (sn_sqlite)
WORKER_PHASES = ("queued", "running")
WATCH_DAG, WATCH_ASSET = "watcher_orders_consumer", "orders_daily"  # example_dags/watcher_orders.py
DAY = "2026-07-01"
NO_WATCHERS = "2.11: no asset watchers"
NO_PLUGIN_VIEWS = "3.0: no plugin views in Airflow's UI (external_views/react_apps are 3.1+)"


@dataclass
class Smoke:
    env: AirflowEnv
    run_id: str
    condition_db: Path


def example_db(env: AirflowEnv) -> Path:
    """The database of connection ``smart_ext_example_sqlite`` as example_dags/sensor_common.py defaults it in
    every Airflow process that imports it: ``$AIRFLOW_HOME/smart_ext_examples/example.db``."""
    return env.home / "smart_ext_examples" / "example.db"


@pytest.fixture(scope="module")
def smoke(airflow_env: AirflowEnv) -> Smoke:
    env = airflow_env
    db = sqlite_db(env)
    sqlite_exec(db, "CREATE TABLE IF NOT EXISTS zw_static (day TEXT, status TEXT)")
    sqlite_exec(db, "DELETE FROM zw_static")
    run_id = start_run(env, WAIT_DAG)
    wait_ti_state(env, WAIT_DAG, run_id, WAIT_TASK, {"deferred"}, timeout=240)
    env.poll(
        lambda: any(
            row["run_id"] == run_id and row["triggerer_id"] is not None for row in env.trigger_owners()
        ),
        120,
        "the triggerer to take the wait's trigger",
        interval=0.5,
    )
    # The watcher last: its event starts a task at once, and a REST call that writes (unpause, trigger) while
    # a task starts can stall Airflow 3.1+'s api-server on SQLite for the 60 s busy timeout (its audit-log
    # dependency commits synchronously on the event loop while an async session holds the write lock; seen
    # once on 3.2 in CI's rehearsal, where the waiting task's start timed out and failed it).
    start_watcher(env)
    return Smoke(env, run_id, db)


def start_watcher(env: AirflowEnv) -> None:
    """3.x: the README example's watcher, its day already in the table (its first check reports it)."""
    if compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
        orders = example_db(env)
        orders.parent.mkdir(parents=True, exist_ok=True)
        sqlite_exec(orders, "CREATE TABLE IF NOT EXISTS orders_loaded (day TEXT)")
        sqlite_exec(orders, "INSERT INTO orders_loaded VALUES (?)", (DAY,))
        env.wait_for_dag(WATCH_DAG)
        env.unpause(WATCH_DAG)  # Airflow runs a watcher only for an asset of an unpaused DAG


def expected_path() -> str:
    """The Waits view's ``path`` of the untemplated wait: where it started."""
    return "zero-worker" if compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED else "worker-first"


def test_waits_view_opens_inside_airflows_ui_with_the_waits_row(smoke: Smoke) -> None:
    env = smoke.env
    if not env.is_airflow3:
        pytest.skip(
            "2.11: the Waits view is a webserver page, not inside Airflow 3's UI; the session's Airflow runs "
            "no webserver (tests/integration/test_ui_live.py opens it on 2.11)"
        )
    if compat.web_urls.PLUGIN_PAGES != "in_ui":
        pytest.skip(NO_PLUGIN_VIEWS)
    from tests.integration.ui_browser import chromium, no_browser_reason
    from tests.integration.ui_pages import open_from_nav, wait_for, wait_rows

    reason = no_browser_reason()
    if reason:
        pytest.skip(f"NO BROWSER: {reason}")
    ti = ti_row(env, WAIT_DAG, smoke.run_id, WAIT_TASK)
    assert ti is not None and ti["state"] == "deferred", ti  # the next test lets it succeed
    driver = chromium()
    try:
        open_from_nav(driver, env, "Waits")  # Airflow's home -> Browse -> Waits: our page in its iframe

        def ours() -> list[dict[str, str]]:
            return [r for r in wait_rows(driver) if (r["dagId"], r["runId"]) == (WAIT_DAG, smoke.run_id)]

        (row,) = wait_for("the deferred wait's row in table#waits", ours, timeout=60, driver=driver)
    finally:
        driver.quit()
    assert row["taskId"] == WAIT_TASK and row["mapIndex"] == "-1", row
    assert row["path"] == expected_path(), row
    assert row["servedBy"] and not row["unservedReason"], row  # the session's triggerer holds it
    assert "zw_static" in row["condition"] and "sn_sqlite" in row["condition"], row


def test_deferrable_wait_succeeds_on_try_1(smoke: Smoke) -> None:
    env = smoke.env
    sqlite_exec(smoke.condition_db, "INSERT INTO zw_static VALUES ('d1', 'done')")
    assert env.wait_run(WAIT_DAG, smoke.run_id, timeout=180) == "success"
    ti = ti_row(env, WAIT_DAG, smoke.run_id, WAIT_TASK)
    assert ti is not None and ti["state"] == "success" and ti["try_number"] == 1, ti  # retries=2: none used
    history = env.state_history(WAIT_DAG, smoke.run_id, WAIT_TASK)
    assert "deferred" in history and history[-1] == "success", history
    log = env.task_log(WAIT_DAG, smoke.run_id, WAIT_TASK)
    ((queued_dttm, hostname),) = env.query(
        "SELECT queued_dttm, hostname FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s "
        "AND map_index = -1",
        (WAIT_DAG, smoke.run_id, WAIT_TASK),
    )
    if (
        compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED
    ):  # zero-worker: started and ended in the triggerer
        assert not set(WORKER_PHASES) & set(history), (history, log[-3000:])
        assert history[-2:] == ["deferred", "success"], history
        assert queued_dttm is None and not hostname, (queued_dttm, hostname)  # set only by a worker's try
        assert "Zero-worker wait" in log, log[-3000:]
    else:  # 3.0-3.2: check #0 on a worker, the wait in the triggerer, the end on a worker
        # Sampled every 0.25 s, a fast check #0 can leave "running" unseen (CI, 2026-12-01): the executor's "queued"
        # before the first deferral is a worker phase too, and only a worker's try sets queued_dttm and hostname.
        before_deferral = history[: history.index("deferred")]
        assert set(WORKER_PHASES) & set(before_deferral), history
        assert queued_dttm is not None and hostname, (queued_dttm, hostname)
        assert "not in the triggerer:" in log and "disabled on 3.0-3.2" in log, log[-3000:]


def asset_events(env: AirflowEnv, asset: str) -> list[dict[str, Any]]:
    rows = env.query_dicts(
        "SELECT e.id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = %s "
        "ORDER BY e.id",
        (asset,),
    )
    return [{"id": row["id"], **event_payload(row["extra"])} for row in rows]


def test_watcher_event_lands_on_the_asset(smoke: Smoke) -> None:
    env = smoke.env
    if not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
        pytest.skip(NO_WATCHERS)
    events = env.poll(lambda: asset_events(env, WATCH_ASSET), 240, f"an asset event on {WATCH_ASSET}")
    assert [(e["value"], e["seq"], e["redelivered"]) for e in events] == [(DAY, 1, False)], events
    # ... and the scheduler ran the consumer on it: an asset-triggered run that consumed that event.
    (run,) = env.wait_runs(WATCH_DAG, 1, timeout=180)
    assert (run["run_type"], run["state"]) == ("asset_triggered", "success"), run
    linked = env.query(
        "SELECT l.event_id FROM dagrun_asset_event l JOIN dag_run r ON r.id = l.dag_run_id "
        "WHERE r.dag_id = %s AND r.run_id = %s",
        (WATCH_DAG, run["run_id"]),
    )
    assert [event_id for (event_id,) in linked] == [events[0]["id"]], linked
