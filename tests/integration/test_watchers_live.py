"""Condition watchers in a real Airflow (issue 27): DAGs that start when the data lands, no sensor task.

Airflow 3.x (asset watchers), on PostgreSQL (the condition database lives on the test's PostgreSQL server;
its ``wt_check(name)`` records every check with the database's clock). DAGs: tests/integration/dags/
wt_watcher_dags.py. One story, in order (module fixture ``days_story``):

1. five partition days land one by one (``days``), ~10 s apart: one asset event per new day, each day in its
   event's payload, and one consumer run per event;
2. between day 2 and day 3 the triggerer is killed (-9) and day 3 lands while it is down: reported once when
   it is back (the watermark comes from Airflow's asset state store on 3.3+), day 2 not again;
3. day 5 lands inside a transaction that holds the table locked for 60 s: one check blocks there (given up
   at ``check_timeout``; no second check starts while it runs), the schedule goes on, nothing is reported
   twice or lost, day 5 is reported once the lock is released.

Separately: ten watchers on one condition poll it once per cycle (counted at the database), and each of
them reports a new value once; with ``every_value=True`` a burst of three days in one insert is three events,
in order. On Airflow 2.11 a watcher fails at parse, naming 3.0 and the alternative.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import PG_DSN_ENV, AirflowEnvError
from airflow_smart_ext.triggers.watcher_edge import COMMIT_DELAY_SECONDS
from tests.integration.live import add_postgres_connection, pg_cursor, watchers_running

pytestmark = pytest.mark.timeout(900)

CONN_ID = "wt_conditions"
CONDITION_DB = "wt_conditions"
DAYS = ["2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05", "2026-03-06"]
SHARED = 10
SHARED_PERIOD = 3.0  # the shared watchers' poke_interval = max_wait (no jitter): one poll per 3 s
LOCK_SECONDS = 60.0
# What a user on 2.11 might write: the watcher fails while the file is parsed, an import error in the UI.
REFUSED_DAG_FILE = """
import datetime as dt

from airflow import DAG
from airflow.operators.empty import EmptyOperator

from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

WATCHER = ConditionWatcher(sql_condition("warehouse", "SELECT max(day) FROM orders_loaded"), poke_interval=60)

with DAG("wt_watcher_refused", schedule=None, start_date=dt.datetime(2026, 1, 1), catchup=False):
    EmptyOperator(task_id="consume")
"""


@pytest.fixture(scope="module")
def condition_dsn(airflow_env: AirflowEnv) -> str:
    if not airflow_env.is_airflow3:
        pytest.skip("asset watchers need Airflow >= 3.0; test_watcher_refused_at_parse_on_2_11 covers 2.11")
    server = os.environ.get(PG_DSN_ENV, "")
    if not server:
        pytest.skip(
            f"the condition database needs a PostgreSQL server: set {PG_DSN_ENV} (scripts/dev.py test does)"
        )
    with pg_cursor(server) as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {CONDITION_DB}")
        cur.execute(f"CREATE DATABASE {CONDITION_DB}")
    dsn = server.rsplit("/", 1)[0] + f"/{CONDITION_DB}"
    with pg_cursor(dsn) as cur:
        cur.execute("CREATE TABLE days (day text)")
        cur.execute("CREATE TABLE shared_value (v text)")
        cur.execute("CREATE TABLE burst_days (day text)")
        # at: when the check could plan (after any lock on ``days``); sent: when its query reached the server
        cur.execute(
            "CREATE TABLE checks (cond text NOT NULL, at double precision NOT NULL, sent double precision NOT NULL)"
        )
        cur.execute(
            "CREATE FUNCTION wt_check(c text) RETURNS text LANGUAGE sql VOLATILE AS $$ "
            "INSERT INTO checks VALUES (c, extract(epoch FROM clock_timestamp()), "
            "extract(epoch FROM statement_timestamp())); "
            "SELECT CASE WHEN c = 'days' THEN (SELECT max(day) FROM days) "
            "ELSE (SELECT max(v) FROM shared_value) END; $$"
        )
    add_postgres_connection(airflow_env, CONN_ID, dsn)
    # Every consumer at once: each watcher starts after the next parse of the file (~15-60 s), in parallel.
    for dag_id in ("wt_days_consumer", "wt_shared_consumer", "wt_burst_consumer"):
        airflow_env.wait_for_dag(dag_id)
        airflow_env.unpause(dag_id)
    return dsn


def checks(dsn: str, cond: str, since: float = 0.0) -> list[float]:
    """When each check of ``cond`` since ``since`` could plan (after any lock on its table)."""
    return [at for _sent, at in check_times(dsn, cond, since)]


def check_times(dsn: str, cond: str, since: float = 0.0) -> list[tuple[float, float]]:
    """(when its query reached the server, when it could plan) of each check of ``cond`` planned since ``since``."""
    with pg_cursor(dsn) as cur:
        cur.execute("SELECT sent, at FROM checks WHERE cond = %s AND at >= %s ORDER BY at", (cond, since))
        return [(float(sent), float(at)) for sent, at in cur.fetchall()]


def db_now(dsn: str) -> float:
    with pg_cursor(dsn) as cur:
        cur.execute("SELECT extract(epoch FROM clock_timestamp())")
        return float(cur.fetchone()[0])


def events(env: AirflowEnv, asset: str) -> list[dict[str, Any]]:
    """The asset's events, oldest first, with the payload our watcher put in ``extra``."""
    rows = env.query_dicts(
        "SELECT e.id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = %s "
        "ORDER BY e.id",
        (asset,),
    )
    for row in rows:
        extra = row["extra"]
        if isinstance(extra, (bytes, memoryview, str)):
            import json

            extra = json.loads(bytes(extra).decode() if not isinstance(extra, str) else extra)
        row["payload"] = (extra or {}).get("payload", {})
    return rows


