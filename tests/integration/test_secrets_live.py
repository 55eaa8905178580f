"""No rendered secret stored or logged in plaintext (issues 23 and 35), in a real Airflow.

``sc_secret`` (tests/integration/dags/sc_secret_dags.py) has deferrable sensors whose ``token`` is rendered
from a connection password: worker-first unmapped, worker-first mapped, and the zero-worker
path (3.3 starts it in the triggerer; 2.11 on a worker, it is templated). Its ``BackoffSqlSensor`` tasks bind
a secret Variable and the connection password as query ``parameters``: poke path (a worker runs the query)
and deferred path (the triggerer runs it), plain and mapped. The deferrable tasks wait while deferred; the
whole metadata DB (every table, every column) is scanned for both secrets then — the trigger rows exist only
while the tasks are deferred — and again, with every log file and every component's stdout/stderr (the
harness writes each component's output to ``component-logs/<name>.log``), after every task succeeded. Each
sensor's condition is true only where the secrets arrived intact (the file holds the token; the query's
bound values match the inserted row), so a sealed value was opened in the triggerer. The scans are proven
able to fail: a value planted in a row, in a task log file and in a component's output is found.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

from airflow_harness.env import AirflowEnv
from airflow_harness.state import TERMINAL_TI_STATES
from airflow_smart_ext.secret_kwargs import SEALED
from tests.integration.live import add_connection_fields, sqlite_exec, start_run

DAG_ID = "sc_secret"
CONN_ID = "sc_secret_conn"
SQL_CONN_ID = "sc_sql_db"
SECRET_VARIABLE = "sc_api_secret"
DEFERRED = {
    ("worker_first", -1),
    ("mapped", 0),
    ("zero_worker", -1),
    ("sql_deferred", -1),
    ("sql_deferred_mapped", 0),
}
POKED = {("sql_poke", -1), ("sql_poke_mapped", 0)}


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
    """Every file under the log folders holding ``needle``: task and trigger logs, and each component's
    stdout/stderr (scheduler with its LocalExecutor workers, triggerer, dag-processor, api-server/webserver)."""
    found = []
    for folder in (env.log_folder, env.component_log_folder):
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and needle.encode() in path.read_bytes():
                found.append(str(path.relative_to(env.home)))
    return found


def states(env: AirflowEnv, run_id: str) -> dict[tuple[str, int], str]:
    return {(r["task_id"], int(r["map_index"])): r["state"] for r in env.task_instances(DAG_ID, run_id)}


def wait_states(
    env: AirflowEnv, run_id: str, wanted: set[str], tasks: set[tuple[str, int]], timeout: float = 240
) -> dict[Any, str]:
    deadline = time.monotonic() + timeout
    seen: dict[Any, str] = {}
    while time.monotonic() < deadline:
        seen = states(env, run_id)
        if set(seen) >= tasks and all(seen[t] in wanted for t in tasks):
            return seen
        # A task outside ``tasks`` may end (a poke-mode sensor succeeds), just not otherwise.
        ended = {
            t: s
            for t, s in seen.items()
            if s in TERMINAL_TI_STATES and s not in wanted and (t in tasks or s != "success")
        }
        assert not ended, (ended, env.task_log(DAG_ID, run_id, next(iter(ended))[0]))
        time.sleep(0.5)
    raise AssertionError(f"tasks did not reach {wanted}: {seen}")


def test_a_rendered_connection_password_is_stored_and_logged_nowhere(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    env = airflow_env
    secret = f"sc-pw-{uuid.uuid4().hex}"
    variable_secret = f"sc-var-{uuid.uuid4().hex}"
    secrets = (secret, variable_secret)
    env.add_connection(CONN_ID, f"http://user:{secret}@example.invalid")
    env.set_variable(SECRET_VARIABLE, variable_secret)
    condition_db = tmp_path / "released.db"
    sqlite_exec(condition_db, "CREATE TABLE released (api_secret TEXT, password TEXT, path TEXT)")
    release = "INSERT INTO released VALUES (?, ?, ?)"
    sqlite_exec(condition_db, release, (variable_secret, secret, "worker"))
    add_connection_fields(env, SQL_CONN_ID, "sqlite", host=str(condition_db))
    ready = tmp_path / "ready.txt"
    started = time.monotonic()
    run_id = start_run(env, DAG_ID, {"path": str(ready)})
    wait_states(env, run_id, {"deferred"}, DEFERRED)
    trigger_rows = env.query("SELECT COUNT(*) FROM trigger")[0][0]
    assert trigger_rows >= 1  # the rows that held the plaintext before: scanned while they exist
    if env.is_airflow3:  # kwargs stored as plain JSON: the worker-first rows carry the sealed envelope
        kwargs = [str(row[0]) for row in env.query("SELECT kwargs FROM trigger")]
        # worker_first + mapped + both deferred SQL sensors
        assert sum(SEALED in text for text in kwargs) >= 4, kwargs
    for needle in secrets:
        assert db_hits(env, needle) == []

    # True only where the values arrived intact (opened in the triggerer).
    ready.write_text(secret)
    sqlite_exec(condition_db, release, (variable_secret, secret, "triggerer"))
    assert env.wait_run(DAG_ID, run_id, timeout=240) == "success"
    final = states(env, run_id)
    assert set(final) == DEFERRED | POKED
    assert set(final.values()) == {"success"}
    components = {path.stem for path in env.component_log_folder.glob("*.log")}
    assert components >= set(env.component_names), components  # every component's output is scanned
    for needle in secrets:
        assert db_hits(env, needle) == []
        assert log_hits(env, needle) == []
    print(f"sealed-secret scenario: {time.monotonic() - started:.1f}s, {trigger_rows} trigger rows scanned")

    # The scans can fail: a planted row, a planted task-log line and a planted component line are found.
    planted = f"sc-planted-{uuid.uuid4().hex}"
    env.execute(
        "INSERT INTO variable (key, val, is_encrypted) VALUES (%s, %s, %s)", ("sc_planted", planted, False)
    )
    try:
        assert db_hits(env, planted) == ["variable.val"]
    finally:
        env.execute("DELETE FROM variable WHERE key = %s", ("sc_planted",))
    for folder in (env.log_folder, env.component_log_folder):
        marker = folder / "sc_planted.log"
        marker.write_text(f"line with {planted}\n")
        try:
            assert log_hits(env, planted) == [str(marker.relative_to(env.home))]
        finally:
            marker.unlink()
