"""The harness itself against a real Airflow: runs, the ``deferred`` state and task logs are observable.

Uses tests/integration/dags/smart_ext_smoke.py (``echo_conf`` >> ``defer_once``, Airflow's SuccessTrigger).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_harness.env import MAX_RESTARTS, AirflowEnv, AirflowEnvError, ComponentDeadError, _Component

DAG_ID = "smart_ext_smoke"


@pytest.fixture(scope="module")
def smoke_run(airflow_env: AirflowEnv) -> str:
    """One triggered run of the smoke DAG, finished (shared by the tests of this module)."""
    airflow_env.wait_for_dag(DAG_ID)
    airflow_env.unpause(DAG_ID)
    run_id = airflow_env.trigger(DAG_ID, conf={"probe": "harness-smoke"})
    state = airflow_env.wait_run(DAG_ID, run_id, timeout=180)
    assert state == "success", airflow_env.task_instances(DAG_ID, run_id)
    return run_id


def test_smoke_dag_runs_to_success(airflow_env: AirflowEnv, smoke_run: str) -> None:
    run = airflow_env.dag_run(DAG_ID, smoke_run)
    assert run["state"] == "success"
    assert run["run_type"] == "manual"
    tis = {ti["task_id"]: ti for ti in airflow_env.task_instances(DAG_ID, smoke_run)}
    assert set(tis) == {"echo_conf", "defer_once"}
    assert {ti["state"] for ti in tis.values()} == {"success"}
    # echo_conf is upstream of defer_once: the DB ordering must reflect it.
    assert tis["echo_conf"]["end_date"] <= tis["defer_once"]["start_date"]


def test_defer_once_history_shows_deferred(airflow_env: AirflowEnv, smoke_run: str) -> None:
    history = airflow_env.state_history(DAG_ID, smoke_run, "defer_once")
    assert "deferred" in history, history
    assert history[-1] == "success", history
    # Resumed after the trigger fired: the deferral is recorded on the row no more.
    ti = next(t for t in airflow_env.task_instances(DAG_ID, smoke_run) if t["task_id"] == "defer_once")
    assert ti["trigger_id"] is None and ti["next_method"] is None, ti
    # The plain sensor never deferred.
    assert "deferred" not in airflow_env.state_history(DAG_ID, smoke_run, "echo_conf")


def test_task_logs_are_readable(airflow_env: AirflowEnv, smoke_run: str) -> None:
    tis = {ti["task_id"]: ti for ti in airflow_env.task_instances(DAG_ID, smoke_run)}

    echo_log = airflow_env.task_log(DAG_ID, smoke_run, "echo_conf", try_number=tis["echo_conf"]["try_number"])
    assert "smoke conf:" in echo_log, echo_log[-3000:]
    assert "harness-smoke" in echo_log, echo_log[-3000:]

    defer_log = airflow_env.task_log(
        DAG_ID, smoke_run, "defer_once", try_number=tis["defer_once"]["try_number"]
    )
    assert "smoke resumed after deferral" in defer_log, defer_log[-3000:]


def test_several_triggerers_need_postgresql() -> None:
    with pytest.raises(AirflowEnvError, match="need PostgreSQL"):
        AirflowEnv(triggerers=2, pg_dsn="")
    env = AirflowEnv(triggerers=3, pg_dsn="postgresql://nobody@127.0.0.1:1/none")  # nothing started
    try:
        assert env.triggerer_names == ["triggerer", "triggerer-2", "triggerer-3"]
        assert set(env.triggerer_names) <= set(env.component_names)
    finally:
        env.stop()


def test_each_job_component_knows_its_job_row(airflow_env: AirflowEnv, smoke_run: str) -> None:
    """``trigger_owners()`` names a trigger's triggerer by the job id the harness saw it start with."""
    rows = airflow_env.query("SELECT id, job_type FROM job WHERE state = 'running'")
    job_id = airflow_env.components["triggerer"].job_id
    assert (job_id, "TriggererJob") in rows, (job_id, rows)
    assert airflow_env.trigger_owners() == []  # the smoke run's trigger fired and is gone


def test_a_killed_scheduler_is_reported_once_and_restarted(airflow_env: AirflowEnv, smoke_run: str) -> None:
    old = airflow_env.components["scheduler"]
    assert old.process is not None and old.running
    reported = len(airflow_env.incidents)
    os.kill(old.process.pid, signal.SIGKILL)  # the leader only, like the OOM killer or a crash would
    old.process.wait(timeout=30)

    airflow_env.check_components()
    new = airflow_env.components["scheduler"]
    assert new is not old and new.running and new.restarts == old.restarts + 1
    assert new.job_id is not None and new.job_id != old.job_id  # a fresh SchedulerJob heartbeats
    incidents = airflow_env.incidents[reported:]
    assert len(incidents) == 1, incidents
    assert incidents[0].startswith("Airflow scheduler died (killed by SIGKILL); restart"), incidents[0]
    assert "Last lines of its log:" in incidents[0]
    airflow_env.check_components()
    assert len(airflow_env.incidents) == reported + 1  # reported once, not on every later check
    assert airflow_env.dead == {}

    run_id = airflow_env.trigger(DAG_ID, conf={"probe": "after-restart"})
    assert airflow_env.wait_run(DAG_ID, run_id, timeout=180) == "success"


def test_a_component_past_its_restarts_is_dead_with_its_cause(tmp_path: Path) -> None:
    """No Airflow needed: a 'scheduler' whose process died on its own after MAX_RESTARTS restarts."""
    env = AirflowEnv(pg_dsn="", home=tmp_path / "home")
    log = tmp_path / "scheduler.log"
    log.write_text(
        "===== 12:00:00 starting: airflow scheduler\nTraceback (most recent call last):\n"
        "sqlite3.OperationalError: database is locked\n"
    )
    component = _Component("scheduler", ["airflow", "scheduler"], log)
    component.process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    component.process.wait(timeout=30)
    component.restarts = MAX_RESTARTS
    env.components["scheduler"] = component
    env.component_log_folder = tmp_path
    env._started = True
    try:
        for _ in range(2):  # every later call says it again; the report is made once
            with pytest.raises(ComponentDeadError) as dead:
                env.check_components()
            assert str(dead.value) == (
                "Airflow scheduler is dead: exit 1: sqlite3.OperationalError: database is locked"
            )
        assert len(env.incidents) == 1, env.incidents
        assert f"after {MAX_RESTARTS} restarts; not restarted again" in env.incidents[0]
    finally:
        env.components.clear()  # its PID is reaped and may be reused: stop() must not signal it
        env.stop()


def _redis(port: int, *words: str) -> bytes:
    import socket

    command = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(command.encode())
        return conn.recv(64)


def test_redis_broker_keeps_queued_messages_across_a_graceful_restart(tmp_path: Path) -> None:
    """The distributed pass's broker restart: a message queued before it is still queued after it."""
    from airflow_harness.redis_broker import RedisBroker

    broker = RedisBroker(tmp_path / "redis")
    broker.start()
    port = broker.port
    try:
        assert _redis(broker.port, "LPUSH", "default", "message") == b":1\r\n"
        broker.restart(down_for=0.5)
        assert broker.restarts == 1 and broker.ping() and broker.port == port
        assert _redis(broker.port, "LLEN", "default") == b":1\r\n"
    finally:
        broker.stop()
    assert not broker.ping()
