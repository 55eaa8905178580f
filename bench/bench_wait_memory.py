"""Question — trigger-runner memory per wait: does a zero-worker wait cost memory in proportion to its DAG?

Airflow 3.3+ hands a start-from-trigger trigger a runtime task instance built from the whole serialized DAG
(deserialized again per trigger) and a template context (issue 25, part 1). This measures what each wait
costs the process that runs the triggers, for three scenarios, each in a fresh real Airflow
(``airflow_harness/env.py`` ``AirflowEnv``: LocalExecutor; the metadata DB on PostgreSQL when
``SMART_EXT_BENCH_PG_DSN`` or ``SMART_EXT_TEST_PG_DSN`` names a server, else SQLite; one Airflow at a time):

* ``zero_worker_1_task``: a 1-task DAG whose deferrable sensor starts in the triggerer
  (``BackoffStartTrigger``); ``WAITS`` runs;
* ``zero_worker_200_tasks``: a DAG of 10 such sensors + 190 other tasks (downstream of the sensors, so they
  never run); ``WAITS / 10`` runs;
* ``worker_first_200_tasks``: the same 200-task DAG with ``start_from_trigger=False`` (check #0 on a worker,
  then ``BackoffTrigger``).

Every sensor waits on a file that never appears (its path templated per run and task: one condition per
wait, nothing shared), ``poke_interval`` one hour: only check #0 runs while memory is measured.

Per scenario: a warm-up batch (``WARM_UP`` waits: the trigger classes and their modules are imported,
first-time caches filled), RSS of the trigger runner (3.x runs triggers in a child process of the
triggerer) once steady; then ``WAITS`` more waits, RSS once all are created and steady. Memory per wait =
the difference / ``WAITS``: what one more wait costs, not the imports. The whole triggerer (runner +
supervisor) is reported too.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import (
    BENCH_DAGS_DIR,
    REPO_ROOT,
    Goal,
    Result,
    Table,
    bench_dag_files,
    fmt_num,
    pg_server,
    script_main,
)

WAITS, WARM_UP = 200, 20
SENSORS, OTHER_TASKS = 10, 190
STEADY_SAMPLES, SAMPLE_SECONDS = 4, 3.0  # RSS within STEADY_TOLERANCE over this many samples = steady
STEADY_TOLERANCE = 0.005
GOAL_VS_ONE_TASK, GOAL_VS_WORKER_FIRST = 1.3, 2.0

# (scenario, dag_id, waits per run)
SCENARIOS = (
    ("zero_worker_1_task", "wm_one", 1),
    ("zero_worker_200_tasks", "wm_big", SENSORS),
    ("worker_first_200_tasks", "wm_big_worker_first", SENSORS),
)


def runner_and_triggerer_rss(env: Any) -> tuple[int, int]:
    """(RSS of the trigger runner, RSS of the whole triggerer tree) in bytes; the runner is the triggerer's
    largest child process (3.x: ``TriggerRunnerSupervisor`` forks it)."""
    import psutil

    main = psutil.Process(env.components["triggerer"].process.pid)
    sizes = []
    for proc in main.children(recursive=True):
        try:
            sizes.append(proc.memory_info().rss)
        except psutil.NoSuchProcess:
            continue
    if not sizes:
        raise RuntimeError("the triggerer has no trigger-runner child process")
    return max(sizes), main.memory_info().rss + sum(sizes)


def waiting(env: Any, dag_id: str) -> int:
    """Task instances of ``dag_id`` deferred with their trigger picked up by the triggerer."""
    rows = env.query(
        "SELECT count(*) FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
        "WHERE ti.dag_id = %s AND ti.state = 'deferred' AND t.triggerer_id IS NOT NULL",
        (dag_id,),
    )
    return int(rows[0][0])


def steady_rss(env: Any, dag_id: str, expected: int, budget: float) -> tuple[int, int, float]:
    """Once ``expected`` waits run: (runner RSS, triggerer RSS) after STEADY_SAMPLES samples within
    STEADY_TOLERANCE of each other, and the seconds it took from the call."""
    started = time.time()
    samples: list[tuple[int, int]] = []
    while time.time() - started < budget:
        env.check_components()
        if waiting(env, dag_id) >= expected:
            samples.append(runner_and_triggerer_rss(env))
            recent = [runner for runner, _ in samples[-STEADY_SAMPLES:]]
            if len(recent) == STEADY_SAMPLES and max(recent) - min(recent) <= STEADY_TOLERANCE * max(recent):
                return *samples[-1], time.time() - started
        time.sleep(SAMPLE_SECONDS)
    raise RuntimeError(
        f"{dag_id}: {waiting(env, dag_id)} of {expected} waits running after {budget:.0f} s (or RSS not steady)"
    )


def trigger_runs(env: Any, dag_id: str, count: int) -> None:
    """Create ``count`` runs; SQLite under a busy scheduler sometimes answers "database is locked" (HTTP 500,
    the transaction rolled back): try again."""
    for _ in range(count):
        for attempt in range(5):
            try:
                env.trigger(dag_id)
                break
            except Exception:
                if attempt == 4:
                    raise
                time.sleep(2.0)


def measure(
    scenario: str, dag_id: str, per_run: int, waits: int, warm_up: int, dag_files: list[Path]
) -> dict:
    sys.path.insert(0, str(REPO_ROOT))
    from airflow_harness.env import AirflowEnv

    env = AirflowEnv(
        [BENCH_DAGS_DIR / "wm_sensors.py", *dag_files],
        # A PostgreSQL server for the metadata DB when set (else SQLite, whose lock can fail the scheduler
        # while 200 task processes start on a loaded machine).
        pg_dsn=pg_server(),
        parallelism=4,
        extra_env={"AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(10 * (waits + warm_up))},
    )
    with env:
        env.wait_for_dag(dag_id)
        env.unpause(dag_id)
        idle_runner, idle_triggerer = runner_and_triggerer_rss(env)
        budget = 300 + 5.0 * (waits + warm_up)  # worker-first: a task process per wait on 2 shared cores
        trigger_runs(env, dag_id, warm_up // per_run)
        warm_runner, warm_triggerer, _ = steady_rss(env, dag_id, warm_up, budget)
        trigger_runs(env, dag_id, waits // per_run)
        full_runner, full_triggerer, took = steady_rss(env, dag_id, warm_up + waits, budget)
        version, metadata = env.airflow_version, "PostgreSQL" if env.uses_postgres else "SQLite"
    return {
        "scenario": scenario,
        "waits": waits,
        "idle": (idle_runner, idle_triggerer),
        "warm": (warm_runner, warm_triggerer),
        "full": (full_runner, full_triggerer),
        "per_wait_runner": (full_runner - warm_runner) / waits,
        "per_wait_triggerer": (full_triggerer - warm_triggerer) / waits,
        "seconds": took,
        "version": version,
        "metadata": metadata,
    }


def _mib(value: float) -> str:
    return fmt_num(value / 2**20, 3 if abs(value) < 2**20 else 1)


def run(tiny: bool) -> Result:
    import airflow

    waits, warm_up = (20, 10) if tiny else (WAITS, WARM_UP)
    if not airflow.__version__.startswith("3."):
        return Result(
            key="wait_memory",
            title="Trigger-runner memory per wait vs DAG size",
            question="(Airflow 3.x only: 2.x runs triggers in the triggerer process and sends no DAG)",
            method="",
            goals=[Goal("per-wait memory measured", f"Airflow {airflow.__version__}: not applicable", None)],
        )
    measured: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-wm-") as tmp:
        work = Path(tmp)
        params = {"max_runs": waits + warm_up, "max_tasks": 10_000, "sensors": SENSORS, "other": OTHER_TASKS}
        dag_files = bench_dag_files("bench_wait_memory", work, params)
        for scenario, dag_id, per_run in SCENARIOS:
            print(f"[bench_wait_memory] {scenario} ...", flush=True)
            measured[scenario] = measure(scenario, dag_id, per_run, waits, warm_up, dag_files)
            print(f"[bench_wait_memory] {scenario}: {measured[scenario]}", flush=True)
    first = next(iter(measured.values()))
    version, metadata = first["version"], first["metadata"]
    table = Table(
        [
            "scenario",
            "waits",
            "runner RSS idle / warm / full (MiB)",
            "trigger runner per wait (MiB)",
            "whole triggerer per wait (MiB)",
            "all created + steady after",
        ],
        caption=f"Airflow {version}, {metadata} metadata DB, LocalExecutor; {warm_up} warm-up waits, then {waits} measured.",
    )
    for scenario, _, _ in SCENARIOS:
        m = measured[scenario]
        table.add(
            scenario,
            m["waits"],
            " / ".join(_mib(m[key][0]) for key in ("idle", "warm", "full")),
            _mib(m["per_wait_runner"]),
            _mib(m["per_wait_triggerer"]),
            f"{m['seconds']:.0f} s",
        )
    one = measured["zero_worker_1_task"]["per_wait_runner"]
    big = measured["zero_worker_200_tasks"]["per_wait_runner"]
    worker_first = measured["worker_first_200_tasks"]["per_wait_runner"]
    vs_one = big / one if one > 0 else float("inf")
    vs_worker_first = big / worker_first if worker_first > 0 else float("inf")
    goals = [
        Goal(
            f"zero-worker wait of a 200-task DAG <= {GOAL_VS_ONE_TASK:g}x a 1-task DAG's (trigger runner)",
            f"{_mib(big)} vs {_mib(one)} MiB per wait: {vs_one:.2f}x",
            None if tiny else vs_one <= GOAL_VS_ONE_TASK,
        ),
        Goal(
            f"zero-worker wait of a 200-task DAG <= {GOAL_VS_WORKER_FIRST:g}x a worker-first wait's "
            "(trigger runner)",
            f"{_mib(big)} vs {_mib(worker_first)} MiB per wait: {vs_worker_first:.2f}x",
            None if tiny else vs_worker_first <= GOAL_VS_WORKER_FIRST,
        ),
    ]
    return Result(
        key="wait_memory",
        title="Trigger-runner memory per wait vs DAG size",
        question=(
            "How much memory does one more wait cost the trigger runner — zero-worker waits of a 1-task and "
            "of a 200-task DAG against worker-first waits — and does it grow with the DAG?"
        ),
        method=(
            "One fresh real Airflow per scenario (harness; LocalExecutor, parallelism 4); a warm-up "
            "batch of waits, then the measured batch; RSS of the trigger runner (the triggerer's child "
            "process; psutil) sampled every few seconds once every wait's trigger is picked up, taken when "
            "steady; per wait = (RSS after the batch - RSS after the warm-up) / waits. Each wait has its own "
            "condition (a file that never appears; one-hour interval, so only check #0 runs)."
        ),
        tables=[table],
        goals=goals,
        notes=[
            "RSS includes what the allocator keeps after transient objects are freed: Airflow 3.3 sends the whole "
            "serialized DAG with every start-from-trigger trigger and the runner decodes a batch of them at "
            "once, then deserializes it per trigger; that peak is freed but its pages mostly stay. "
            "One run per scenario on a shared 2-core machine."
        ],
    )


if __name__ == "__main__":
    script_main(run)
