"""Provider sensors with the base class swapped end as on Airflow's base, in every mode they offer (issue 42,
part 3), in a real Airflow.

DAGs: tests/integration/dags/pv_provider_dags.py. ``FileSensor``, ``PythonSensor``, ``BashSensor``,
``ExternalTaskSensor``, ``DateTimeSensor`` / ``DateTimeSensorAsync`` (standard provider; Airflow 2.11: core)
and common-sql's ``SqlSensor``, each as Airflow's own class and as the same class with ``BackoffSensor``
beneath its methods (``class FileSensor(FileSensor, BackoffSensor)``), side by side in one DAG run, in poke
mode, reschedule mode and the sensor's own deferral where it has one. ``pv_met``: the test makes the
condition true once the cells wait (every one, or those that started within GRACE of the first);
``pv_timeout``: never true. Each swapped cell must end as its stock twin (state, try count, the exception
classes each try's log names), and the stock cells as Airflow's base does there (met: success; timeout:
failed, try 1), so a wrong expectation of Airflow's own behaviour fails too. A cell proves nothing, and both
DAGs run again (up to RUN_ATTEMPTS DAG runs, as the differential matrix does; a cell lost in all of them
fails), when the scheduler failed one of its tasks on a late executor event (apache/airflow #71172; seen in
CI's rehearsal for a stock reschedule-mode cell) or reset one as an orphan, which starts a new try of a task
with no retries (seen in CI, by its signature: every pv_timeout cell of a run, both classes, on try 2).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import secrets
import time
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import TERMINAL_TI_STATES
from tests.integration.differential import errors_per_try
from tests.integration.live import (
    RESET_REASON_RE,
    add_connection_fields,
    lost_by_executor,
    reset_by_scheduler,
    sqlite_db,
    sqlite_exec,
    start_run,
)

DAGS = Path(__file__).resolve().parent / "dags" / "pv_provider_dags.py"
WAITING = {"running", "up_for_reschedule", "deferred"}
GRACE = 60.0  # seconds after the first pv_met cell waits
VARIANTS = ("stock", "swapped")
EXPECTED = {"pv_met": "success", "pv_timeout": "failed"}  # Airflow's base, each cell on try 1
RUN_ATTEMPTS = 3  # DAG runs, for cells lost to the scheduler (as the matrix)
# ExternalTaskSensor's upstream runs: logical dates from here on, in the past (Airflow 3.3 left a run with a
# future logical date unstarted, seen in CI's rehearsal) and after the DAG's start date.
UPSTREAM_DATES = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)


def _dag_module() -> ModuleType:
    """The DAG file's tables (its cells): the file loaded as a plain module, not through a DagBag."""
    spec = importlib.util.spec_from_file_location("pv_provider_cells", DAGS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ending(env: AirflowEnv, dag_id: str, run_id: str, task_id: str) -> tuple[object, ...]:
    rows = [r for r in env.task_instances(dag_id, run_id) if r["task_id"] == task_id]
    assert rows, f"{dag_id}.{task_id}: no task instance"
    tries = int(rows[0]["try_number"] or 0)
    return rows[0]["state"], tries, errors_per_try(env, dag_id, run_id, task_id, tries)


Cell = tuple[str, str, str]  # (dag id, sensor, mode)
Endings = dict[Cell, tuple[tuple[object, ...], tuple[object, ...]]]  # cell -> (stock, swapped)


def _run_once(env: AirflowEnv, dags: ModuleType, db: Path) -> tuple[Endings, set[Cell]]:
    """One DAG run of each DAG: every cell's two endings, and the cells lost to the scheduler (a late executor
    event, apache/airflow #71172, or a task instance it reset as an orphan: they prove nothing)."""
    flags = env.home / "pv_flags"
    flags.mkdir(exist_ok=True)
    confs = {}
    for dag_id in ("pv_met", "pv_timeout"):
        table = f"{dag_id}_{uuid.uuid4().hex[:8]}"
        sqlite_exec(db, f"CREATE TABLE {table} (name TEXT)")
        # A logical date no other pv_upstream run has: pv_met's runs once the cells wait, pv_timeout's never.
        upstream = UPSTREAM_DATES + dt.timedelta(seconds=secrets.randbelow(10**7))
        confs[dag_id] = {
            "flag": str(flags / f"{table}.flag"),
            "table": table,
            "upstream_date": upstream.isoformat(),
        }
    run_ids = {dag_id: start_run(env, dag_id, conf) for dag_id, conf in confs.items()}

    # The condition turns true once the cells wait (both classes of a cell see "not yet" before "met"): every
    # cell, or those that could start within GRACE of the first (poke-mode cells hold the executor's slots;
    # a cell that starts after the condition is true succeeds at its first check, on either class).
    met_tasks = [
        dags.task_id(variant, sensor, mode) for sensor, mode in dags.cells("pv_met") for variant in VARIANTS
    ]
    first_wait = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        states = {r["task_id"]: r["state"] for r in env.task_instances("pv_met", run_ids["pv_met"])}
        waiting = [task for task in met_tasks if states.get(task) in WAITING | TERMINAL_TI_STATES]
        if waiting and first_wait is None:
            first_wait = time.monotonic()
        if len(waiting) == len(met_tasks) or (first_wait and time.monotonic() - first_wait > GRACE):
            break
        env.check_components()
        time.sleep(1)
    Path(confs["pv_met"]["flag"]).touch()
    sqlite_exec(db, f"INSERT INTO {confs['pv_met']['table']} VALUES ('ready')")
    env.trigger("pv_upstream", logical_date=dt.datetime.fromisoformat(confs["pv_met"]["upstream_date"]))

    endings: Endings = {}
    lost: set[Cell] = set()
    for dag_id, run_id in run_ids.items():
        env.wait_run(dag_id, run_id, timeout=600)
        for sensor, mode in dags.cells(dag_id):
            tasks = [dags.task_id(variant, sensor, mode) for variant in VARIANTS]
            stock, swapped = (_ending(env, dag_id, run_id, task) for task in tasks)
            endings[(dag_id, sensor, mode)] = (stock, swapped)
            if any(
                lost_by_executor(env, dag_id, run_id, task) + reset_by_scheduler(env, dag_id, run_id, task)
                for task in tasks
            ):
                lost.add((dag_id, sensor, mode))
    if resets := RESET_REASON_RE.findall(env.component_log("scheduler")):
        print("the scheduler's lines on resets:", *resets[-10:], sep="\n  ")
    return endings, lost


# One DAG run of each DAG takes 2-3 min on a loaded machine; up to RUN_ATTEMPTS of them.
@pytest.mark.timeout(1200)
def test_provider_sensors_end_as_on_airflows_base_in_every_mode(airflow_env: AirflowEnv) -> None:
    env = airflow_env
    dags = _dag_module()
    db = sqlite_db(env)
    add_connection_fields(env, dags.FS_CONN_ID, "fs")
    env.wait_for_dag("pv_upstream")
    env.unpause("pv_upstream")
    every = {(dag_id, sensor, mode) for dag_id in EXPECTED for sensor, mode in dags.cells(dag_id)}
    endings: Endings = {}
    pending = set(every)
    for attempt in range(1, RUN_ATTEMPTS + 1):
        seen, lost = _run_once(env, dags, db)
        for cell in pending - lost:
            endings[cell] = seen[cell]
        pending &= lost
        if lost:
            print(f"DAG runs {attempt}: cells lost to the scheduler: {sorted(lost)}")
        if not pending:
            break
    assert not pending, f"lost to the scheduler in all {RUN_ATTEMPTS} DAG runs: {sorted(pending)}"

    problems = []
    for (dag_id, sensor, mode), (stock, swapped) in sorted(endings.items()):
        print(f"{dag_id} {sensor} {mode}: stock {stock}, swapped {swapped}")
        if swapped != stock:
            problems.append(f"{dag_id} {sensor} ({mode}): Airflow's base {stock}, swapped {swapped}")
        if stock[:2] != (EXPECTED[dag_id], 1):
            problems.append(
                f"{dag_id} {sensor} ({mode}): Airflow's base ended {stock}, not {EXPECTED[dag_id]}"
            )
    assert not problems, "\n".join(problems)
