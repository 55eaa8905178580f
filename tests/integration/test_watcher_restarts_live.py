"""A watcher's triggerer stopped between an event and the event's commit (issue 34), in a real Airflow 3.3.

DAG: tests/integration/dags/rs_restart_dags.py (asset ``rs_values``, a watcher checking a SQLite table every
second). The triggerer reads asset events through the api-server (``[smart_ext] watcher_api_conn_id``).
Three values land one at a time; after each, the triggerer is stopped while the watermark still has the value
pending (its commit comes ``COMMIT_DELAY_SECONDS`` after the event), then started again:

* SIGTERM (a deploy) once the event is stored;
* kill -9 once the event is stored;
* kill -9 as soon as the intent is written, before the event is stored if the kill is quick enough.

Each value must end up in exactly one asset event (counted per ``seq`` in the metadata DB), flagged
``redelivered`` only when it was not stored before the stop.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_smart_ext import compat
from airflow_smart_ext.wait.watcher_state import STATE_KEY_PREFIX

pytestmark = pytest.mark.timeout(600)

ASSET = "rs_values"
DAG_ID = "rs_values_consumer"
STATE_KEY = f"{STATE_KEY_PREFIX}:rs_values"
# (how the triggerer stops, once what is seen)
TRIES = [("SIGTERM", "stored"), ("kill -9", "stored"), ("kill -9", "intent")]


def watermark(env: AirflowEnv) -> dict[str, Any]:
    rows = env.query(
        "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id WHERE a.name = %s "
        "AND s.key = %s",
        (ASSET, STATE_KEY),
    )
    return json.loads(rows[0][0]) if rows else {}


def events(env: AirflowEnv) -> list[dict[str, Any]]:
    """The asset's events, oldest first, each with the payload the watcher put in ``extra``."""
    rows = env.query_dicts(
        "SELECT e.id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = %s "
        "ORDER BY e.id",
        (ASSET,),
    )
    for row in rows:
        extra = row["extra"]
        if isinstance(extra, (bytes, memoryview)):
            extra = bytes(extra).decode()
        row["payload"] = (json.loads(extra) if isinstance(extra, str) else extra or {}).get("payload", {})
    return rows


def stored(env: AirflowEnv, value: str) -> bool:
    return any(event["payload"].get("value") == value for event in events(env))


def until(what: str, predicate: Callable[[], Any], timeout: float = 120.0, interval: float = 0.05) -> float:
    """Poll (fast: the window is seconds wide) until ``predicate`` holds; the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(interval)
    return time.monotonic()


@pytest.fixture(scope="module")
def restarts(airflow_env: AirflowEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    env = airflow_env
    if not compat.ASSET_STATE_STORE_SUPPORTED:
        pytest.skip("a watcher keeps its watermark in the asset state store, Airflow >= 3.3")
    db = Path(tmp_path_factory.mktemp("restarts")) / "values.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE vals (v TEXT)")
    # Rows, not `airflow connections add` (seconds per CLI call); the sqlite hook reads the path from host.
    for conn_id, conn_type, host in (("rs_values", "sqlite", str(db)), ("rs_api", "http", env.api_url)):
        env.execute("DELETE FROM connection WHERE conn_id = %s", (conn_id,))
        env.execute(
            "INSERT INTO connection (conn_id, conn_type, host, is_encrypted, is_extra_encrypted) "
            "VALUES (%s, %s, %s, %s, %s)",
            (conn_id, conn_type, host, False, False),
        )
    # Read by the triggerers started after each stop below.
    added = {
        "AIRFLOW__SMART_EXT__WATCHER_API_CONN_ID": "rs_api",
        # after a kill -9 the next triggerer takes the watcher over once the dead one's heartbeat is this old
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "6",
    }
    env.env.update(added)
    tries: list[dict[str, Any]] = []
    try:
        env.wait_for_dag(DAG_ID)
        env.unpause(DAG_ID)
        for seq, (how, when) in enumerate(TRIES, start=1):
            value = f"v{seq}"
            with sqlite3.connect(db) as conn:
                conn.execute("INSERT INTO vals VALUES (?)", (value,))
            until(f"{value} pending", lambda v=value: watermark(env).get("pending") == v)
            intent = time.time()
            if when == "stored":
                until(f"{value} stored", lambda v=value: stored(env, v))
            stopped = time.time()
            env.stop_component("triggerer", crash=how == "kill -9")
            tries.append(
                {
                    "how": how,
                    "value": value,
                    "stopped_after": round(stopped - intent, 2),  # seconds after the intent was seen
                    "pending_at_stop": watermark(env).get("pending"),
                    "stored_at_stop": stored(env, value),
                }
            )
            env.start_component("triggerer")
            until(f"{value} committed", lambda s=seq: watermark(env).get("seq") == s, timeout=180)
        time.sleep(3)  # a late duplicate would show within three checks
        print("tries:", json.dumps(tries))  # the report's numbers (pytest -rA)
        yield {"tries": tries, "events": events(env), "log": env.component_log("triggerer")}
    finally:
        env.pause(DAG_ID)
        for name in added:
            env.env.pop(name, None)
        env.stop_component("triggerer")
        env.start_component("triggerer")


def test_each_stop_fell_between_the_event_and_its_commit(restarts: dict[str, Any]) -> None:
    tries = restarts["tries"]
    assert [t["pending_at_stop"] for t in tries] == [t["value"] for t in tries], tries


def test_every_value_is_in_exactly_one_event(restarts: dict[str, Any]) -> None:
    payloads = [event["payload"] for event in restarts["events"]]
    assert Counter(p["seq"] for p in payloads) == {seq: 1 for seq in range(1, len(TRIES) + 1)}, payloads
    assert [p["value"] for p in payloads] == [t["value"] for t in restarts["tries"]]


def test_only_a_value_not_stored_before_the_stop_is_sent_again_flagged(restarts: dict[str, Any]) -> None:
    flagged = {p["value"]: p["redelivered"] for p in (e["payload"] for e in restarts["events"])}
    assert flagged == {t["value"]: not t["stored_at_stop"] for t in restarts["tries"]}, restarts["tries"]
    assert restarts["log"].count("is stored already") == sum(t["stored_at_stop"] for t in restarts["tries"])
