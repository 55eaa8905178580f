"""No rendered secret stored or logged in plaintext (issue 23), in a real Airflow.

``sc_secret`` (tests/integration/dags/sc_secret_dags.py) has deferrable sensors whose ``token`` is rendered
from a connection password: worker-first unmapped, worker-first mapped, and the zero-worker
path (3.3 starts it in the triggerer; 2.11 on a worker, it is templated). They wait while deferred; the whole
metadata DB (every table, every column) is scanned for the password then — the trigger rows exist only while
the tasks are deferred — and again, with the whole log folder, after every task succeeded. Each sensor's
condition is true only when the file holds the token, so the sealed value was opened in the triggerer. The
scans are proven able to fail: a value planted in a row and in a log file is found.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

from airflow_harness.env import TERMINAL_TI_STATES, AirflowEnv
from airflow_smart_ext.secret_kwargs import SEALED
from tests.integration.live import start_run

DAG_ID = "sc_secret"
CONN_ID = "sc_secret_conn"
TASKS = {("worker_first", -1), ("mapped", 0), ("zero_worker", -1)}


def _texts(value: Any) -> list[str]:
    """Every readable form of a stored value (blobs also decompressed when they are zlib data)."""
    if value is None:
        return []
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, bytes):
        forms = [value.decode("utf-8", "replace")]
        with contextlib.suppress(zlib.error):
            forms.append(zlib.decompress(value).decode("utf-8", "replace"))
        return forms
    if isinstance(value, (dict, list)):
        return [json.dumps(value, default=str)]
    return [str(value)]


def db_hits(env: AirflowEnv, needle: str) -> list[str]:
    """``table.column`` of every stored value holding ``needle``: a dump of the whole metadata DB."""
    if env.uses_postgres:
        tables = [
            row[0]
            for row in env.query(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        ]
    else:
        tables = [row[0] for row in env.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert len(tables) > 20, tables  # the whole schema, not a subset
    hits = []
    for table in tables:
        for row in env.query_dicts(f'SELECT * FROM "{table}"'):
            for name, value in row.items():
                if any(needle in text for text in _texts(value)):
                    hits.append(f"{table}.{name}")
    return hits


def log_hits(env: AirflowEnv, needle: str) -> list[str]:
    """Every file under the log folders (task, trigger, component logs) holding ``needle``."""
    found = []
    for folder in (env.log_folder, env.component_log_folder):
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and needle.encode() in path.read_bytes():
                found.append(str(path.relative_to(env.home)))
    return found


def states(env: AirflowEnv, run_id: str) -> dict[tuple[str, int], str]:
    return {(r["task_id"], int(r["map_index"])): r["state"] for r in env.task_instances(DAG_ID, run_id)}


def wait_states(env: AirflowEnv, run_id: str, wanted: set[str], timeout: float = 240) -> dict[Any, str]:
    deadline = time.monotonic() + timeout
    seen: dict[Any, str] = {}
    while time.monotonic() < deadline:
        seen = states(env, run_id)
        if set(seen) >= TASKS and all(seen[t] in wanted for t in TASKS):
            return seen
        ended = {t: s for t, s in seen.items() if s in TERMINAL_TI_STATES and s not in wanted}
        assert not ended, (ended, env.task_log(DAG_ID, run_id, next(iter(ended))[0]))
        time.sleep(0.5)
    raise AssertionError(f"tasks did not reach {wanted}: {seen}")


def test_a_rendered_connection_password_is_stored_and_logged_nowhere(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    env = airflow_env
    secret = f"sc-pw-{uuid.uuid4().hex}"
    env.add_connection(CONN_ID, f"http://user:{secret}@example.invalid")
    ready = tmp_path / "ready.txt"
    started = time.monotonic()
    run_id = start_run(env, DAG_ID, {"path": str(ready)})
    wait_states(env, run_id, {"deferred"})
    trigger_rows = env.query("SELECT COUNT(*) FROM trigger")[0][0]
    assert trigger_rows >= 1  # the rows that held the plaintext before: scanned while they exist
    if env.is_airflow3:  # kwargs stored as plain JSON: the worker-first rows carry the sealed envelope
        kwargs = [str(row[0]) for row in env.query("SELECT kwargs FROM trigger")]
        assert sum(SEALED in text for text in kwargs) >= 2, kwargs  # worker_first + mapped
    assert db_hits(env, secret) == []

    ready.write_text(secret)  # true only where the token arrived intact (opened in the triggerer)
    assert env.wait_run(DAG_ID, run_id, timeout=240) == "success"
    assert set(states(env, run_id).values()) == {"success"}
    assert db_hits(env, secret) == []
    assert log_hits(env, secret) == []
    print(f"sealed-secret scenario: {time.monotonic() - started:.1f}s, {trigger_rows} trigger rows scanned")

    # The scans can fail: a planted row and a planted log line are found.
    planted = f"sc-planted-{uuid.uuid4().hex}"
    env.execute(
        "INSERT INTO variable (key, val, is_encrypted) VALUES (%s, %s, %s)", ("sc_planted", planted, False)
    )
    try:
        assert db_hits(env, planted) == ["variable.val"]
    finally:
        env.execute("DELETE FROM variable WHERE key = %s", ("sc_planted",))
    marker = env.log_folder / "sc_planted.log"
    marker.write_text(f"line with {planted}\n")
    try:
        assert log_hits(env, planted) == [str(marker.relative_to(env.home))]
    finally:
        marker.unlink()