def wait_events(env: AirflowEnv, asset: str, count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        seen = events(env, asset)
        if len(seen) >= count:
            return seen
        if time.monotonic() > deadline:
            raise AirflowEnvError(
                f"{asset}: {len(seen)} of {count} asset events within {timeout}s: {seen}\n"
                + env.component_log("triggerer")[-6000:]
            )
        time.sleep(1)


def insert_day(dsn: str, day: str) -> None:
    with pg_cursor(dsn) as cur:
        cur.execute("INSERT INTO days VALUES (%s)", (day,))


def consumer_runs(env: AirflowEnv, dag_id: str) -> list[dict[str, Any]]:
    """Each asset-triggered run of ``dag_id`` with the ids of the events it consumed."""
    runs = env.query_dicts(
        "SELECT r.id, r.run_id, r.state FROM dag_run r WHERE r.dag_id = %s AND r.run_type = 'asset_triggered' "
        "ORDER BY r.id",
        (dag_id,),
    )
    for run in runs:
        run["events"] = sorted(
            event_id
            for (event_id,) in env.query(
                "SELECT event_id FROM dagrun_asset_event WHERE dag_run_id = %s", (run["id"],)
            )
        )
    return runs


@pytest.fixture(scope="module")
def days_story(airflow_env: AirflowEnv, condition_dsn: str) -> dict[str, Any]:
    env, dsn = airflow_env, condition_dsn
    watchers_running(env, ["wt_days"])
    story: dict[str, Any] = {}
    # Days 1 and 2, each reported before the next lands.
    for n, day in enumerate(DAYS[:2], start=1):
        insert_day(dsn, day)
        wait_events(env, "wt_days", n, timeout=120)
    # Kill -9 once day 2's watermark is committed (COMMIT_DELAY after its event: the documented duplicate
    # window is a crash inside it), land day 3 while the triggerer is down, bring it back.
    time.sleep(COMMIT_DELAY_SECONDS + 3)
    env.stop_component("triggerer", crash=True)
    insert_day(dsn, DAYS[2])
    story["down_since"] = db_now(dsn)
    time.sleep(5)
    env.start_component("triggerer")
    wait_events(env, "wt_days", 3, timeout=240)
    insert_day(dsn, DAYS[3])
    wait_events(env, "wt_days", 4, timeout=120)
    # Day 5 lands in a transaction that holds the table locked for LOCK_SECONDS: every check meanwhile blocks.
    locked = threading.Event()

    def hold_lock() -> None:
        import psycopg2

        with psycopg2.connect(dsn) as pg, pg.cursor() as cur:  # one transaction, committed on exit
            cur.execute("LOCK TABLE days IN ACCESS EXCLUSIVE MODE")
            cur.execute("INSERT INTO days VALUES (%s)", (DAYS[4],))
            locked.set()
            time.sleep(LOCK_SECONDS)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert locked.wait(30)
    story["lock"] = (db_now(dsn), None)
    holder.join()
    story["lock"] = (story["lock"][0], db_now(dsn))
    wait_events(env, "wt_days", 5, timeout=120)
    # Settle: a duplicate or a late event would show within a few more cycles.
    time.sleep(4 * 4 + COMMIT_DELAY_SECONDS)
    story["events"] = events(env, "wt_days")
    env.wait_runs("wt_days_consumer", len(story["events"]), timeout=180)  # asset-triggered runs only
    story["runs"] = consumer_runs(env, "wt_days_consumer")
    story["triggerer_log"] = env.component_log("triggerer")
    return story


def test_one_event_per_new_day_with_the_day_in_its_payload(days_story: dict[str, Any]) -> None:
    values = [e["payload"].get("value") for e in days_story["events"]]
    assert values == DAYS, days_story["events"]
    assert [e["payload"].get("seq") for e in days_story["events"]] == [1, 2, 3, 4, 5], days_story["events"]
    assert not any(e["payload"].get("redelivered") for e in days_story["events"]), days_story["events"]


def test_one_consumer_run_per_event(days_story: dict[str, Any]) -> None:
    runs = days_story["runs"]
    assert [r["events"] for r in runs] == [[e["id"]] for e in days_story["events"]], runs
    assert all(r["state"] == "success" for r in runs), runs


def test_a_day_that_landed_while_the_triggerer_was_down_is_reported_once_after_it(
    days_story: dict[str, Any],
) -> None:
    # Day 3 is event 3 (not lost), and day 2 was not reported again after the restart (not duplicated):
    # the restarted watcher read its watermark (day 2) back from Airflow's asset state store.
    third = days_story["events"][2]["payload"]
    assert third.get("previous") == DAYS[1] and third.get("value") == DAYS[2], third


def test_a_locked_table_costs_no_event_and_adds_none(days_story: dict[str, Any], condition_dsn: str) -> None:
    start, end = days_story["lock"]
    # One check reached the locked table and waited there; while it hung, the watcher's schedule went on and
    # each later check was refused before it started (the condition starts no second check while one runs):
    # no pile-up of blocked connections. A check that waited at the lock could plan only once it was released:
    # its query reached the server (``sent``) long before it planned (an unlocked check plans within ms).
    times = check_times(condition_dsn, "days", since=start)
    waited = [(sent, at) for sent, at in times if at - sent > LOCK_SECONDS / 4]
    assert len(waited) == 1, (times, start, end)
    (sent, planned) = waited[0]  # sent while the table was locked, planned once the lock was released
    assert start - 5 <= sent <= end and planned >= start + LOCK_SECONDS - 5, (waited, start, end)
    assert "PreviousCheckStillRunning" in days_story["triggerer_log"]
    # Day 5 was reported once, after day 4, and nothing else was reported around the lock.
    fifth = days_story["events"][4]["payload"]
    assert fifth.get("value") == DAYS[4] and fifth.get("previous") == DAYS[3], fifth
    assert len(days_story["events"]) == len(DAYS), days_story["events"]


def test_ten_watchers_on_one_condition_poll_it_once_per_cycle(
    airflow_env: AirflowEnv, condition_dsn: str
) -> None:
    env, dsn = airflow_env, condition_dsn
    names = [f"wt_shared_{i}" for i in range(SHARED)]
    watchers_running(env, names)
    time.sleep(2 * SHARED_PERIOD)  # every watcher past its first poll
    start = db_now(dsn)
    cycles = 10
    time.sleep(cycles * SHARED_PERIOD)
    polls = checks(dsn, "shared", since=start)
    per_cycle = len(polls) / cycles
    assert per_cycle <= 1.2, (len(polls), cycles, polls)
    assert len(polls) >= cycles * 0.7, (len(polls), cycles)  # it does poll
    # One new value: every watcher reports it once, each to its own asset.
    with pg_cursor(dsn) as cur:
        cur.execute("INSERT INTO shared_value VALUES ('v1')")
    for name in names:
        seen = wait_events(env, name, 1, timeout=120)
        assert [e["payload"].get("value") for e in seen] == ["v1"], (name, seen)
    time.sleep(3 * SHARED_PERIOD + COMMIT_DELAY_SECONDS)
    assert all(len(events(env, name)) == 1 for name in names)


def test_every_value_reports_a_burst_of_3_in_one_insert_as_3_events_in_order(
    airflow_env: AirflowEnv, condition_dsn: str
) -> None:
    env, dsn = airflow_env, condition_dsn
    watchers_running(env, ["wt_burst"])
    days = ["2026-01-02", "2026-01-03", "2026-01-04"]
    with pg_cursor(dsn) as cur:
        cur.execute("INSERT INTO burst_days VALUES (%s), (%s), (%s)", days)
    wait_events(env, "wt_burst", len(days), timeout=120)
    time.sleep(2 * 4 + COMMIT_DELAY_SECONDS)  # a duplicate or a late event would show by now
    reported = [
        (
            e["payload"].get("value"),
            e["payload"].get("seq"),
            e["payload"].get("previous"),
            e["payload"].get("redelivered"),
        )
        for e in events(env, "wt_burst")
    ]
    assert reported == [
        ("2026-01-02", 1, "2026-01-01", False),
        ("2026-01-03", 2, "2026-01-02", False),
        ("2026-01-04", 3, "2026-01-03", False),
    ]


def test_watcher_refused_at_parse_on_2_11(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    if airflow_env.is_airflow3:
        pytest.skip("Airflow 3 has asset watchers (the tests above); this checks the error of Airflow 2.11")
    source = tmp_path / "wt_watcher_refused.py"
    source.write_text(REFUSED_DAG_FILE)
    message = airflow_env.import_error_of(source, "wt_watcher_refused")
    assert "ConditionWatcher needs Airflow >= 3.0.0" in message, message
    assert f"this is Airflow {airflow_env.airflow_version}" in message, message
    assert "BackoffSqlSensor(..., deferrable=True)" in message, message
