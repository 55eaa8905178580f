"""Issue 14: a database outage mid-wait costs no try. Ten deferrable SQL sensors share one condition in a
real triggerer; the condition's SQLite database is locked for 60 s (every check fails with "database is
locked", a transient error); the row arrives with the unlock. Every task must succeed on its first try.

And a connection lookup hiccup: the sensor's connection is missing from the metadata database for a few
seconds around a check (what Airflow's lookup also answers when the metadata database fails: "isn't
defined"); the check waits it out and the task still succeeds on its first try.

Shares the session's Airflow (tests/integration/conftest.py); about 90 s of it is the outage itself.
"""

from __future__ import annotations

import re
import sqlite3
import time

from tests.integration.harness import AirflowEnv
from tests.integration.test_deferrable_live import TRIGGER_CHECK_RE, wait_for
from tests.integration.test_sensors_live import (
    add_connection_fields,
    day_conf,
    epoch,
    sqlite_db,
    sqlite_exec,
    start_run,
    ti_row,
    unique,
    wait_ti_state,
)

OUTAGE_SECONDS = 60.0


def test_database_outage_mid_wait_costs_no_try(airflow_env: AirflowEnv) -> None:
    env = airflow_env
    dag_id = "sn_sql_outage"
    db = sqlite_db(env)
    table = unique("outage")
    sqlite_exec(db, f"CREATE TABLE {table} (day TEXT, status TEXT)")
    run_id = start_run(env, dag_id, day_conf(table))
    tasks = [f"wait_{n:02d}" for n in range(10)]

    def all_deferred() -> bool:
        rows = env.task_instances(dag_id, run_id)
        return len(rows) == len(tasks) and all(r["state"] == "deferred" for r in rows)

    wait_for(all_deferred, 300, "10 deferred tasks", env)
    triggerer_log_offset = len(env.component_log("triggerer"))

    # The outage: an exclusive lock on the condition's database for 60 s. The row that satisfies the
    # condition is written inside the locked transaction, so it becomes visible exactly at recovery.
    lock = sqlite3.connect(db, timeout=30, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        lock.execute(f"INSERT INTO {table} VALUES ('d1', 'done')")
        outage_end = time.monotonic() + OUTAGE_SECONDS
        while time.monotonic() < outage_end:
            rows = env.task_instances(dag_id, run_id)
            bad = [r for r in rows if r["state"] not in ("deferred", "scheduled", "queued", "running")]
            assert not bad, f"a task left its wait during the outage: {bad}"
            time.sleep(2)
        lock.execute("COMMIT")
    finally:
        lock.close()

    assert env.wait_run(dag_id, run_id, timeout=300) == "success"
    failed_tries = 0
    for task_id in tasks:
        row = next(r for r in env.task_instances(dag_id, run_id) if r["task_id"] == task_id)
        history = env.state_history(dag_id, run_id, task_id)
        assert row["state"] == "success", row
        if row["try_number"] != 1 or "up_for_retry" in history or "failed" in history:
            failed_tries += 1
    print(
        f"outage test: {len(tasks)} deferrable sensors, {OUTAGE_SECONDS:g} s lock, failed tries: {failed_tries}"
    )
    assert failed_tries == 0
    # The checks really met the outage (and rode it out), in the triggerer's or the tasks' trigger logs.
    logs = env.component_log("triggerer")[triggerer_log_offset:] + "".join(
        env.task_log(dag_id, run_id, task_id) for task_id in tasks
    )
    assert "database is locked" in logs, "no check hit the locked database: the outage was not exercised"
    assert "in a row" in logs


def test_a_connection_lookup_hiccup_mid_wait_costs_no_try(airflow_env: AirflowEnv) -> None:
    env = airflow_env
    dag_id = "zw_sql"  # one deferrable BackoffSqlSensor, checks every 2-4 s, retries=2
    db = sqlite_db(env)
    conn_id = unique("sn_hiccup")  # its own connection: the hiccup touches no other test's
    add_connection_fields(env, conn_id, "sqlite", host=str(db))
    table = unique("hiccup")
    sqlite_exec(db, f"CREATE TABLE {table} (day TEXT, status TEXT)")
    run_id = start_run(env, dag_id, day_conf(table, conn_id))
    wait_ti_state(env, dag_id, run_id, "wait", {"deferred"})

    def check_lines() -> list[re.Match[str]]:
        return list(TRIGGER_CHECK_RE.finditer(env.task_log(dag_id, run_id, "wait")))

    def announced_check() -> tuple[int, float] | None:
        """The next check the trigger announced, when it is at least 1.5 s away (time to hide the row)."""
        with_next = [m for m in check_lines() if m["next"]]
        if not with_next:
            return None
        index, at = int(with_next[-1]["next"]), epoch(with_next[-1]["next_at"])
        return (index, at) if at - time.time() >= 1.5 else None

    announced: list[tuple[int, float]] = []  # kept as found: read again, it could already be too close

    def found_announced_check() -> bool:
        check = announced_check()
        if check is not None:
            announced.append(check)
        return check is not None

    wait_for(found_announced_check, 120, "a check announced in the triggerer", env)
    next_index, next_at = announced[0]
    # The hiccup: from now until 2 s after the announced check, the connection is not in the metadata DB.
    # That check's lookup answers "isn't defined" at its time and 1 s later; the third lookup (3 s) finds it.
    hidden = f"{conn_id}_hidden"
    env.execute("UPDATE connection SET conn_id = %s WHERE conn_id = %s", (hidden, conn_id))
    hidden_at = time.time()
    try:
        time.sleep(max(0.0, next_at + 2.0 - time.time()))
    finally:
        env.execute("UPDATE connection SET conn_id = %s WHERE conn_id = %s", (conn_id, hidden))
    restored_at = time.time()
    wait_for(
        lambda: any(int(m["index"]) >= next_index for m in check_lines()), 60, "the check in the hiccup", env
    )
    in_hiccup = next(m for m in check_lines() if int(m["index"]) >= next_index)
    sqlite_exec(db, f"INSERT INTO {table} VALUES ('d1', 'done')")
    assert env.wait_run(dag_id, run_id, timeout=300) == "success"

    log = env.task_log(dag_id, run_id, "wait")
    row = ti_row(env, dag_id, run_id, "wait")
    history = env.state_history(dag_id, run_id, "wait")
    assert row is not None and row["state"] == "success" and row["try_number"] == 1, (row, history)
    assert "up_for_retry" not in history and "failed" not in history, history
    # The check met the hiccup (scheduled inside it) and was an ordinary "not yet", not a failed check.
    assert hidden_at <= float(in_hiccup["at"]) < restored_at, (in_hiccup.group(0), hidden_at, restored_at)
    assert in_hiccup["status"] == "negative", in_hiccup.group(0)
    assert "isn't defined" not in log and "failed (" not in log, log[-3000:]
