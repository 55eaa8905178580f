"""Zero-worker waits (issue 15) in a real Airflow: deferrable sensors that start and end in the triggerer.

One scenario for the module (lean: the session's Airflow, a handful of sensors, 2-4 s intervals), started
once by the ``scenario`` fixture: eight runs of ``tests/integration/dags/zw_dags.py`` wait at the same time;
the triggerer is SIGKILLed mid-wait and restarted; then each condition is set (a row, a file) and every run
ends. The tests then read what Airflow recorded:

* the happy path has no ``queued``/``running`` phase where the version supports it (the DB's state history
  sampled every 0.25 s, plus ``queued_dttm`` and ``hostname`` that only a queued / running try sets);
* XCom ``return_value`` (the poke's ``PokeReturnValue``) and the stats XCom arrive; callbacks still run;
* timeouts (``retries=2``) fail once, unretried; ``soft_fail`` skips; a failure criterion fails unretried; a
  skip skips; the deadline is the try's start + ``timeout`` even though the triggerer was down;
* the rebuilt trigger continues the same schedule (seed, anchor, deadline; later check indices at the
  policy's times);
* where a task cannot start in the triggerer (mapped; asked for worker-first; templated on 2.11) it starts
  on a worker and the task log says why.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import TERMINAL_RUN_STATES
from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy, aligned_start
from tests.integration.live import (
    TRIGGER_CHECK_RE,
    day_conf,
    epoch,
    sqlite_db,
    sqlite_exec,
    start_run,
    ti_row,
    triggerer_pokes,
    unique,
    wait_for,
    wait_ti_state,
)

# Whether this Airflow starts the templated zw_ sensors in the triggerer (3.3+), and the static one (2.11 too).
ZERO_WORKER_TEMPLATED = (
    compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED
    and compat.start_in_triggerer.START_FROM_TRIGGER_RENDERS_TEMPLATES
)
ZERO_WORKER_STATIC = compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED
WORKER_PHASES = ("queued", "running")
POLICY = BackoffPolicy(initial=2.0, factor=2.0, cap=4.0, jitter="full", splay=2.0)  # zw_dags COMMON

# "Zero-worker wait: started in the triggerer, ...; try started <iso> (as Airflow recorded it), deadline <iso>"
ZERO_WORKER_RE = re.compile(
    r"Zero-worker wait: .*?try started (?P<started>\S+) .*?deadline (?P<deadline>\S+) "
)
# "BackoffTrigger: ...; seed=<hex> started_at=<iso> (<epoch>) deadline=<iso>; resuming after check #-1; ..."
SCHEDULE_RE = re.compile(
    r"BackoffTrigger: .*?; seed=(?P<seed>[0-9a-f]+) started_at=\S+ \((?P<anchor>[\d.]+)\) deadline=(?P<deadline>\S+);"
)
WORKER_FIRST = "not in the triggerer:"


@dataclass
class Scenario:
    env: AirflowEnv
    runs: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (dag_id, run_id)
    paths: dict[str, Path] = field(default_factory=dict)
    killed_at: float = 0.0
    restarted_at: float = 0.0

    def run_id(self, name: str) -> str:
        return self.runs[name][1]

    def ti(self, name: str, task_id: str = "wait") -> dict[str, Any]:
        dag_id, run_id = self.runs[name]
        row = ti_row(self.env, dag_id, run_id, task_id)
        assert row is not None, (name, task_id)
        return row

    def history(self, name: str, task_id: str = "wait", map_index: int = -1) -> list[str]:
        dag_id, run_id = self.runs[name]
        return self.env.state_history(dag_id, run_id, task_id, map_index)

    def log(self, name: str, task_id: str = "wait", map_index: int = -1) -> str:
        dag_id, run_id = self.runs[name]
        return self.env.task_log(dag_id, run_id, task_id, 1, map_index)

    def worker_columns(self, name: str) -> tuple[Any, Any]:
        """(queued_dttm, hostname): set only when a try was queued for / ran on a worker."""
        dag_id, run_id = self.runs[name]
        rows = self.env.query(
            "SELECT queued_dttm, hostname FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = 'wait'",
            (dag_id, run_id),
        )
        return rows[0][0], rows[0][1]


@pytest.fixture(scope="module")
def scenario(airflow_env: AirflowEnv, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    env = airflow_env
    work = tmp_path_factory.mktemp("zw")
    db = sqlite_db(env)
    sc = Scenario(env)
    tables = {name: unique(f"zw_{name}") for name in ("ok", "fail", "timeout", "soft")}
    for table in tables.values():
        sqlite_exec(db, f"CREATE TABLE {table} (day TEXT, status TEXT)")
    sqlite_exec(db, "CREATE TABLE IF NOT EXISTS zw_static (day TEXT, status TEXT)")
    sqlite_exec(db, "DELETE FROM zw_static")
    for name in ("ok", "skip", "fallback"):
        sc.paths[name] = work / f"{name}.marker"
    sc.paths["counter"] = work / "ok.checks.jsonl"
    sc.paths["callback"] = work / "callback.txt"

    plan = {
        "sql_ok": ("zw_sql", day_conf(tables["ok"])),
        "callback": ("zw_callback", {"callback_path": str(sc.paths["callback"])}),
        "sql_fail": ("zw_sql", day_conf(tables["fail"])),
        "sql_timeout": ("zw_sql_timeout", day_conf(tables["timeout"])),
        "sql_soft": ("zw_sql_soft", day_conf(tables["soft"])),
        "sql_static": ("zw_sql_static", {}),
        "file_ok": (
            "zw_file",
            {"path": str(sc.paths["ok"]), "counter_path": str(sc.paths["counter"])},
        ),
        "file_skip": ("zw_file", {"path": str(sc.paths["skip"]), "counter_path": str(work / "skip.jsonl")}),
        "fallbacks": ("zw_fallbacks", {"path": str(sc.paths["fallback"])}),
    }
    for name, (dag_id, conf) in plan.items():
        sc.runs[name] = (dag_id, start_run(env, dag_id, conf))
    for name in ("sql_ok", "sql_fail", "sql_static", "file_ok", "file_skip"):
        dag_id, run_id = sc.runs[name]
        wait_ti_state(env, dag_id, run_id, "wait", {"deferred"})

    # Triggerer killed mid-wait (SIGKILL, no clean shutdown): after two checks of file_ok in the triggerer,
    # once its schedule line is on disk (a SIGKILL loses log lines the triggerer had not yet written, and
    # the restart test compares the first trigger's schedule with the rebuilt one's).
    wait_for(lambda: len(triggerer_pokes(sc.paths["counter"])) >= 2, 120, "two triggerer checks", env)
    if ZERO_WORKER_TEMPLATED:
        wait_for(lambda: SCHEDULE_RE.search(sc.log("file_ok")), 120, "file_ok's schedule in its log", env)
    sc.killed_at = time.time()
    env.stop_component("triggerer", crash=True)
    time.sleep(3)
    env.start_component("triggerer")
    sc.restarted_at = time.time()
    wait_for(
        lambda: len(triggerer_pokes(sc.paths["counter"], sc.restarted_at)) >= 1,
        120,
        "a check by the rebuilt trigger",
        env,
    )

    # Every condition comes true (or fails) now.
    sqlite_exec(db, f"INSERT INTO {tables['ok']} VALUES ('d1', 'done')")
    sqlite_exec(db, f"INSERT INTO {tables['fail']} VALUES ('d1', 'error')")
    sqlite_exec(db, "INSERT INTO zw_static VALUES ('d1', 'done'), ('d2', 'done')")
    sc.paths["ok"].write_text("hello\n")
    sc.paths["skip"].write_text("skip\n")
    sc.paths["fallback"].write_text("fallback\n")
    for name, (dag_id, run_id) in sc.runs.items():
        state = env.wait_run(dag_id, run_id, timeout=300)
        assert state in TERMINAL_RUN_STATES, (name, state)
    return sc


# ---------------------------------------------------------------------------- happy path
@pytest.mark.parametrize("name", ["sql_ok", "file_ok", "sql_static"])
def test_happy_path_has_no_worker_phase_where_supported(scenario: Scenario, name: str) -> None:
    ti = scenario.ti(name)
    assert ti["state"] == "success", ti
    history = scenario.history(name)
    zero_worker = ZERO_WORKER_STATIC if name == "sql_static" else ZERO_WORKER_TEMPLATED
    queued_dttm, hostname = scenario.worker_columns(name)
    log = scenario.log(name)
    if zero_worker:
        assert not set(WORKER_PHASES) & set(history), (history, log[-4000:])
        assert history[-2:] == ["deferred", "success"], history
        assert queued_dttm is None and not hostname, (queued_dttm, hostname)
        assert "Zero-worker wait" in log and "zero worker phases" in log, log[-3000:]
        assert TRIGGER_CHECK_RE.search(log), log[-3000:]  # each check with its group size
        assert ti["try_number"] == 1
    else:  # 2.11, templated arguments: worker-first, and the task log says why
        # A fast check #0 can leave "running" unsampled (0.25 s): "queued" is a worker phase too; hostname is a worker's.
        first_deferral = history.index("deferred") if "deferred" in history else len(history)
        assert set(WORKER_PHASES) & set(history[:first_deferral]), history
        assert queued_dttm is not None and hostname, (queued_dttm, hostname)
        assert WORKER_FIRST in log and "does not render templates in the triggerer" in log, log[-3000:]


def test_xcom_return_value_and_stats_arrive(scenario: Scenario) -> None:
    env = scenario.env
    dag_id, run_id = scenario.runs["file_ok"]
    rows = env.query(
        "SELECT key, value FROM xcom WHERE dag_id = %s AND run_id = %s AND task_id = 'wait'", (dag_id, run_id)
    )
    values = {
        key: (bytes(value).decode() if isinstance(value, (bytes, memoryview)) else str(value))
        for key, value in rows
    }  # PostgreSQL returns bytea as memoryview
    assert "return_value" in values and "hello" in values["return_value"], values
    assert "backoff_sensor_stats" in values and "deferrable" in values["backoff_sensor_stats"], values


def test_success_callbacks_still_run(scenario: Scenario) -> None:
    path = scenario.paths["callback"]
    wait_for(path.exists, 90, "on_success_callback writing its marker file", scenario.env)
    assert path.read_text().startswith("success wait")
    history = scenario.history("callback")
    # Started in the triggerer (no worker before the deferral) where supported.
    if ZERO_WORKER_STATIC:
        assert history.index("deferred") < min(
            (history.index(s) for s in WORKER_PHASES if s in history), default=len(history)
        ), history
    if (
        ZERO_WORKER_STATIC and compat.start_in_triggerer.trigger_end_runs_success_callbacks()
    ):  # ended in the triggerer
        assert not set(WORKER_PHASES) & set(history), history
    elif ZERO_WORKER_STATIC:  # Airflow would drop the callback of a trigger-ended task: a worker ends it
        assert "the task ends on a worker: on_success_callback" in scenario.log("callback"), history


# ---------------------------------------------------------------------------- other endings: as poke mode
def test_failure_criterion_fails_without_retry(scenario: Scenario) -> None:
    ti = scenario.ti("sql_fail")
    assert ti["state"] == "failed" and ti["try_number"] == 1, ti
    assert "Failure criteria met" in scenario.log("sql_fail")


def test_timeout_fails_unretried_and_keeps_the_try_deadline(scenario: Scenario) -> None:
    ti = scenario.ti("sql_timeout")
    assert ti["state"] == "failed" and ti["try_number"] == 1, ti  # retries=2: a sensor timeout is not retried
    log = scenario.log("sql_timeout")
    # Our final check's timeout, or (a triggerer so late or down that Airflow's backstop fired first) Airflow's
    # trigger timeout, which the sensor also raises as AirflowSensorTimeout: never retried either way.
    assert "Sensor has timed out" in log or "AirflowSensorTimeout" in log, log[-3000:]
    if ZERO_WORKER_TEMPLATED:
        match = ZERO_WORKER_RE.search(log)
        assert match, log[-3000:]
        # The deadline is the start of the try + timeout (8 s), not the (re)start of a triggerer.
        started = ti["start_date"].timestamp()
        assert abs(epoch(match["started"]) - started) < 1.0, (match["started"], ti["start_date"])
        assert abs(epoch(match["deadline"]) - (started + 8)) < 1.0, match["deadline"]


def test_soft_fail_timeout_skips(scenario: Scenario) -> None:
    ti = scenario.ti("sql_soft")
    assert ti["state"] == "skipped" and ti["try_number"] == 1, ti


def test_skip_from_the_poke_skips(scenario: Scenario) -> None:
    ti = scenario.ti("file_skip")
    assert ti["state"] == "skipped" and ti["try_number"] == 1, ti


# ---------------------------------------------------------------------------- restart safety
def test_killed_triggerer_continues_same_schedule_and_deadline(scenario: Scenario) -> None:
    if not ZERO_WORKER_TEMPLATED:
        pytest.skip(
            f"Airflow {compat.versions.AIRFLOW_VERSION_STRING} starts templated sensors on a worker (see above)"
        )
    log = scenario.log("file_ok")
    starts = ZERO_WORKER_RE.findall(log)
    schedules = SCHEDULE_RE.findall(log)
    # One line per trigger run: the first triggerer and the rebuilt one, with the same try start and deadline.
    assert len(starts) >= 2 and len(set(starts)) == 1, starts
    assert len(schedules) >= 2 and len(set(schedules)) == 1, schedules
    seed, anchor, _deadline = schedules[0]
    ti = scenario.ti("file_ok")
    assert abs(epoch(starts[0][0]) - ti["start_date"].timestamp()) < 1.0
    assert float(anchor) == aligned_start(epoch(starts[0][0]), POLICY.initial)
    checks = [(int(m["index"]), float(m["at"])) for m in TRIGGER_CHECK_RE.finditer(log)]
    indices = [index for index, _at in checks]
    assert indices == sorted(indices) and len(set(indices)) >= len(indices) - 1, indices  # #0 may repeat
    for index, at in checks:
        if index > 0:  # check #0 runs at once; every later check at the policy's time of the one schedule
            assert abs(at - (float(anchor) + POLICY.offset(seed, index))) < 0.01, (index, at)
    # The rebuilt trigger checked again (counter) and the task still ended in the triggerer.
    assert triggerer_pokes(scenario.paths["counter"], scenario.restarted_at)
    assert not set(WORKER_PHASES) & set(scenario.history("file_ok"))


# ---------------------------------------------------------------------------- fallbacks
def test_fallbacks_start_on_a_worker_and_say_why(scenario: Scenario) -> None:
    env = scenario.env
    dag_id, run_id = scenario.runs["fallbacks"]
    for task_id, map_index in (("mapped", 0), ("worker_first", -1)):
        rows = env.query(
            "SELECT state FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s AND map_index = %s",
            (dag_id, run_id, task_id, map_index),
        )
        assert rows and rows[0][0] == "success", (task_id, rows)
        history = env.state_history(dag_id, run_id, task_id, map_index)
        first_deferral = history.index("deferred") if "deferred" in history else len(history)
        log = scenario.log("fallbacks", task_id, map_index)
        # check #0 on a worker: "queued" or "running" before the first deferral, or, where the 0.25 s sampler
        # saw neither (a loaded CI: scheduled, then deferred), the line only a worker's check #0 logs
        worker_phase = set(WORKER_PHASES) & set(history[:first_deferral])
        assert worker_phase or "Poke #1 (check #0): condition not met; next check" in log, (task_id, history)
        assert WORKER_FIRST in log, log[-3000:]
    assert "start_from_trigger=False" in scenario.log("fallbacks", "worker_first")
    if ZERO_WORKER_TEMPLATED:
        assert "mapped tasks cannot start in the triggerer" in scenario.log("fallbacks", "mapped", 0)
