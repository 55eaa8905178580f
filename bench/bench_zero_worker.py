"""Question — zero-worker waits at scale: N = 1,000 deferrable sensors on K = 10 SQL conditions (issue 15).

One real Airflow (``airflow_harness/env.py`` ``AirflowEnv``: scheduler, dag-processor, triggerer with
capacity >= N, api-server; LocalExecutor) runs three DAGs, one path each, one after another (they do not
compete for the two cores):

* ``zero_worker``: ``BackoffSqlSensor(deferrable=True)`` — the default: the scheduler starts the task in
  the triggerer, a success ends it there. ``RUNS`` runs x ``TASKS`` tasks = N sensors.
* ``worker_first``: the same sensor with ``start_from_trigger=False`` (check #0 on a worker, resume on a
  worker) — today's deferral before issue 15.
* ``reschedule``: ``mode="reschedule"`` (a task process per check).

The baselines run at a smaller N (one run of ``BASELINE_TASKS``; a task-process start costs ~1-2 s of CPU,
2 cores cannot start thousands in a few minutes): compare them per sensor. Every sensor waits on one of K
conditions (task i on condition i mod K; fixed interval, ``exponential_backoff=False``) in a PostgreSQL
database, with nothing templated (so the same DAG also takes the zero-worker path on 2.11).

Measured per path:
* **task-process starts**: exact; ``on_execute_callback`` (run by Airflow in the task process for every
  execution, resumes included) appends one line to a file;
* **worker-occupied seconds** and **peak slots**: the metadata DB sampled every ``SAMPLE_SECONDS``; every task
  instance in ``running`` holds a worker slot (the integral of their count over time);
* **checks per cycle, counted at the database**: the sensors' SQL calls ``bench_check(cond)``, which records
  the condition and the database's clock for every check before it reads the condition; checks are
  bucketed into ``POKE_INTERVAL`` windows while all N wait (full windows only, from one cycle after the last
  sensor started waiting until the conditions come true);
* **time from run creation until all N wait** (every task instance seen ``deferred`` / ``up_for_reschedule``)
  and **from the conditions coming true until all N succeed**;
* **triggerer and scheduler CPU seconds and peak RSS** over the path (triggerer: the whole process tree;
  scheduler: its own process, LocalExecutor workers excluded).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import (
    PG_ENV,
    REPO_ROOT,
    Goal,
    Result,
    Table,
    bench_dag_files,
    component_usage,
    fmt_num,
    pg_server,
    prepare_condition_db,
    script_main,
)

PATHS = ("zero_worker", "worker_first", "reschedule")
RUNS, TASKS, K = 10, 100, 10
BASELINE_TASKS = 40
POKE_INTERVAL = 30
WAIT_CYCLES = 6  # the first cycle after all wait is not counted (triggers may still be starting)
SAMPLE_SECONDS = 0.5
CONDITION_DB = "zw_bench_conditions"


@dataclass
class Sampler:
    """Samples TI states (per DAG) and component RSS."""

    env: Any
    dag_id: str
    n: int
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    seen_waiting: set[tuple[str, str]] = field(default_factory=set)
    all_waiting_at: float | None = None
    occupied: float = 0.0
    peak_running: int = 0
    rss_peak: dict[str, int] = field(default_factory=lambda: {"triggerer": 0, "scheduler": 0})
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        last = time.time()
        next_rss = 0.0
        while not self._stop.is_set():
            now = time.time()
            try:
                rows = self.env.query(
                    "SELECT run_id, task_id, state FROM task_instance WHERE dag_id = %s", (self.dag_id,)
                )
            except Exception:  # the DB is briefly busy: sample again next tick
                rows = []
            counts: dict[str, int] = {}
            for run_id, task_id, state in rows:
                counts[str(state)] = counts.get(str(state), 0) + 1
                if state in ("deferred", "up_for_reschedule"):
                    self.seen_waiting.add((run_id, task_id))
            if self.all_waiting_at is None and len(self.seen_waiting) >= self.n:
                self.all_waiting_at = now
            running = counts.get("running", 0)
            self.occupied += running * (now - last)
            self.peak_running = max(self.peak_running, running)
            last = now
            self.samples.append((now, counts))
            if now >= next_rss:
                next_rss = now + 1.0
                for name in self.rss_peak:
                    self.rss_peak[name] = max(self.rss_peak[name], component_usage(self.env, name)[1])
            self._stop.wait(SAMPLE_SECONDS)


def check_times(pg: Any, start: float, end: float) -> list[tuple[str, float]]:
    """Every check the sensors made in [start, end]: (condition, epoch seconds), as the database saw it."""
    with pg.cursor() as cur:
        cur.execute("SELECT cond, at FROM checks WHERE at >= %s AND at <= %s ORDER BY at", (start, end))
        return [(str(cond), float(at)) for cond, at in cur.fetchall()]


def checks_per_cycle(checks: list[tuple[str, float]], start: float, end: float, period: float) -> list[int]:
    """Checks in each full ``period``-second window (aligned to the epoch grid the schedules use) in
    [start, end], from the checks' own timestamps."""
    import math

    first = math.ceil(start / period) * period
    windows = []
    edge = first
    while edge + period <= end:
        windows.append(sum(1 for _, at in checks if edge <= at < edge + period))
        edge += period
    return windows


