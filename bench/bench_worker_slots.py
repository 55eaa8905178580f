"""Question 7 — worker slots: M = 20 sensors wait ~2 min in poke, reschedule and deferrable mode.

A real Airflow (``airflow_harness/env.py`` ``AirflowEnv``: scheduler, dag-processor, triggerer,
api-server, LocalExecutor with enough slots for all M sensors) runs one DAG per mode, each with M
``FileArrivedSensor(BackoffSensor)`` tasks (``tests/integration/dags/sn_sensors.py``: only the base class
changed) waiting for one file that the benchmark creates ``WAIT_SECONDS`` after the run was triggered.
Modes run one after another, so they do not compete for the two cores.

Measured:
* **worker-occupied seconds**: the metadata DB is sampled every ``SAMPLE_SECONDS``; every task instance in
  state ``running`` holds a worker slot, so the integral of their count over time is the slot time used
  while task code runs. Deferred and ``up_for_reschedule`` hold none. Not included: the second or so a
  worker spends starting a task process before the state turns ``running`` — once per execution, so it
  weighs most in reschedule mode (one execution per check, see the checks column).
* **checks** done on workers and in the triggerer: every poke appends a line to a counter file (exact).
* **tries**: the highest ``try_number`` of the run's task instances (1 = nobody retried).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import REPO_ROOT, Goal, Result, Table, bench_dag_files, fmt_num, fmt_ratio, ratio, script_main

MODES = ("poke", "reschedule", "deferrable")
SENSORS = 20
WAIT_SECONDS = 120.0
SAMPLE_SECONDS = 0.1
POKE_INTERVAL = 10
MAX_WAIT = 30


def _measure_mode(env: Any, mode: str, sensors: int, wait: float, workdir: Path) -> dict[str, Any]:
    dag_id = f"bench_slots_{mode}"
    target, counter = workdir / f"{mode}.ready", workdir / f"{mode}.pokes.jsonl"
    run_id = env.trigger(dag_id, {"path": str(target), "counter_path": str(counter)})
    triggered = time.time()
    occupied = 0.0
    peak = 0
    last = time.time()
    created = False
    state = "running"
    samples = 0
    while True:
        samples += 1
        rows = env.query(
            "SELECT state, count(*) FROM task_instance WHERE dag_id = %s AND run_id = %s GROUP BY state",
            (dag_id, run_id),
        )
        now = time.time()
        running = sum(int(count) for task_state, count in rows if task_state == "running")
        occupied += running * (now - last)
        peak = max(peak, running)
        last = now
        if not created and now - triggered >= wait:
            target.write_text("ready\n")
            created = True
        if created and samples % 10 == 0:
            state = env.dag_run(dag_id, run_id)["state"]
            if state in ("success", "failed"):
                break
        if now - triggered > wait + 900:
            raise RuntimeError(f"{dag_id}: run not finished 15 min after the file appeared")
        env.check_components()
        time.sleep(SAMPLE_SECONDS)
    pokes = [json.loads(line) for line in counter.read_text().splitlines()] if counter.exists() else []
    tries = env.query(
        "SELECT max(try_number) FROM task_instance WHERE dag_id = %s AND run_id = %s", (dag_id, run_id)
    )
    final = env.query(
        "SELECT state, count(*) FROM task_instance WHERE dag_id = %s AND run_id = %s GROUP BY state",
        (dag_id, run_id),
    )
    return {
        "mode": mode,
        "state": state,
        "occupied_seconds": occupied,
        "peak_running": peak,
        "worker_checks": sum(1 for p in pokes if p["where"] == "worker"),
        "triggerer_checks": sum(1 for p in pokes if p["where"] == "triggerer"),
        "max_try": int(tries[0][0] or 0),
        "task_states": ", ".join(f"{count} {task_state}" for task_state, count in sorted(final, key=str)),
        "run_seconds": time.time() - triggered,
    }


def run(tiny: bool) -> Result:
    sys.path.insert(0, str(REPO_ROOT))
    from airflow_harness.env import AirflowEnv
    from airflow_harness.state import TEST_DAGS_DIR

    sensors = 2 if tiny else SENSORS
    wait = 5.0 if tiny else WAIT_SECONDS
    # A tiny run only keeps the script working: short intervals so each mode ends soon after the file appears.
    poke_interval, max_wait = (2, 4) if tiny else (POKE_INTERVAL, MAX_WAIT)
    with tempfile.TemporaryDirectory(prefix="bench-slots-") as tmp:
        workdir = Path(tmp)
        params = {"sensors": sensors, "poke_interval": poke_interval, "max_wait": max_wait}
        env = AirflowEnv(
            [TEST_DAGS_DIR / "sn_sensors.py", *bench_dag_files("bench_worker_slots", workdir, params)],
            parallelism=sensors + 4,
            extra_env={
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1"
            },  # the 3.3.2 race (docs/deferrable.md)
        )
        notes: list[str] = []
        measured: dict[str, dict[str, Any]] = {}
        with env:
            if env.executor != "LocalExecutor":
                notes.append(f"{env.executor} runs one task at a time: nothing comparable to measure.")
            else:
                for mode in MODES:
                    dag_id = f"bench_slots_{mode}"
                    env.wait_for_dag(dag_id)
                    env.unpause(dag_id)
                for mode in MODES:
                    measured[mode] = _measure_mode(env, mode, sensors, wait, workdir)
            airflow_version = env.airflow_version

    table = Table(
        [
            "mode",
            "worker-occupied seconds",
            "vs poke mode",
            "per sensor",
            "peak slots",
            "checks on workers",
            "checks in triggerer",
            "max try",
            "run state",
            "reading",
        ]
    )
    readings = {
        "poke": "each sensor holds a slot for the whole wait",
        "reschedule": "a slot only while a poke runs, but a task start (not counted here) per check",
        "deferrable": "a slot for check #0 and for the resume; the wait itself is in the triggerer",
    }
    for mode in MODES:
        if mode not in measured:
            table.add(mode, "not measured", "-", "-", "-", "-", "-", "-", "-", notes[0] if notes else "")
            continue
        m = measured[mode]
        table.add(
            mode,
            fmt_num(m["occupied_seconds"], 0),
            fmt_ratio(ratio(m["occupied_seconds"], measured["poke"]["occupied_seconds"])),
            fmt_num(m["occupied_seconds"] / sensors, 1),
            str(m["peak_running"]),
            str(m["worker_checks"]),
            str(m["triggerer_checks"]),
            str(m["max_try"]),
            m["state"] if m["state"] == "success" else f"{m['state']} ({m['task_states']})",
            readings[mode],
        )
    goal = Goal("deferrable ≈ 0 worker-seconds while waiting", "not measured", None)
    if measured:
        deferred = measured["deferrable"]["occupied_seconds"] / sensors
        poke = measured["poke"]["occupied_seconds"] / sensors
        # "≈ 0 while waiting": the slot time per sensor is the fixed cost of two short executions, not a
        # share of the wait; judged as met when it is under 10 % of the wait.
        goal = Goal(
            goal.text,
            f"{deferred:.1f} s per deferrable sensor over a {wait:g} s wait (poke mode: {poke:.1f} s; "
            f"{fmt_ratio(ratio(poke, deferred))} less)",
            (deferred < 0.1 * wait and measured["deferrable"]["state"] == "success") if not tiny else None,
        )
    notes.append(
        f"Airflow {airflow_version}; `FileArrivedSensor(poke_interval={poke_interval}, max_wait={max_wait})` "
        f"with the default jitter and splay; the file appears {wait:g} s after the trigger; parallelism "
        f"{sensors + 4}. Worker-occupied time is sampled from the DB every {SAMPLE_SECONDS:g} s."
    )
    return Result(
        key="worker_slots",
        title="Worker slots",
        question=(
            f"With real Airflow, M = {sensors} sensors waiting ~{wait / 60:g} min in poke, reschedule and "
            "deferrable mode: how many worker-occupied seconds and how many checks and tries does each cost?"
        ),
        method=(
            "One real Airflow (scheduler, dag-processor, triggerer, api-server; LocalExecutor) from the test "
            "harness; one DAG per mode, run one after another; slot time integrated from `running` task "
            "instances in the metadata DB, checks counted by the sensors themselves. One run per mode."
        ),
        tables=[table],
        goals=[goal],
        notes=notes,
    )


if __name__ == "__main__":
    script_main(run)
