"""Every mode ends a wait as poke mode does (issue 23): the differential matrix in a real Airflow.

Every scenario of ``tests/integration/dags/df_scenarios.py`` runs in every mode (poke, reschedule,
deferrable worker-first, zero-worker) as a task of one DAG run per (group, mode): phase 1 runs the
``main`` and ``dagrun`` groups of all four modes at once (the clear action runs per mode as soon as that
mode's first check is counted); phase 2 runs the ``kill`` group while the triggerer is SIGKILLed and
restarted. A (group, mode) DAG run in which the scheduler failed a task on a late executor event (a process
lost on an overloaded machine, apache/airflow #71172: such a cell proves nothing) runs again in a new DAG
run, up to RUN_ATTEMPTS DAG runs; a cell lost in all of them fails. Then every task instance's ending is recorded (differential.record) and each (scenario, mode)
is compared with poke mode: a difference fails unless ``differential.ALLOWED_DIFFERENCES`` allows it. A
failure prints the scenario's recorded tuples for every mode (``*`` marks the unexplained fields).
``SMART_EXT_DF_SCENARIOS=a,b`` / ``SMART_EXT_DF_MODES=zero_worker`` run only those cells (poke mode always).

Runs in the PostgreSQL pass only: 2.11 on SQLite has the SequentialExecutor (one task at a time), so the
fifteen poke-mode sensors of one DAG run would wait one after the other; PostgreSQL gives both versions the
LocalExecutor and the matrix the same shape on both (3.3's SQLite pass would only repeat it).
"""

from __future__ import annotations

import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import PG_DSN_ENV, TERMINAL_RUN_STATES, TERMINAL_TI_STATES, AirflowEnvError
from tests.integration import differential as df

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get(PG_DSN_ENV),
        reason="the differential matrix runs in the PostgreSQL pass (2.11 on SQLite runs one task at a time)",
    ),
    # The first test also runs the whole matrix (the module fixture): ~6 min on an idle 2-core machine,
    # three times that when other Airflows share it.
    pytest.mark.timeout(1800),
]

RUN_TIMEOUT = 600.0
RUN_ATTEMPTS = 3  # DAG runs of a (group, mode) whose cells the scheduler failed on a late executor event
REPORT_ENV = "SMART_EXT_MATRIX_REPORT"  # optional: also write the rendered matrix to this file


def _trigger_all(env: AirflowEnv, dag_ids: list[str]) -> dict[str, str]:
    for dag_id in dag_ids:
        env.wait_for_dag(dag_id)
    # 2.11 triggers by CLI, and each call parses the DAGs folder: two at a time (eight timed out at 120 s).
    with ThreadPoolExecutor(max_workers=len(dag_ids) if env.is_airflow3 else 2) as pool:
        list(pool.map(env.unpause, dag_ids))
        return dict(zip(dag_ids, pool.map(env.trigger, dag_ids), strict=True))


