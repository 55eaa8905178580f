"""The distributed pass's shared code (issue 36): the topology, Airflow's fault bounds it shortens, and one
DAG run of ``ds_modes`` (dags/ds_topology_dags.py) as the tests see it.

Used by tests/integration/conftest.py (the session's Airflow in the distributed pass),
test_distributed_live.py and test_distributed_upgrade_live.py.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import PG_DSN_ENV
from airflow_smart_ext import compat
from tests.integration.live import counter_lines, start_run, wait_for

# Airflow's own bounds on a lost process, shortened from minutes so a fault ends within the test: a killed
# worker's try is failed after the heartbeat timeout, a dead scheduler's tasks adopted after the orphan
# check, a message a killed worker took but never ran requeued after the queued timeout.
DISTRIBUTED_SETTINGS = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "20",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "120",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "15",
    # One api-server: a task process's calls to it ride out its restart (an upgrade) and a database restart,
    # instead of failing their try after Airflow's default 5 attempts (a few seconds; docs/deployment.md).
    "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
    "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "3",
}


# On Airflow 2.11 no pass runs the distributed topology: its modules are skipped, for this reason (on the
# allow-list, tests/allowed_skips.txt).
NO_DISTRIBUTED_PASS = "2.11: the distributed pass (CeleryExecutor topology) runs on Airflow 3 only"

# Every test module of the pass: Airflow 3, PostgreSQL, and a bound on a hung wait well under CI's budget.
PASS_MARKS = [
    pytest.mark.skipif(not compat.versions.AIRFLOW_V_3_0_PLUS, reason=NO_DISTRIBUTED_PASS),
    pytest.mark.skipif(not os.environ.get(PG_DSN_ENV), reason="the distributed pass needs PostgreSQL"),
    pytest.mark.timeout(900),
]


def distributed_topology() -> dict[str, int]:
    """Two Celery workers, two schedulers, two triggerers (plus a dag-processor and an api-server)."""
    return {"celery_workers": 2, "schedulers": 2, "triggerers": 2, "parallelism": 32, "celery_concurrency": 8}


DAG_ID = "ds_modes"
WORKERS = ("celery-worker", "celery-worker-2")
# A shell command restarting the metadata database's server (.ci/run and scripts/dev.py set it).
PG_RESTART_ENV = "SMART_EXT_TEST_PG_RESTART"
DEFERRABLE = frozenset({"worker_first", "zero_worker", "zero_worker_twin", "mapped_deferrable", "unshared"})
ZERO_WORKER = frozenset({"zero_worker", "zero_worker_twin", "unshared"})
SHARED = DEFERRABLE - {"unshared"}  # identical arguments: one condition
RESCHEDULE = frozenset({"reschedule", "mapped_reschedule"})
TRIGGERS = len(DEFERRABLE) + 1  # mapped_deferrable has two task instances
WAITING = {"poke": {"running"}, "reschedule": {"up_for_reschedule", "running", "queued", "scheduled"}}
CYCLE = 3.0  # poke_interval, backoff_factor 1, no jitter (ds_topology_dags.COMMON)
RUN_TIMEOUT = 420.0


@dataclass
class Run:
    env: AirflowEnv
    run_id: str
    path: Path
    counters: Path

    def tis(self) -> list[dict[str, Any]]:
        return self.env.query_dicts(
            "SELECT id, task_id, map_index, state, try_number, hostname, queued_dttm, queued_by_job_id "
            "FROM task_instance "
            "WHERE dag_id = %s AND run_id = %s ORDER BY task_id, map_index",
            (DAG_ID, self.run_id),
        )

    def checks(self, counter: str) -> list[dict[str, Any]]:
        return counter_lines(self.counters / f"{counter}.jsonl")

    def all_waiting(self) -> bool:
        """Every wait is in its waiting state: poke running, reschedule between pokes, deferrable deferred."""
        rows = self.tis()
        if len(rows) != 11:  # 8 tasks, two of them mapped (3 + 2)
            return False
        for row in rows:
            wanted = WAITING.get(row["task_id"].removeprefix("mapped_"), {"deferred"})
            if row["state"] not in wanted:
                return False
        return bool(self.checks("reschedule")) and len(self.checks("mapped_reschedule")) >= 3

    def land_and_finish(self) -> list[dict[str, Any]]:
        self.path.write_text("landed\n")
        state = self.env.wait_run(DAG_ID, self.run_id, timeout=RUN_TIMEOUT)
        rows = self.tis()
        assert state == "success", (state, rows)
        assert all(row["state"] == "success" for row in rows), rows
        self.assert_each_ended_once(rows)
        return rows

    def worker_endings(self) -> dict[str, list[str]]:
        """Task instance id -> how each task process the workers ran for it ended (their logs, across
        restarts: a worker's log is appended to)."""
        endings: dict[str, list[str]] = {}
        for worker in WORKERS:
            for state, ti_id in _WORKLOAD_END.findall(self.env.component_log(worker)):
                endings.setdefault(ti_id, []).append(state)
        return endings

    def assert_each_ended_once(self, rows: list[dict[str, Any]]) -> None:
        """No duplicate completion: a zero-worker wait never reached a worker (it ends in the triggerer);
        every other task instance ended ``success`` in exactly one task process on a worker."""

        def logged() -> bool:  # a task process logs its end just after it reported the state Airflow shows
            endings = self.worker_endings()
            return all(
                "success" in endings.get(str(r["id"]), []) for r in rows if r["task_id"] not in ZERO_WORKER
            )

        wait_for(logged, 60, "every task process's end in the workers' logs", self.env)
        endings = self.worker_endings()
        for row in rows:
            ended = endings.get(str(row["id"]), [])
            key = (row["task_id"], row["map_index"])
            if row["task_id"] in ZERO_WORKER:
                assert ended == [], f"{key}: a zero-worker wait ran on a worker: {ended}"
            else:
                assert ended.count("success") == 1, f"{key}: task processes ended {ended}"


# The supervisor's line when a task process ends (Airflow 3.3's task SDK, in each Celery worker's log).
_WORKLOAD_END = re.compile(r"Workload finished .*?final_state=(\w+) .*?workload_id=([0-9a-f-]{36})")


def start_ds_run(env: AirflowEnv, tmp_path: Path) -> Run:
    counters = tmp_path / "counters"
    counters.mkdir()
    path = tmp_path / "landed.txt"
    run_id = start_run(env, DAG_ID, {"path": str(path), "counters": str(counters)})
    run = Run(env, run_id, path, counters)
    wait_for(run.all_waiting, 300, "every wait of ds_modes waiting", env)
    return run


def assert_on_try_1(rows: list[dict[str, Any]], but: frozenset[tuple[str, int]] = frozenset()) -> None:
    spent = [
        (r["task_id"], r["map_index"], r["try_number"])
        for r in rows
        if (r["task_id"], r["map_index"]) not in but and r["try_number"] != 1
    ]
    assert not spent, f"tries spent: {spent}"


def heartbeat_timeouts(env: AirflowEnv, run_id: str) -> set[tuple[str, int]]:
    """The task instances Airflow failed for a missing heartbeat (its audit log row: cause and try)."""
    rows = env.query(
        "SELECT task_id, map_index FROM log WHERE event = 'heartbeat timeout' AND dag_id = %s AND run_id = %s",
        (DAG_ID, run_id),
    )
    return {(task_id, int(map_index)) for task_id, map_index in rows}


def owners(run: Run, tasks: frozenset[str] = DEFERRABLE) -> dict[str, int]:
    """Triggerer component -> how many of this DAG run's triggers (of ``tasks``) it runs; unassigned ones
    left out."""
    counts: dict[str, int] = {}
    for row in run.env.trigger_owners():
        mine = (row["dag_id"], row["run_id"]) == (DAG_ID, run.run_id) and row["task_id"] in tasks
        if mine and row["component"]:
            counts[row["component"]] = counts.get(row["component"], 0) + 1
    return counts
