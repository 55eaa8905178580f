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

from airflow_harness.env import AirflowEnv
from tests.integration.distributed import (
    CYCLE,
    DAG_ID,
    PASS_MARKS,
    PG_RESTART_ENV,
    RESCHEDULE,
    SHARED,
    TRIGGERS,
    WORKERS,
    ZERO_WORKER,
    assert_on_try_1,
    heartbeat_timeouts,
    owners,
    start_ds_run,
)
from tests.integration.live import lost_by_executor, scheduler_logs, wait_for

# The Celery provider's log line when a message could not be sent to the broker (celery_executor.py).
CELERY_SEND_ERROR = "Error sending Celery"

pytestmark = PASS_MARKS


def test_every_mode_on_remote_workers(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    run = start_ds_run(env, tmp_path)

    # Reschedule mode: each poke is a new Celery message; over a few cycles both workers take some.
    def hosts() -> set[str]:
        return {line["host"] for name in ("reschedule", "mapped_reschedule") for line in run.checks(name)}

    wait_for(lambda: set(WORKERS) <= hosts(), 240, "reschedule pokes on both workers", env)
    assert hosts() <= set(WORKERS), hosts()
    # Sharing: identical deferrable waits make one check per cycle on each triggerer that holds some of them
    # (each check records the triggerer that made it); the wait with its own condition is checked apart.
    wait_for(lambda: sum(owners(run).values()) == TRIGGERS, 120, "every trigger assigned", env)
    conditions = {"shared": SHARED, "unshared": frozenset({"unshared"})}
    # Who holds each condition's waits, sampled through the window: Airflow hands a trigger to the other
    # triggerer when its holder misses heartbeats (a loaded machine; seen in CI), and the old holder runs it
    # until its next sync.
    # A triggerer that held a wait just before the window also counts: it runs the wait until its next sync
    # (seen in a rehearsal at load 18: a move before the window, the old holder's checks inside it).
    seen: dict[str, list[frozenset[str]]] = {name: [] for name in conditions}

    def sample_holders() -> None:
        for name, tasks in conditions.items():
            seen[name].append(frozenset(owners(run, tasks)))
        time.sleep(0.5)

    lead_ends = time.time() + 2 * CYCLE
    while time.time() < lead_ends:
        sample_holders()
    window_start = time.time()
    while not seen["shared"] or time.time() < window_start + 5 * CYCLE:
        sample_holders()
    window_end = time.time()
    cycles = (window_end - window_start) / CYCLE
    for name in conditions:
        checks = [
            line
            for line in run.checks(name)
            if line["where"] == "triggerer" and window_start <= line["at"] < window_end
        ]
        holders = set().union(*seen[name])
        # Every triggerer that checked counts, holder or not: under load a triggerer that lost its waits before
        # the samples began kept checking them for cycles (rehearsals at load 15-22).
        checkers = {line["host"] for line in checks}
        assert checkers <= set(env.triggerer_names), (name, checkers)
        per_holder = {host: sum(line["host"] == host for line in checks) for host in holders | checkers}
        where = f"{name}: {per_holder} checks in {cycles:.1f} cycles, holders {set(seen[name])}"
        # At most one check per cycle on each triggerer, however many of its waits it holds.
        assert all(count <= cycles + 1 for count in per_holder.values()), where
        assert len(checks) >= cycles - 2, where
        if len(set(seen[name])) == 1:  # nothing moved: each holder checked in every cycle
            assert all(per_holder[holder] >= cycles - 2 for holder in holders), where

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
    victim = next(r["hostname"] for r in run.tis() if r["task_id"] == "poke")
    assert victim in WORKERS, run.tis()
    survivor = next(w for w in WORKERS if w != victim)

    def holding_both() -> bool:
        """The poke's worker also runs a reschedule poke, and nothing is queued (a message the victim took but
        had not started would wait for Airflow's queued timeout, not its heartbeat timeout)."""
        rows = run.tis()
        rescheduling = any(
            r["task_id"] in RESCHEDULE and r["state"] == "running" and r["hostname"] == victim for r in rows
        )
        return rescheduling and not any(r["state"] == "queued" for r in rows)

    wait_for(holding_both, 180, f"a reschedule poke running on {victim} beside the poke", env)
    env.stop_component(victim, crash=True)
    killed_at = time.monotonic()
    # Read after the kill: its task processes are gone and can no longer change these rows.
    interrupted = {
        (r["task_id"], r["map_index"])
        for r in run.tis()
        if r["state"] == "running" and r["hostname"] == victim
    }
    assert ("poke", -1) in interrupted, interrupted
    # Airflow fails each interrupted try after its heartbeat timeout (30 s here) and retries it on the survivor.
    wait_for(lambda: heartbeat_timeouts(env, run.run_id) >= interrupted, 180, "the heartbeat timeouts", env)

    def retried_on_survivor() -> bool:
        rows = {(r["task_id"], r["map_index"]): r for r in run.tis()}
        return all(rows[k]["try_number"] == 2 and rows[k]["hostname"] == survivor for k in interrupted)

    wait_for(retried_on_survivor, 180, f"the interrupted tries retried on {survivor}", env)
    env.start_component(victim)  # a supervisor brings the machine's worker back
    rows = run.land_and_finish()
    assert heartbeat_timeouts(env, run.run_id) == interrupted
    by_task = {(r["task_id"], r["map_index"]): r for r in rows}
    assert by_task[("poke", -1)]["try_number"] == 2 and by_task[("poke", -1)]["hostname"] == survivor
    assert all(by_task[key]["try_number"] == 2 for key in interrupted), by_task
    assert_on_try_1(rows, but=frozenset(interrupted))
    print(
        f"worker {victim} killed running {sorted(interrupted)}: each failed by Airflow's heartbeat timeout "
        f"and retried on {survivor} ({time.monotonic() - killed_at:.0f}s)"
    )


def test_scheduler_and_triggerer_killed_at_once(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    run = start_ds_run(env, tmp_path)
    wait_for(lambda: sum(owners(run).values()) == TRIGGERS, 120, "every trigger assigned", env)
    held = owners(run)
    triggerer = max(held, key=lambda name: held[name])
    other_triggerer = next(name for name in env.triggerer_names if name != triggerer)
    # The scheduler that queued the running poke: its death leaves that task to be adopted.
    jobs = {env.components[name].job_id: name for name in env.scheduler_names}
    poke = next(r for r in run.tis() if r["task_id"] == "poke")
    scheduler = jobs[poke["queued_by_job_id"]]
    other_scheduler = next(name for name in env.scheduler_names if name != scheduler)
    try:
        env.stop_component(scheduler, crash=True)
        env.stop_component(triggerer, crash=True)
        # The other triggerer adopts every trigger once the dead one's heartbeat is stale; the other
        # scheduler adopts the dead one's running tasks after its orphan check.
        wait_for(lambda: owners(run) == {other_triggerer: TRIGGERS}, 240, f"{other_triggerer} adopting", env)

        def adopted() -> bool:
            rows = run.tis()
            return next(r for r in rows if r["task_id"] == "poke")["queued_by_job_id"] == (
                env.components[other_scheduler].job_id
            )

        wait_for(adopted, 240, f"{other_scheduler} adopting the running poke", env)
        rows = run.land_and_finish()
        assert_on_try_1(rows)
    finally:
        env.start_component(scheduler)
        env.start_component(triggerer)


def test_metadata_database_restart(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    command = os.environ.get(PG_RESTART_ENV)
    assert command, f"{PG_RESTART_ENV} is not set: the distributed pass restarts its own PostgreSQL server"
    run = start_ds_run(env, tmp_path)
    deaths = len(env.deaths)
    # The deployment docs/deployment.md requires: every component under a supervisor. A component that the
    # restart ends with a known Airflow defect (airflow_harness/deaths.py: an OperationalError its loop does
    # not catch) is started again at once, as systemd would, and is shown with this test; any other death
    # fails it. What must hold is the waits': none lost, every task on try 1.
    with env.supervised(
        "the metadata-database restart under test; docs/deployment.md, 'Run each component "
        "under a supervisor'"
    ):
        # Its output to a file: a server started without a log file (-l) would keep writing to our stdout.
        with (tmp_path / "pg_restart.log").open("w") as out:
            subprocess.run(command, shell=True, check=True, timeout=120, stdout=out, stderr=subprocess.STDOUT)
        restarted_at = time.time()
        env.check_components()

        def checked_since_restart() -> bool:  # poke, reschedule and the triggerers all check again
            names = ("poke", "reschedule", "unshared")
            return all(any(line["at"] > restarted_at for line in run.checks(name)) for name in names)

        wait_for(checked_since_restart, 120, "checks of every mode after the restart", env)
        rows = run.land_and_finish()
    assert_on_try_1(rows)
    exited = [f"{death.component}: {death.cause}" for death in env.deaths[deaths:]]
    print(f"components that exited on the database restart (restarted by the supervisor): {exited}")


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
    # A poke the scheduler sent while Redis was down: the Celery executor reports it failed (the provider
    # retries a publish only on a timeout), the scheduler fails the queued try, and Airflow spends it (seen in
    # CI's rehearsal for a reschedule poke). Airflow's own try, as a killed worker's; every other stays on 1.
    unsent = {
        (r["task_id"], r["map_index"])
        for r in rows
        if lost_by_executor(env, DAG_ID, run.run_id, r["task_id"], r["map_index"])
    }
    if unsent:
        assert CELERY_SEND_ERROR in scheduler_logs(env), unsent
        print(f"sent while the broker was down (the executor failed them; Airflow spent a try): {unsent}")
    by_task = {(r["task_id"], r["map_index"]): r for r in rows}
    assert all(by_task[key]["try_number"] == 2 for key in unsent), by_task
    assert_on_try_1(rows, but=frozenset(unsent))
    requeued = env.query(
        "SELECT task_id, map_index FROM log WHERE event = 'stuck in queued reschedule' AND run_id = %s",
        (run.run_id,),
    )
    print(f"requeued by Airflow after the broker restart (task_queued_timeout): {requeued}")