def _wait_all(env: AirflowEnv, runs: dict[str, str]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT
    for dag_id, run_id in runs.items():
        env.wait_run(dag_id, run_id, timeout=max(1.0, deadline - time.monotonic()))


def _wait_checks(env: AirflowEnv, scenario: Any, mode: str, run_id: str, count: int) -> bool:
    """Until the condition of this cell has had ``count`` checks; False if the task ended before (a task
    process lost at start-up: the cell is reported as such) or nothing came within RUN_TIMEOUT."""
    dag_id, key = f"df_{scenario.group}_{mode}", f"{mode}.{scenario.name}"
    deadline = time.monotonic() + RUN_TIMEOUT
    while df.checks_made(env, key) < count:
        rows = env.query(
            "SELECT state FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
            (dag_id, run_id, scenario.name),
        )
        if (rows and rows[0][0] in TERMINAL_TI_STATES) or time.monotonic() > deadline:
            return False
        env.check_components()
        time.sleep(0.2)
    return True


# 2.11 without the CLI: `airflow tasks clear` parses the DAG file and took over 40 s on a loaded machine (past
# the wait). This is the call it and the UI's clear end in (the DAG read from the serialized table).
_CLEAR_211 = """
import sys
from airflow.models.taskinstance import TaskInstance, clear_task_instances
from airflow.utils.session import create_session
dag_id, run_id, task_id = sys.argv[1:]
with create_session() as session:
    tis = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id).all()
    clear_task_instances(tis, session)
"""


def _clear(env: AirflowEnv, dag_id: str, run_id: str, task_id: str) -> None:
    """Clear one task instance the way a user does (3.x REST; 2.11 the clear the UI and CLI call)."""
    if env.is_airflow3:
        body = {"dry_run": False, "only_failed": False, "task_ids": [task_id], "dag_run_id": run_id}
        for attempt in range(3):  # 3.3.2's api-server once answered 500 "No response returned" under load
            try:
                env.api("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", body)
                return
            except AirflowEnvError:
                if attempt == 2:
                    raise
                time.sleep(1)
    env.run_python(_CLEAR_211, dag_id, run_id, task_id, timeout=120)


def _trigger_when_deferred(env: AirflowEnv, dag_id: str, run_id: str, task_id: str) -> int | None:
    """The trigger of a deferrable cell once its task is deferred (None if it ended first)."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        rows = env.query(
            "SELECT state, trigger_id FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
            (dag_id, run_id, task_id),
        )
        if rows and rows[0][0] == "deferred" and rows[0][1] is not None:
            return int(rows[0][1])
        if rows and rows[0][0] in TERMINAL_TI_STATES:
            return None
        time.sleep(0.2)
    return None


def _clear_after_first_check(env: AirflowEnv, scenario: Any, mode: str, run_id: str) -> None:
    if not _wait_checks(env, scenario, mode, run_id, 1):
        return
    dag_id = f"df_{scenario.group}_{mode}"
    trigger_id = (
        _trigger_when_deferred(env, dag_id, run_id, scenario.name)
        if mode in ("deferrable", "zero_worker")
        else None
    )
    _clear(env, dag_id, run_id, scenario.name)
    # The condition turns true only once try 1's trigger is gone: a check of it after the clear that found the
    # condition true would send an event for a cleared task (3.3.2's triggerer can crash on that race).
    deadline = time.monotonic() + 60
    while trigger_id is not None and env.query("SELECT 1 FROM trigger WHERE id = %s", (trigger_id,)):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{mode}.{scenario.name}: try 1's trigger {trigger_id} outlived the clear by 60 s"
            )
        time.sleep(0.2)
    df.cleared_dir(env).mkdir(parents=True, exist_ok=True)
    (df.cleared_dir(env) / f"{mode}.{scenario.name}").touch()  # its condition turns true (step W)
    # The clear archived try 1: as failed when it was unfinished (TaskInstanceHistory.record_ti, 2.11 and
    # 3.3), else as it ended: then the clear landed after the wait ended (a slow clear under load), and the
    # cell would show a clear of a finished task, not one cleared mid-wait.
    rows = env.query(
        "SELECT state FROM task_instance_history WHERE dag_id = %s AND run_id = %s AND task_id = %s "
        "AND try_number = 1",
        (dag_id, run_id, scenario.name),
    )
    if rows and rows[0][0] != "failed":
        raise AssertionError(f"{mode}.{scenario.name}: the clear landed after the wait ended ({rows[0][0]})")


def _run_phase(
    env: AirflowEnv, phase: int, failures: list[BaseException], only: set[tuple[str, str]] | None = None
) -> dict[str, str]:
    """One DAG run per (group, mode) of this phase (``only``: just these), with the phase's actions."""
    cells = [(g, m) for g, spec in df.GROUPS.items() if spec["phase"] == phase for m in df.MODES]
    cells = [c for c in cells if only is None or c in only]
    if not cells:
        return {}
    runs = _trigger_all(env, [f"df_{g}_{m}" for g, m in cells])
    actions = [s for s in df.SCENARIOS if s.action and any(s.group == g for g, _m in cells)]
    with ThreadPoolExecutor(max_workers=len(df.MODES)) as pool:  # each mode's clear as soon as it is due
        clears = [
            pool.submit(_clear_after_first_check, env, scenario, mode, runs[f"df_{scenario.group}_{mode}"])
            for scenario in actions
            if scenario.action == "clear"
            for mode in df.MODES
            if (scenario.group, mode) in cells
        ]
        for scenario in (s for s in actions if s.action == "kill_triggerer"):
            for mode in (m for m in ("deferrable", "zero_worker") if (scenario.group, m) in cells):
                _wait_checks(env, scenario, mode, runs[f"df_{scenario.group}_{mode}"], 2)
            env.stop_component("triggerer", crash=True)
            env.start_component("triggerer")
    _wait_all(env, runs)
    failures.extend(e for e in (c.exception() for c in clears) if e is not None)
    return runs


def _lost(env: AirflowEnv, runs: dict[str, str]) -> dict[tuple[str, str], int]:
    """(scenario, mode) -> task processes the executor lost before they ran, in the cell's DAG run."""
    return {
        (s.name, m): df.infra_failures(env, m, s, runs[f"df_{s.group}_{m}"])
        for s in df.SCENARIOS
        for m in df.MODES
    }


def _report(text: str, mode: str = "a") -> None:
    print(text)
    if os.environ.get(REPORT_ENV):
        with open(os.environ[REPORT_ENV], mode) as out:
            out.write(text + "\n")


@pytest.fixture(scope="module")
def runs(airflow_env: AirflowEnv) -> dict[str, str]:
    """Every (group, mode) DAG run of the matrix: dag_id -> run_id. A DAG run in which the scheduler failed a
    task on a late executor event (a cell that proves nothing either way) runs again, in a new DAG run."""
    env = airflow_env
    database = env.home / "df_condition.db"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS df_status (status TEXT)")
        conn.execute("DELETE FROM df_status")
        conn.execute("INSERT INTO df_status VALUES ('error')")
    # A row, not `airflow connections add` (two CLI calls cost a minute on a loaded machine).
    env.execute("DELETE FROM connection WHERE conn_id = %s", ("df_sqlite",))
    env.execute(
        "INSERT INTO connection (conn_id, conn_type, host, is_encrypted, is_extra_encrypted) "
        "VALUES (%s, %s, %s, %s, %s)",
        ("df_sqlite", "sqlite", str(database), False, False),
    )
    for folder in (df.checks_dir(env), df.cleared_dir(env)):
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():
            stale.unlink()
    started = time.monotonic()
    _report(f"Airflow {env.airflow_version}: the matrix starts", "w")
    runs: dict[str, str] = {}
    failures: list[BaseException] = []  # failed actions: reported after the matrix is printed
    phases = sorted({spec["phase"] for spec in df.GROUPS.values()})
    for phase in phases:
        runs.update(_run_phase(env, phase, failures))
    by_name = {s.name: s for s in df.SCENARIOS}
    for attempt in range(2, RUN_ATTEMPTS + 1):
        again = {(by_name[name].group, mode) for (name, mode), n in _lost(env, runs).items() if n}
        if not again:
            break
        _report(
            f"the executor lost task processes: (group, mode) run {attempt} of {RUN_ATTEMPTS}: {sorted(again)}"
        )
        for scenario in df.SCENARIOS:
            for mode in df.MODES:
                if (scenario.group, mode) in again:
                    df.forget_cell(env, mode, scenario)
        for phase in phases:
            runs.update(_run_phase(env, phase, failures, only=again))
    _report(f"Airflow {env.airflow_version}: matrix ran {time.monotonic() - started:.0f}s")
    assert not failures, f"matrix actions failed: {failures!r}"
    assert all(env.dag_run(d, r)["state"] in TERMINAL_RUN_STATES for d, r in runs.items())
    return runs


@pytest.fixture(scope="module")
def matrix(airflow_env: AirflowEnv, runs: dict[str, str]) -> df.Matrix:
    recorded = {
        (s.name, i, mode): df.record(airflow_env, mode, s, runs[f"df_{s.group}_{mode}"], i)
        for s in df.SCENARIOS
        for i in s.cells
        for mode in df.MODES
    }
    _report(df.render(recorded))
    return recorded


@pytest.fixture(scope="module")
def infra(airflow_env: AirflowEnv, runs: dict[str, str]) -> dict[tuple[str, str], int]:
    """(scenario, mode) -> task processes lost before they ran in the final DAG runs (not a mode difference)."""
    lost = _lost(airflow_env, runs)
    _report("task processes lost before they ran: " + repr({k: v for k, v in lost.items() if v}))
    return lost


def _evidence(env: AirflowEnv, runs: dict[str, str], scenario: Any, mode: str) -> str:
    """For a failing cell: its state history, the component log lines naming its DAG run, its task logs."""
    dag_id = f"df_{scenario.group}_{mode}"
    run_id = runs[dag_id]
    out = [f"--- {dag_id} {run_id} {scenario.name}"]
    out.append(f"states: {env.state_history(dag_id, run_id, scenario.name)}")
    for name in env.component_names:
        lines = [line for line in env.component_log(name).splitlines() if dag_id in line]
        out += [f"--- {name} ({len(lines)} lines naming {dag_id}; the last 40)", *lines[-40:]]
    for map_index, n, log in df.try_logs(env, dag_id, run_id, scenario):
        lines = log.splitlines()
        out += [f"--- task log, map index {map_index}, try {n} (the last 40 lines)", *lines[-40:]]
    return "\n".join(out)


@pytest.mark.parametrize("mode", [m for m in df.MODES if m != df.ORACLE])
@pytest.mark.parametrize("scenario", df.SCENARIOS, ids=lambda s: s.name)
def test_every_mode_ends_as_poke_mode(
    airflow_env: AirflowEnv,
    runs: dict[str, str],
    matrix: df.Matrix,
    infra: dict[tuple[str, str], int],
    scenario: Any,
    mode: str,
) -> None:
    lost = {m: infra[(scenario.name, m)] for m in (df.ORACLE, mode) if infra[(scenario.name, m)]}
    assert not lost, (
        f"{scenario.name}: the scheduler failed the task on a late executor event in all {RUN_ATTEMPTS} DAG runs "
        f"({lost}; 'finished with state ..., but the task instance's state attribute is queued/scheduled/"
        "running', a reschedule written after its timed-out run ended, a reset orphan, or a clear that hit a "
        "running reschedule poke: differential.infra_failures): an overloaded machine or "
        "apache/airflow #71172, so this cell proves nothing either way\n" + df.render(matrix, [scenario])
    )
    unexplained = [d for d in df.differences(matrix, scenario, mode) if not d[4]]
    assert not unexplained, (
        f"{scenario.name} in {mode} mode ends differently from poke mode: "
        + "; ".join(
            f"{df.cell_key('', i)}{field}: poke {want!r} vs {got!r}" for i, field, want, got, _ in unexplained
        )
        + "\n"
        + df.render(matrix, [scenario])
        + "\n"
        + _evidence(airflow_env, runs, scenario, mode)
    )


@pytest.mark.parametrize("scenario", [s for s in df.SCENARIOS if "due" in s.kwargs], ids=lambda s: s.name)
def test_a_due_time_that_passes_mid_wait_alerts_once_in_poke_mode(matrix: df.Matrix, scenario: Any) -> None:
    """The oracle of the due-time rows: poke mode says once that the wait is late (every other mode is then
    held to the same count by test_every_mode_ends_as_poke_mode)."""
    for map_index in scenario.cells:
        ending = matrix[(scenario.name, map_index, df.ORACLE)]
        assert ending.late_alerts == 1 and ending.state == "success", df.render(matrix, [scenario])
