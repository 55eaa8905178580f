"""A rolling ``pip install -U`` on the distributed topology (issue 36, part 4): every wait ends on try 1.

Runs only in the distributed pass (tests/integration/conftest.py), first: it starts an Airflow of its own, the
session's topology (two Celery workers, schedulers and triggerers, PostgreSQL, Redis), with every component on
the previous release (tests/integration/previous_release.py). One DAG run of ``ds_modes`` (every mode,
dags/ds_topology_dags.py) waits. Then each component in turn is stopped and started again from this checkout's
venv, the way a machine is upgraded. Old and new versions run side by side until the last component is done.
The order is the one docs/deployment.md recommends:

1. the api-server;
2. the triggerers, one at a time (the other one keeps serving; new code reads the old trigger rows);
3. the dag-processor, then the schedulers, one at a time;
4. the workers, one at a time, each **drained**: SIGTERM to the worker's main process is Celery's warm
   shutdown. The worker takes no new message and exits once its running tasks end. The worker running the
   poke-mode sensor exits only after that wait ends, so the file lands while it drains.

Between steps, every wait keeps waiting: no task instance fails or goes up for retry. At the end every task
instance ends ``success`` on try 1, and no triggerer failed to load a trigger row.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_harness.env import AirflowEnv
from tests.integration.distributed import (
    CYCLE,
    DAG_ID,
    DISTRIBUTED_SETTINGS,
    PASS_MARKS,
    WORKERS,
    Run,
    assert_on_try_1,
    distributed_topology,
)
from tests.integration.live import start_run, wait_for
from tests.integration.previous_release import installed_package, package_digest, venv_with_previous_release

pytestmark = PASS_MARKS

BROKEN = {"failed", "up_for_retry", "upstream_failed"}
DAG_SOURCES = [
    Path(__file__).resolve().parent / "dags" / name for name in ("ds_topology_dags.py", "sn_sensors.py")
]


def _still_waiting(run: Run) -> None:
    broken = [(r["task_id"], r["map_index"], r["state"]) for r in run.tis() if r["state"] in BROKEN]
    assert not broken, f"a wait broke during the roll: {broken}"


def test_rolling_upgrade_keeps_every_wait_on_try_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    new_python = sys.executable
    old_python = venv_with_previous_release(tmp_path / "venv")
    monkeypatch.setattr(sys, "executable", str(old_python))  # every component, and the migration, start old
    monkeypatch.delenv("PYTHONPATH", raising=False)  # nothing may shadow a venv's installed package
    assert package_digest(installed_package(old_python)) != package_digest(
        installed_package(Path(new_python))
    )
    # The default heartbeat timeout (the pass shortens it to 30 s for its killed worker): a task's heartbeat
    # goes through the one api-server, which this test restarts.
    settings = {**DISTRIBUTED_SETTINGS, "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300"}
    env = AirflowEnv(dag_sources=DAG_SOURCES, **distributed_topology(), extra_env=settings)
    try:
        env.start()
        counters = tmp_path / "counters"
        counters.mkdir()
        path = tmp_path / "landed.txt"
        run = Run(env, start_run(env, DAG_ID, {"path": str(path), "counters": str(counters)}), path, counters)
        wait_for(run.all_waiting, 300, "every wait of ds_modes waiting on the previous release", env)
        triggerer_logs = {name: len(env.component_log(name)) for name in env.triggerer_names}

        def upgrade(name: str) -> None:
            env.stop_component(name)  # a drained worker has exited already
            env.interpreters[name] = new_python
            env.start_component(name)
            time.sleep(2 * CYCLE)  # old and new side by side: every mode checks on
            _still_waiting(run)

        for name in [
            "api-server",
            *reversed(env.triggerer_names),
            "dag-processor",
            *reversed(env.scheduler_names),
        ]:
            upgrade(name)
        poke_worker = next(r["hostname"] for r in run.tis() if r["task_id"] == "poke")
        assert poke_worker in WORKERS
        for worker in [w for w in WORKERS if w != poke_worker]:
            env.drain_worker(worker).wait(timeout=120)
            upgrade(worker)
        # The last worker runs the poke-mode wait: it drains while the file lands, then is upgraded.
        draining = env.drain_worker(poke_worker)
        rows = run.land_and_finish()
        draining.wait(timeout=120)
        env.stop_component(poke_worker)
        env.interpreters[poke_worker] = new_python
        env.start_component(poke_worker)

        assert_on_try_1(rows)
        # Every process now runs from the new venv: its files are mapped, none of the old one's (a command line
        # says nothing: Celery rewrites its process title).
        new_venv, old_venv = (str(Path(python).parent.parent) + "/" for python in (new_python, old_python))
        for name in env.component_names:
            process = env.components[name].process
            assert process is not None and process.poll() is None, name
            mapped = {m.path for m in psutil.Process(process.pid).memory_maps()}
            assert any(path.startswith(new_venv) for path in mapped), (name, sorted(mapped))
            assert not any(path.startswith(old_venv) for path in mapped), (name, sorted(mapped))
        for name, offset in triggerer_logs.items():
            log = env.component_log(name)[offset:]
            assert "failed to load" not in log and "failed to inflate" not in log, name
    finally:
        env.stop()