def busiest_condition_cycle(checks: list[tuple[str, float]], start: float, end: float, period: float) -> int:
    """The most checks one condition got in one full window: 1 when every condition is checked once per cycle."""
    conditions = {cond for cond, _ in checks}
    return (
        max(
            (max(checks_per_cycle([c for c in checks if c[0] == cond], start, end, period), default=0))
            for cond in conditions
        )
        if conditions
        else 0
    )


def measure_path(env: Any, pg: Any, path: str, runs: int, tasks: int, starts_file: Path, tiny: bool) -> dict:
    dag_id = f"bench_zw_{path}"
    n = runs * tasks
    with pg.cursor() as cur:
        cur.execute("UPDATE conditions SET ok = false")
    cpu0 = {name: component_usage(env, name)[0] for name in ("triggerer", "scheduler")}
    sampler = Sampler(env, dag_id, n)
    sampler.start()
    created = time.time()
    run_ids = [env.trigger(dag_id) for _ in range(runs)]
    budget = 300 if tiny else 1800
    while sampler.all_waiting_at is None:
        if time.time() - created > budget:
            break
        env.check_components()
        time.sleep(1)
    all_waiting = sampler.all_waiting_at
    hold = (2 if tiny else WAIT_CYCLES) * POKE_INTERVAL_FOR[tiny]
    time.sleep(hold + 1)
    true_at = time.time()
    with pg.cursor() as cur:
        cur.execute("UPDATE conditions SET ok = true")
    done_at = None
    while time.time() - true_at < budget:
        rows = env.query(
            "SELECT state, count(*) FROM task_instance WHERE dag_id = %s GROUP BY state", (dag_id,)
        )
        states = {str(state): int(count) for state, count in rows}
        if states.get("success", 0) + states.get("failed", 0) + states.get("skipped", 0) >= n:
            done_at = time.time()
            break
        env.check_components()
        time.sleep(1)
    time.sleep(2)
    sampler.stop()
    cpu1 = {name: component_usage(env, name)[0] for name in ("triggerer", "scheduler")}
    final = env.query("SELECT state, count(*) FROM task_instance WHERE dag_id = %s GROUP BY state", (dag_id,))
    lines = starts_file.read_text().splitlines() if starts_file.exists() else []
    starts = sum(1 for line in lines if f'"{dag_id}"' in line)
    period = POKE_INTERVAL_FOR[tiny]
    checks = check_times(pg, all_waiting + period, true_at) if all_waiting else []
    cycles = checks_per_cycle(checks, all_waiting + period, true_at, period) if all_waiting else []
    per_condition = (
        busiest_condition_cycle(checks, all_waiting + period, true_at, period) if all_waiting else 0
    )
    return {
        "path": path,
        "n": n,
        "runs": len(run_ids),
        "starts": starts,
        "occupied": sampler.occupied,
        "peak_running": sampler.peak_running,
        "cycles": cycles,
        "busiest_condition_cycle": per_condition,
        "to_all_waiting": (all_waiting - created) if all_waiting else None,
        "true_to_done": (done_at - true_at) if done_at else None,
        "states": {str(state): int(count) for state, count in final},
        "cpu": {name: cpu1[name] - cpu0[name] for name in cpu0},
        "rss_peak": dict(sampler.rss_peak),
    }


