"""The harness itself against a real Airflow: runs, the ``deferred`` state and task logs are observable.

Uses tests/integration/dags/smart_ext_smoke.py (``echo_conf`` >> ``defer_once``, Airflow's SuccessTrigger).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import REPO_ROOT, AirflowEnvError

DAG_ID = "smart_ext_smoke"

# The inner session of test_a_killed_scheduler_fails_its_test: the first test SIGKILLs the scheduler through
# the harness (not stopped on purpose) and would pass; the second one needs the restarted scheduler.
_KILLED_SCHEDULER_TESTS = """
import signal

from airflow_harness.env import AirflowEnv


def test_kills_the_scheduler(airflow_env: AirflowEnv) -> None:
    airflow_env.kill_component("scheduler", signal.SIGKILL)  # returns once it exited


def test_runs_on_the_restarted_scheduler(airflow_env: AirflowEnv) -> None:
    scheduler = airflow_env.components["scheduler"]
    assert scheduler.running and scheduler.restarts == 1 and scheduler.death is None
    airflow_env.wait_for_dag("smart_ext_smoke")
    airflow_env.unpause("smart_ext_smoke")
    run_id = airflow_env.trigger("smart_ext_smoke", conf={"probe": "after-the-kill"})
    assert airflow_env.wait_run("smart_ext_smoke", run_id, timeout=240) == "success"
"""


def test_a_killed_scheduler_fails_its_test(tmp_path: Path) -> None:
    """Issue 41, against a real Airflow: a scheduler that dies during a test fails that test, named with its
    cause and log, and is restarted for the next test. An inner pytest session with the integration tier's
    hooks and airflow_env (one Airflow start, on this pass's database); this test starts no Airflow itself."""
    (tmp_path / "test_killed_scheduler.py").write_text(_KILLED_SCHEDULER_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("SMART_EXT_TOPOLOGY", "SMART_EXT_SQLITE_SLICE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.integration.conftest", "-p", "no:cacheprovider"]
        + ["-o", "timeout=480", "-rfE", "test_killed_scheduler.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        stdin=subprocess.DEVNULL,
    )
    out = inner.stdout  # the harness's own stderr lines (restarts between tests) are not pytest's
    print(out[-8000:], inner.stderr[-2000:], sep="\n")
    assert inner.returncode == 1, out[-8000:]
    summary = out.strip().splitlines()[-1]
    assert "1 failed, 1 passed" in summary and "skipped" not in summary and "rerun" not in summary, summary
    assert "FAILED test_killed_scheduler.py::test_kills_the_scheduler" in out, out[-6000:]
    assert (
        "Airflow scheduler died (killed by SIGKILL); not a known Airflow defect. Last lines of its log:"
        in out
    )
    assert (
        "test_killed_scheduler.py::test_kills_the_scheduler (call, try 1): Airflow scheduler died "
        "(killed by SIGKILL); not a known Airflow defect; restarted"
    ) in out, out[-6000:]
    assert "known-defect re-runs: 0 (passed on re-run: 0)" in out


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
