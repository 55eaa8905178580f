"""Issue 14: a database outage mid-wait costs no try. Ten deferrable SQL sensors share one condition in a
real triggerer; the condition's SQLite database is locked for 60 s (every check fails with "database is
locked", a transient error); the row arrives with the unlock. Every task must succeed on its first try.
(The connection lookup hiccup: test_connection_hiccup_live.py.)

Shares the session's Airflow (tests/integration/conftest.py); about 90 s of it is the outage itself.
"""

from __future__ import annotations

import sqlite3
import time

from airflow_harness.env import AirflowEnv
from tests.integration.live import (
    day_conf,
    sqlite_db,
    sqlite_exec,
    start_run,
    unique,
    wait_for,
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