POKE_INTERVAL_FOR = {False: POKE_INTERVAL, True: 5}


def run_leg(metadata: str, tiny: bool) -> tuple[dict[str, dict], str, str]:

    sys.path.insert(0, str(REPO_ROOT))
    from airflow_harness.env import AirflowEnv

    server = pg_server()
    if not server:
        raise RuntimeError(f"set {PG_ENV} to a PostgreSQL server DSN (the condition database lives there)")
    runs, tasks, k = (2, 5, 2) if tiny else (RUNS, TASKS, K)
    baseline = 4 if tiny else BASELINE_TASKS
    paths = [("zero_worker", tasks, runs), ("worker_first", baseline, 1), ("reschedule", baseline, 1)]
    with tempfile.TemporaryDirectory(prefix="bench-zw-") as tmp:
        work = Path(tmp)
        starts_file = work / "starts.jsonl"
        params = {
            "starts": str(starts_file),
            "paths": paths,
            "k": k,
            "poke_interval": POKE_INTERVAL_FOR[tiny],
        }
        dag_files = bench_dag_files("bench_zero_worker", work, params)
        cond_dsn = prepare_condition_db(server, k, CONDITION_DB)
        import psycopg2

        pg = psycopg2.connect(cond_dsn)
        pg.autocommit = True
        capacity = str(max(1100, runs * tasks + 100))
        env = AirflowEnv(
            dag_files,
            pg_dsn=server if metadata == "postgresql" else "",
            parallelism=4 if tiny else 16,
            extra_env={
                "AIRFLOW_CONN_BENCH_ZW_PG": cond_dsn,
                "AIRFLOW__TRIGGERER__CAPACITY": capacity,  # 3.x
                "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": capacity,  # 2.11
                "AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY": "512",
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(runs * tasks),
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",  # the 3.3.2 race (docs/deferrable.md)
            },
        )
        measured: dict[str, dict] = {}
        with env:
            for _path, _tasks, _runs in paths:
                env.wait_for_dag(f"bench_zw_{_path}")
                env.unpause(f"bench_zw_{_path}")
            for _path, _tasks, _runs in paths:
                print(f"[bench_zero_worker] {metadata}: {_path} x{_runs * _tasks} ...", flush=True)
                measured[_path] = measure_path(env, pg, _path, _runs, _tasks, starts_file, tiny)
                print(f"[bench_zero_worker] {metadata}: {_path}: {measured[_path]}", flush=True)
            version, executor = env.airflow_version, env.executor
        pg.close()
    return measured, version, executor


def _fmt(value: float | None, digits: int = 1) -> str:
    return "not reached" if value is None else fmt_num(value, digits)


