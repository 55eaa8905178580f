"""``pip install -U`` under a live Airflow: waits deferred by the previous release end on try 1 (issue "One wait,
one model", part 6).

What it proves, on a real Airflow 3.3 (SQLite or the PostgreSQL pass):

1. A throwaway venv (uv, the test venv's exact package set, so the cache serves it) gets the previous release
   (tests/integration/previous_release.py: commit ``RELEASE``, taken from this repository's history with ``git archive``, built as a wheel).
2. Airflow runs from that venv; one DAG run of ``upgrade_waits`` defers: a worker-first deferrable
   ``BackoffSqlSensor`` (its check #0 on a worker, then a ``BackoffTrigger`` row the old worker wrote), two
   zero-worker waits (start trigger rows the old scheduler wrote from the old DAG serialization: plain and
   templated) and a reschedule-mode wait.
3. Every component stops while they wait; the current checkout is installed over the old release in the same
   venv (checked: the installed package is now this checkout's, file for file); every component restarts.
4. The conditions become true; every wait ends ``success`` on try 1 (retries are allowed, so a failed or
   timed-out first try would show as try 2), the zero-worker ones without a worker, and the restarted
   triggerer built every old row (no "failed to load/inflate" line).

The unit-level proof for each stored row kind (and the asset watcher rows, not exercised here) is
tests/unit/test_previous_release_rows.py.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import sys
import textwrap
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import REPO_ROOT
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS
from tests.integration.live import lost_by_executor
from tests.integration.previous_release import (
    installed_package,
    package_digest,
    run_checked,
    uv_binary,
    venv_with_previous_release,
)

DAG_ID = "upgrade_waits"
CONN_ID = "upgrade_sqlite"
LOGICAL_DATE = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
# task id -> the value its query waits for (the templated one renders ``{{ ds }}`` in the triggerer)
WAITS = {
    "worker_first": "worker_first",
    "zero_worker": "zero_worker",
    "zero_worker_templated": LOGICAL_DATE.date().isoformat(),
    "reschedule": "reschedule",
}
DEFERRED = {"worker_first", "zero_worker", "zero_worker_templated"}
ZERO_WORKER = {"zero_worker", "zero_worker_templated"}

DAG_FILE = f'''
"""Waits that defer under the previous release and must end after the upgrade (tests/integration/test_upgrade_live.py)."""
import datetime as dt

from airflow_smart_ext.sensors import BackoffSqlSensor

try:
    from airflow.sdk import DAG
except ImportError:
    from airflow import DAG

COMMON = dict(
    conn_id="{CONN_ID}",
    sql="SELECT name FROM ready WHERE name = ?",
    poke_interval=2,
    max_wait=4,
    timeout=600,
    retries=1,
    retry_delay=dt.timedelta(seconds=2),
)

with DAG("{DAG_ID}", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)):
    BackoffSqlSensor(task_id="worker_first", parameters=["worker_first"], deferrable=True, start_from_trigger=False, **COMMON)
    BackoffSqlSensor(task_id="zero_worker", parameters=["zero_worker"], deferrable=True, **COMMON)
    BackoffSqlSensor(task_id="zero_worker_templated", parameters=["{{{{ ds }}}}"], deferrable=True, **COMMON)
    # Between its checks a reschedule wait holds no process: 40 s apart, so the components stop between two.
    BackoffSqlSensor(
        task_id="reschedule",
        parameters=["reschedule"],
        mode="reschedule",
        **{{**COMMON, "poke_interval": 40, "max_wait": 40, "jitter": "none", "splay": 0}},
    )
'''


@pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS, reason="the upgrade is proven live on 3.3 (2.11 rows: unit tier)")
def test_waits_deferred_by_the_previous_release_end_on_try_1_after_an_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uv = uv_binary()
    python = venv_with_previous_release(tmp_path)

    conditions = tmp_path / "conditions.db"
    with sqlite3.connect(conditions) as db:
        db.execute("CREATE TABLE ready (name TEXT)")
    dag_file = tmp_path / f"{DAG_ID}.py"
    dag_file.write_text(textwrap.dedent(DAG_FILE))
    # The harness runs every Airflow process with sys.executable: the throwaway venv's, for this test only.
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.delenv("PYTHONPATH", raising=False)  # nothing may shadow the venv's installed package
    env = AirflowEnv(
        dag_sources=[dag_file],
        extra_env={f"AIRFLOW_CONN_{CONN_ID.upper()}": f"sqlite://{quote(str(conditions), safe='')}"},
    )
    try:
        env.start()
        env.wait_for_dag(DAG_ID)
        env.unpause(DAG_ID)
        run_id = env.trigger(DAG_ID, logical_date=LOGICAL_DATE)

        def waiting() -> bool:
            states = {
                ti["task_id"]: (ti["state"], ti["trigger_id"]) for ti in env.task_instances(DAG_ID, run_id)
            }
            return (
                all(
                    states.get(task, (None, None))[0] == "deferred" and states[task][1] is not None
                    for task in DEFERRED
                )
                and states.get("reschedule", (None, None))[0] == "up_for_reschedule"
                and next_reschedule() > dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=25)
            )

        def next_reschedule() -> dt.datetime:
            """When the reschedule wait runs its next check: stopping then would kill that check (a
            heartbeat-less running try that the scheduler fails into try 2), not test the upgrade."""
            rows = env.query_dicts(
                "SELECT MAX(tr.reschedule_date) AS reschedule_date FROM task_reschedule tr "
                "JOIN task_instance ti ON tr.ti_id = ti.id "
                "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.task_id = 'reschedule'",
                (DAG_ID, run_id),
            )
            latest = rows[0]["reschedule_date"] if rows else None
            return latest or dt.datetime.min.replace(tzinfo=dt.timezone.utc)

        env.poll(waiting, timeout=180, what="every wait deferred / rescheduled by the previous release")
        old_rows = {row[0] for row in env.query("SELECT classpath FROM trigger")}
        assert old_rows == {
            "airflow_smart_ext.triggers.backoff.BackoffTrigger",
            "airflow_smart_ext.triggers.start.BackoffStartTrigger",
        }

        # The scheduler first: it (its executor) is what would start the reschedule wait's next check; under
        # load, stopping every component took longer than a check's margin and that check lost its try.
        for name in sorted(env.components, key=lambda name: not name.startswith("scheduler")):
            env.stop_component(name)
        run_checked(
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            python,
            "--no-deps",
            "--reinstall-package",
            "airflow-smart-ext",
            REPO_ROOT,
        )
        assert package_digest(installed_package(python)) == package_digest(REPO_ROOT / "airflow_smart_ext")
        triggerer_log_before = len(env.component_log("triggerer"))
        # The api-server first: a task a restarted scheduler queues before it listens fails at start-up
        # (connection refused) and is retried, which says nothing about the upgrade.
        env.start_component("api-server")
        for name in env.component_names:
            env.start_component(name, wait=False)
        env.wait_healthy()

        with sqlite3.connect(conditions) as db:
            db.executemany("INSERT INTO ready VALUES (?)", [(value,) for value in WAITS.values()])
        assert env.wait_run(DAG_ID, run_id, timeout=240) == "success"
        tis = {ti["task_id"]: ti for ti in env.task_instances(DAG_ID, run_id)}
        ended = {task: (tis[task]["state"], tis[task]["try_number"]) for task in WAITS}
        assert ended == {task: ("success", 1) for task in WAITS}, why_not_try_1(env, run_id, ended)
        for task in ZERO_WORKER:  # ended by the rebuilt start trigger, never queued for a worker
            assert tis[task]["queued_dttm"] is None, task
        restarted = env.component_log("triggerer")[triggerer_log_before:]
        assert "failed to load" not in restarted and "failed to inflate" not in restarted
    finally:
        env.stop()


def why_not_try_1(env: AirflowEnv, run_id: str, ended: dict[str, tuple[str, int]]) -> str:
    """The evidence for a wait that did not end ``success`` on try 1: its states as sampled, whether the
    scheduler failed a try on a late executor event (apache/airflow #71172), the scheduler's lines about it
    and the tail of its first try's log."""
    parts = [f"ended: {ended}"]
    for task, (state, try_number) in ended.items():
        if (state, try_number) == ("success", 1):
            continue
        scheduler = [line for line in env.component_log("scheduler").splitlines() if f".{task} " in line]
        parts += [
            f"--- {task}: states {env.state_history(DAG_ID, run_id, task)}; failed on a late executor event "
            f"(apache/airflow #71172) {lost_by_executor(env, DAG_ID, run_id, task)} time(s)",
            "scheduler:\n" + "\n".join(scheduler[-15:]),
            "try 1 log (tail):\n" + "\n".join(env.task_log(DAG_ID, run_id, task).splitlines()[-25:]),
        ]
    return "\n".join(parts)
