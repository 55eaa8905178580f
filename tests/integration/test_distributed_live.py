"""The topology users run (issue 36): every mode on remote workers, and the faults of a distributed deployment.

Runs only in the distributed pass (``SMART_EXT_TOPOLOGY=celery``, tests/integration/conftest.py): Airflow 3.3
with the CeleryExecutor on a private Redis, PostgreSQL as metadata database and result backend, two Celery
workers, two schedulers, two triggerers, a dag-processor and an api-server. Each worker records its own name
as the hostname of the tries it runs, and every check of ``ds_modes`` (dags/ds_topology_dags.py) is counted
with where it ran and on which worker.

Each test starts one DAG run of ``ds_modes`` (poke, reschedule, mapped reschedule, worker-first, zero-worker,
two more zero-worker waits sharing its check, a mapped deferrable wait and an unshared one), lets it wait,
applies its fault, then lands the file. The expected outcome, stated in docs/deployment.md:

* no fault: every task instance ends ``success`` on try 1; reschedule pokes land on both workers; zero-worker
  waits never reach a worker; identical deferrable waits make one check per cycle per triggerer.
* kill -9 of a Celery worker: the tries it was running are failed by Airflow's heartbeat timeout (an audit
  ``heartbeat timeout`` row names each) and retried on the other worker as try 2 — Airflow's own try; every
  other task instance ends on try 1.
* kill -9 of one scheduler and one triggerer at once, a metadata-database restart (``pg_ctl restart -m
  fast``), a graceful Redis restart: every task instance ends ``success`` on try 1.

Everywhere: no wait lost (the DAG run succeeds), no duplicate completion (each try ends once), no try spent
by our code.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import PG_DSN_ENV, AirflowEnv
from tests.integration.distributed import (
    CYCLE,
    DEFERRABLE,
    PG_RESTART_ENV,
    WORKERS,
    ZERO_WORKER,
    assert_on_try_1,
    heartbeat_timeouts,
    owners,
    start_ds_run,
)
from tests.integration.live import wait_for

pytestmark = [
    pytest.mark.skipif(not os.environ.get(PG_DSN_ENV), reason="the distributed pass needs PostgreSQL"),
    pytest.mark.timeout(900),
]


def test_every_mode_on_remote_workers(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    run = start_ds_run(env, tmp_path)

    # Reschedule mode: each poke is a new Celery message; over a few cycles both workers take some.
    def hosts() -> set[str]:
        return {line["host"] for name in ("reschedule", "mapped_reschedule") for line in run.checks(name)}

    wait_for(lambda: set(WORKERS) <= hosts(), 240, "reschedule pokes on both workers", env)
    assert hosts() <= set(WORKERS), hosts()
    # Sharing: identical deferrable waits make one check per cycle on each triggerer that holds some of them.
    serving = len(owners(run))
    window_start = time.time()
    time.sleep(5 * CYCLE)
    window_end = time.time()

    def in_window(name: str) -> list[dict[str, Any]]:
        return [
            line
            for line in run.checks(name)
            if line["where"] == "triggerer" and window_start <= line["at"] < window_end
        ]

    cycles = (window_end - window_start) / CYCLE
    shared, unshared = in_window("shared"), in_window("unshared")
    assert 1 <= serving <= 2
    assert len(shared) <= serving * (cycles + 1), (
        f"{len(shared)} shared checks, {serving} triggerers, {cycles:.1f} cycles"
    )
    assert len(unshared) >= cycles - 2, f"{len(unshared)} checks of the unshared wait in {cycles:.1f} cycles"

    rows = run.land_and_finish()
    assert_on_try_1(rows)
    by_task = {(r["task_id"], r["map_index"]): r for r in rows}
    for task_id in ZERO_WORKER:  # never queued for, never run on a worker
        row = by_task[(task_id, -1)]
        assert row["queued_dttm"] is None and not row["hostname"], row
    assert all(line["where"] == "triggerer" for line in run.checks("unshared"))
    for key in [("poke", -1), ("worker_first", -1), ("mapped_deferrable", 0), ("mapped_deferrable", 1)]:
        assert by_task[key]["hostname"] in WORKERS, by_task[key]
    worker_checks = [line for line in run.checks("shared") if line["where"] == "worker"]
    assert len(worker_checks) == 3 and {line["host"] for line in worker_checks} <= set(WORKERS), worker_checks


def test_killed_worker_costs_only_airflows_own_try(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    run = start_ds_run(env, tmp_path)
    poke = next(r for r in run.tis() if r["task_id"] == "poke")
    victim = poke["hostname"]
    assert victim in WORKERS, poke
    # A quiet moment: nothing queued (a message the victim took but had not started would wait for Airflow's
    # queued timeout, not its heartbeat timeout).
    wait_for(lambda: not any(r["state"] == "queued" for r in run.tis()), 60, "no task instance queued", env)
    interrupted = {
        (r["task_id"], r["map_index"])
        for r in run.tis()
        if r["state"] == "running" and r["hostname"] == victim
    }
    env.stop_component(victim, crash=True)
    killed_at = time.monotonic()
    # Airflow fails each interrupted try after its heartbeat timeout (30 s here) and retries it elsewhere.
    wait_for(lambda: heartbeat_timeouts(env, run.run_id) >= interrupted, 180, "the heartbeat timeouts", env)
    env.start_component(victim)  # a supervisor brings the machine's worker back
    rows = run.land_and_finish()
    failed_by_airflow = heartbeat_timeouts(env, run.run_id)
    assert ("poke", -1) in interrupted and failed_by_airflow == interrupted, (interrupted, failed_by_airflow)
    by_task = {(r["task_id"], r["map_index"]): r for r in rows}
    for key in interrupted:
        assert by_task[key]["try_number"] == 2, by_task[key]
        assert by_task[key]["hostname"] in WORKERS
    assert_on_try_1(rows, but=frozenset(interrupted))
    print(
        f"worker {victim} killed; {len(interrupted)} tries failed by Airflow {time.monotonic() - killed_at:.0f}s"
    )


def test_scheduler_and_triggerer_killed_at_once(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    run = start_ds_run(env, tmp_path)
    held = owners(run)
    victim = max(held, key=lambda name: held[name])
    survivor = next(name for name in env.triggerer_names if name != victim)
    env.stop_component("scheduler", crash=True)
    env.stop_component(victim, crash=True)
    # The surviving triggerer adopts every trigger once the victim's heartbeat is stale.
    triggers = len(DEFERRABLE) + 1  # mapped_deferrable has two task instances
    wait_for(
        lambda: owners(run) == {survivor: triggers},
        240,
        "the surviving triggerer running every trigger",
        env,
    )
    rows = run.land_and_finish()
    assert_on_try_1(rows)
    env.start_component("scheduler")
    env.start_component(victim)


def test_metadata_database_restart(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    command = os.environ.get(PG_RESTART_ENV)
    assert command, f"{PG_RESTART_ENV} is not set: the distributed pass restarts its own PostgreSQL server"
    run = start_ds_run(env, tmp_path)
    deaths = len(env.incidents)
    # Its output to a file: a server started without a log file (-l) would keep writing to our stdout.
    with (tmp_path / "pg_restart.log").open("w") as out:
        subprocess.run(command, shell=True, check=True, timeout=120, stdout=out, stderr=subprocess.STDOUT)
    restarted_at = time.time()
    env.check_components()  # a supervisor restarts a component the outage ended (reported in incidents)

    def checked_since_restart() -> bool:  # poke, reschedule and the triggerers all check again
        names = ("poke", "reschedule", "unshared")
        return all(any(line["at"] > restarted_at for line in run.checks(name)) for name in names)

    wait_for(checked_since_restart, 120, "checks of every mode after the restart", env)
    rows = run.land_and_finish()
    assert_on_try_1(rows)
    print(f"components that exited on the database restart: {env.incidents[deaths:]}")


def test_broker_restart(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    assert env.broker is not None
    run = start_ds_run(env, tmp_path)
    before = len(run.checks("reschedule"))
    env.broker.restart(down_for=2.0)
    # Reschedule pokes need new messages: they go on through the restarted broker. A message a worker took
    # while it reconnected can stay unexecuted (Celery on Redis): Airflow requeues that task instance after
    # `task_queued_timeout` (120 s here, checked every 15 s), without spending a try.
    after = lambda: len(run.checks("reschedule")) >= before + 2  # noqa: E731
    wait_for(after, 300, "reschedule pokes after the restart", env)
    rows = run.land_and_finish()
    assert_on_try_1(rows)
    requeued = env.query(
        "SELECT task_id, map_index FROM log WHERE event = 'stuck in queued reschedule' AND run_id = %s",
        (run.run_id,),
    )
    print(f"requeued by Airflow after the broker restart (task_queued_timeout): {requeued}")