def run(tiny: bool) -> Result:
    legs = ("sqlite", "postgresql")
    k = 2 if tiny else K
    tables: list[Table] = []
    goals: list[Goal] = []
    notes: list[str] = []
    version = executor = ""
    for metadata in legs:
        try:
            measured, version, executor = run_leg(metadata, tiny)
        except Exception as err:  # one leg failing must not hide the other's numbers
            notes.append(f"{metadata} metadata DB: not measured ({type(err).__name__}: {err})")
            continue
        table = Table(
            [
                "path",
                "N",
                "task-process starts",
                "per sensor",
                "worker-seconds",
                "per sensor",
                "peak slots",
                "DB checks per cycle (median / max)",
                "one condition's most checks in a cycle",
                "creation → all wait",
                "true → all succeed",
                "triggerer CPU s / peak RSS",
                "scheduler CPU s / peak RSS",
                "end states",
            ],
            caption=f"Metadata DB: {metadata} (Airflow {version}, {executor}); K = {k} conditions.",
        )
        for path in PATHS:
            m = measured[path]
            cycles = m["cycles"]
            per_cycle = f"{statistics.median(cycles):g} / {max(cycles)}" if cycles else "no full cycle"
            table.add(
                path,
                m["n"],
                m["starts"],
                fmt_num(m["starts"] / m["n"], 2),
                fmt_num(m["occupied"], 1),
                fmt_num(m["occupied"] / m["n"], 2),
                m["peak_running"],
                per_cycle,
                m["busiest_condition_cycle"] if cycles else "-",
                _fmt(m["to_all_waiting"]) + " s",
                _fmt(m["true_to_done"]) + " s",
                f"{m['cpu']['triggerer']:.1f} / {m['rss_peak']['triggerer'] / 2**20:.0f} MiB",
                f"{m['cpu']['scheduler']:.1f} / {m['rss_peak']['scheduler'] / 2**20:.0f} MiB",
                ", ".join(f"{count} {state}" for state, count in sorted(m["states"].items())),
            )
        tables.append(table)
        zero = measured["zero_worker"]
        ok = zero["states"].get("success", 0) == zero["n"]
        met = None if tiny else (zero["starts"] == 0 and zero["occupied"] == 0.0)
        goals.append(
            Goal(
                f"[{metadata}] zero-worker: 0 task-process starts and 0 worker-seconds per successful wait",
                f"{zero['starts']} starts, {zero['occupied']:.1f} worker-seconds for {zero['n']} sensors "
                f"({zero['states'].get('success', 0)} succeeded)",
                met,
            )
        )
        cycles = zero["cycles"]
        goals.append(
            Goal(
                f"[{metadata}] checks per cycle at the database <= 1.2 x K = {1.2 * k:g}",
                f"max {max(cycles)} (median {statistics.median(cycles):g}) over {len(cycles)} full "
                f"{POKE_INTERVAL_FOR[tiny]} s cycles while all {zero['n']} waited; one condition's most in a "
                f"cycle: {zero['busiest_condition_cycle']}"
                if cycles
                else "no full cycle while all waited",
                None if tiny or not cycles else max(cycles) <= 1.2 * k,
            )
        )
        goals.append(
            Goal(
                f"[{metadata}] all {zero['n']} zero-worker sensors succeed",
                f"{zero['states'].get('success', 0)} of {zero['n']}",
                None if tiny else ok,
            )
        )
    notes.append(
        f"N = {RUNS if not tiny else 2} runs x {TASKS if not tiny else 5} tasks on the zero-worker path; "
        f"baselines at N = {BASELINE_TASKS if not tiny else 4} (one run; a task-process start costs seconds of "
        "CPU on this 2-core machine): compare them per sensor. Fixed interval "
        f"{POKE_INTERVAL_FOR[tiny]} s (`exponential_backoff=False`), full waits of {WAIT_CYCLES} cycles before "
        "the conditions come true. The machine is shared with other sessions (see the load average)."
    )
    return Result(
        key="zero_worker",
        title="Zero-worker waits at scale",
        question=(
            "With real Airflow, N = 1,000 deferrable sensors waiting on K = 10 SQL conditions: how many task "
            "processes and worker-seconds does the zero-worker path cost, how many checks reach the database "
            "per cycle, how fast do all wait and all finish — against worker-first deferral and reschedule mode?"
        ),
        method=(
            "One real Airflow per metadata DB (SQLite file, then PostgreSQL; scheduler, dag-processor, "
            "triggerer with capacity >= N, api-server; LocalExecutor, parallelism 16) from the test harness; "
            "the three paths one after another; task-process starts counted by `on_execute_callback`, slot "
            "time integrated from `running` task instances, every check recorded with the database's clock by "
            "the SQL function the sensors call, CPU/RSS from /proc (psutil). One run per path."
        ),
        tables=tables,
        goals=goals,
        notes=notes,
    )


if __name__ == "__main__":
    script_main(run)
