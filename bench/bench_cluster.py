"""Question — 10,000 zero-worker waits in one cluster (issue 25, part 5): the §9 benchmark grown to N = 10,000
``BackoffSqlSensor(deferrable=True)`` waits on K = 10 conditions over T = 2 triggerers on PostgreSQL. Do all
start in the triggerer (0 task-process starts), how many checks per condition per cycle reach the polled
database, do all succeed — and what does each 1,000 waits cost the triggerers (CPU, RSS), the scheduler and the
metadata database?

One real Airflow (``airflow_harness/env.py`` ``AirflowEnv(triggerers=2)``: scheduler, dag-processor, two
triggerers, api-server; LocalExecutor; PostgreSQL metadata DB; the harness's 0.1 s state sampler off: it would
read all N task instances ten times a second). ``RUNS`` runs x ``TASKS`` tasks of one DAG; task i waits on
condition i mod K (fixed ``POKE_INTERVAL``, no growth, no jitter). Each triggerer's capacity is 60 % of N, so
both must hold waits (a deployment at Airflow's default capacity of 1,000 would need 10 triggerers).

Measured:
* **task-process starts**: exact; ``on_execute_callback`` appends a line per execution in a task process;
  plus task instances with a ``queued_dttm`` or ``hostname`` (a worker phase);
* **until all wait**: every wait held by a triggerer at once (``trigger.triggerer_id``) *and* started (its
  ``.trigger.<id>.log`` written: Airflow 3.x), polled every 5 s; the window opens one cycle later;
* **checks per condition per cycle**: every check recorded with the database's clock by ``bench_check``; full
  ``POKE_INTERVAL`` windows of the waiting window, and the condition-cycles that got no check (late checks are
  skipped, which also lowers the count);
* **moves** (a trigger held by another triggerer at a later 5 s sample) and **withheld heartbeats** (Airflow
  3.2.2+ logs them when the trigger runner is silent longer than ``[triggerer] runner_health_check_threshold``)
  per phase: creation, waiting, ending;
* **triggerer CPU and memory per 1,000 waits**: each triggerer's process tree (psutil): CPU from creation
  until all started and per minute of the waiting window (the runner's share apart); RSS above its idle value
  (supervisor and runner apart) and USS (pages the tree alone uses), per 1,000 waits it held (the mean of the
  window's start and end: moves change it); machine memory used and the scheduler's peak;
* **scheduler CPU** (its own process) and **metadata-DB load** (``pg_stat_database`` of the metadata DB:
  transactions, rows read and written per second) in the waiting window, against the same Airflow idle before
  the runs were created.

Runs standalone (not in ``run_all.py``): ~16 GiB and up to an hour at N = 10,000.
``SMART_EXT_CLUSTER_RUNS`` sets the runs (N = 100 x runs), ``SMART_EXT_CLUSTER_ENV`` (JSON) extra Airflow
settings, e.g. ``{"AIRFLOW__TRIGGERER__RUNNER_HEALTH_CHECK_THRESHOLD": "300"}``.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchlib import (
    PG_ENV,
    REPO_ROOT,
    Conditions,
    Goal,
    Result,
    Table,
    bench_dag_files,
    per_cycle,
    pg_server,
    prepare_condition_db,
    script_main,
)

RUNS, TASKS, K = 100, 100, 10
POKE_INTERVAL = 30
WAIT_CYCLES = 6  # the first one after all wait is not counted
IDLE_SECONDS = 60  # the cluster idle before the runs: the baseline of every load figure
HOLD_BUDGET = (
    1200  # seconds for every wait to be held by a triggerer at once; measured on regardless after it
)
CONDITION_DB = "ha_bench_conditions"
DAG_ID = "bench_cluster"
TRIGGERERS = ("triggerer", "triggerer-2")
PG_COUNTERS = ("xact_commit", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated", "tup_deleted")


def usage(env: Any, name: str, part: str = "all") -> tuple[float, int]:
    """(CPU seconds, RSS bytes): a triggerer's whole process tree (``part="main"``: its supervisor, which
    talks to the DB; ``"children"``: its trigger runner, where the triggers run, and serve-logs); the
    scheduler's own process (its LocalExecutor workers would be task processes)."""
    import psutil

    component = env.components.get(name)
    if component is None or component.process.poll() is not None:
        return 0.0, 0
    try:
        main = psutil.Process(component.process.pid)
        children = main.children(recursive=True) if name in TRIGGERERS else []
        procs = {"all": [main, *children], "main": [main], "children": children}[part]
    except psutil.NoSuchProcess:
        return 0.0, 0
    cpu, rss = 0.0, 0
    for proc in procs:
        try:
            times = proc.cpu_times()
            cpu += times.user + times.system
            rss += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return cpu, rss


def memory(env: Any, name: str) -> dict[str, int]:
    """A triggerer's memory: RSS of its supervisor (``main``) and of its children (trigger runner, serve-logs),
    and the USS of the whole tree (pages only it uses: a forked child's shared pages are not counted twice)."""
    import psutil

    out = {"main_rss": 0, "children_rss": 0, "uss": 0}
    component = env.components.get(name)
    if component is None or component.process.poll() is not None:
        return out
    try:
        main = psutil.Process(component.process.pid)
        tree = [(main, "main_rss")] + [(child, "children_rss") for child in main.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for proc, key in tree:
        try:
            info = proc.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        out[key] += info.rss
        out["uss"] += info.uss
    return out


def machine_used() -> int:
    import psutil

    return int(psutil.virtual_memory().used)


class PeakRss:
    """Each component's peak RSS, sampled every 2 s in a thread."""

    def __init__(self, env: Any, names: tuple[str, ...]) -> None:
        self.env, self.peak = env, dict.fromkeys(names, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(2.0):
            for name in self.peak:
                used = machine_used() if name == "machine" else usage(self.env, name)[1]
                self.peak[name] = max(self.peak[name], used)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join(timeout=10)
        return dict(self.peak)


def pg_counters(env: Any) -> dict[str, int]:
    row = env.query_dicts(
        f"SELECT {', '.join(PG_COUNTERS)} FROM pg_stat_database WHERE datname = current_database()"
    )[0]
    return {key: int(row[key]) for key in PG_COUNTERS}


class Load:
    """Scheduler CPU and metadata-DB counters over a window, per second."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.at, self.cpu, self.db = time.time(), usage(env, "scheduler")[0], pg_counters(env)

    def rates(self) -> dict[str, float]:
        seconds = time.time() - self.at
        db = pg_counters(self.env)
        rates = {key: (db[key] - self.db[key]) / seconds for key in PG_COUNTERS}
        rates["scheduler_cpu"] = (usage(self.env, "scheduler")[0] - self.cpu) / seconds
        return rates


class Owners:
    """Which triggerer holds each deferred wait's trigger; moves per phase (a trigger that another triggerer
    holds at a later sample: Airflow reassigns the triggers of a triggerer whose heartbeat went stale).
    Sampled every 5 s; a move there and back between two samples is not seen."""

    def __init__(self, env: Any) -> None:
        self.env, self.last, self.phase = env, dict[int, int](), "creation"
        self.moves: collections.Counter[str] = collections.Counter()
        self.names = {c.job_id: name for name, c in env.components.items() if c.job_id is not None}

    def sample(self) -> dict[str, int]:
        rows = self.env.query(
            'SELECT t.id, t.triggerer_id FROM task_instance ti JOIN "trigger" t ON t.id = ti.trigger_id '
            "WHERE ti.state = 'deferred'"
        )
        for trigger_id, owner in rows:
            before = self.last.get(trigger_id)
            if owner is not None:
                self.moves[self.phase] += before is not None and before != owner
                self.last[trigger_id] = owner
        return dict(
            collections.Counter("unassigned" if o is None else self.names.get(o, f"job {o}") for _, o in rows)
        )

    def watch(self, seconds: float) -> None:
        """Sample every 5 s for ``seconds``."""
        end = time.time() + seconds
        while (left := end - time.time()) > 0:
            time.sleep(min(5.0, left))
            self.sample()


def started(env: Any) -> int:
    """Triggers that have started running: each writes its first log line when its ``run`` starts, into a
    ``.trigger.<id>.log`` file beside its task's log (Airflow 3.x)."""
    return sum(1 for _ in env.log_folder.glob("dag_id=*/run_id=*/task_id=*/attempt=*.log.trigger.*.log"))


def _hold_all(env: Any, owners: Owners, n: int) -> tuple[dict[str, int] | None, float | None]:
    """Poll every 5 s until all ``n`` waits are held by a triggerer at once, then until all have started
    running; within HOLD_BUDGET. (per-triggerer counts or None, seconds until all started or None)."""
    began, deadline = time.time(), time.time() + HOLD_BUDGET
    held = None
    while time.time() < deadline:
        counts = owners.sample()
        if held is None and sum(counts.values()) >= n and "unassigned" not in counts:
            held = counts
        if held is not None and started(env) >= n:
            return held, time.time() - began
        print(f"[bench_cluster] {time.time() - began:.0f} s: {counts}, {started(env)} started", flush=True)
        env.check_components()
        time.sleep(5)
    return held, None


def withheld(env: Any, phases: dict[str, tuple[float, float]]) -> dict[str, dict[str, int]]:
    """Per triggerer and phase, how often its supervisor withheld heartbeats (Airflow 3.2.2+ logs it once per
    silence of the trigger runner longer than ``[triggerer] runner_health_check_threshold``)."""
    out = {}
    for name in TRIGGERERS:
        counts = dict.fromkeys(phases, 0)
        for line in env.component_log(name).splitlines():
            if "appears deadlocked" not in line:
                continue
            at = dt.datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00")).timestamp()
            for phase, (start, end) in phases.items():
                counts[phase] += start <= at < end
        out[name] = counts
    return out


def unchecked(checks: list[tuple[str, float]], start: float, end: float, period: float) -> tuple[int, int]:
    """(condition-cycles without a check, all condition-cycles) over the full ``period`` windows of the epoch
    grid in [start, end): a late triggerer skips missed checks, which lowers the count of checks too."""
    first = math.ceil(start / period) * period
    windows = int((end - first) // period)
    seen = {
        (cond, int((at - first) // period)) for cond, at in checks if first <= at < first + windows * period
    }
    return K * windows - len(seen), K * windows


def _ended(env: Any, n: int) -> bool:
    rows = env.query(
        "SELECT count(*) FROM task_instance WHERE state IN ('success', 'failed', 'skipped', 'upstream_failed')"
    )
    return int(rows[0][0]) >= n


def run_cluster(
    work: Path, server: str, cond_dsn: str, runs: int, tasks: int, interval: float, extra_env: dict[str, str]
) -> dict:
    sys.path.insert(0, str(REPO_ROOT))
    from airflow_harness.env import AirflowEnv

    n = runs * tasks
    starts = work / "starts.jsonl"
    params = {"starts": str(starts), "dag_id": DAG_ID, "tasks": tasks, "runs": runs, "n": n, "k": K}
    dag_files = bench_dag_files("bench_cluster", work, {**params, "interval": interval})
    cond = Conditions(cond_dsn)
    cond.set(False)
    capacity = max(n * 6 // 10, 10)
    env = AirflowEnv(
        dag_files,
        pg_dsn=server,
        parallelism=8,
        triggerers=2,
        state_sample_interval=None,
        extra_env={
            "AIRFLOW_CONN_BENCH_CLUSTER_PG": cond_dsn,
            "AIRFLOW__TRIGGERER__CAPACITY": str(capacity),
            "AIRFLOW__TRIGGERER__DEFAULT_CAPACITY": str(capacity),
            "AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY": "512",
            "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": str(runs),
            **extra_env,
        },
    )
    m: dict[str, Any] = {
        "n": n,
        "runs": runs,
        "tasks": tasks,
        "k": K,
        "interval": interval,
        "capacity": capacity,
        "extra_env": extra_env,
    }
    with env:
        m["version"] = env.airflow_version
        env.wait_for_dag(DAG_ID)
        env.unpause(DAG_ID)
        time.sleep(IDLE_SECONDS / 2)  # let the start-up settle, then measure the idle cluster
        idle = Load(env)
        time.sleep(IDLE_SECONDS / 2)
        m["idle"] = idle.rates()
        idle_memory = {name: memory(env, name) for name in TRIGGERERS}
        m["machine_idle"] = machine_used()
        before = {name: usage(env, name) for name in (*TRIGGERERS, "scheduler")}
        peak = PeakRss(env, (*TRIGGERERS, "scheduler", "machine"))
        created = time.time()
        for _ in range(runs):
            env.trigger(DAG_ID)
        owners = Owners(env)
        held, m["to_all_started"] = _hold_all(env, owners, n)
        all_waiting = time.time()
        m["held"] = held = held or owners.sample()
        at_waiting = {name: usage(env, name) for name in (*TRIGGERERS, "scheduler")}
        print(
            f"[bench_cluster] after {all_waiting - created:.0f} s: {held}, moves {dict(owners.moves)}",
            flush=True,
        )
        owners.phase = "waiting"
        owners.watch(interval)  # the first cycle after all started may still be settling: not counted
        window_start, waiting = time.time(), Load(env)
        held = m["held_window_start"] = owners.sample()  # what the per-1,000 figures divide by
        cpu0 = {name: usage(env, name)[0] for name in TRIGGERERS}
        runner0 = {name: usage(env, name, "children")[0] for name in TRIGGERERS}
        owners.watch((WAIT_CYCLES - 1) * interval)
        window_end = time.time()
        m["waiting"] = waiting.rates()
        held_after = m["held_after_window"] = owners.sample()
        after = {name: usage(env, name) for name in TRIGGERERS}
        m["machine_waiting"] = machine_used()
        m["triggerers"] = {
            name: {
                "held": held.get(name, 0),
                "held_after": held_after.get(name, 0),
                "memory_idle": idle_memory[name],
                "memory_waiting": memory(env, name),
                "create_cpu": at_waiting[name][0] - before[name][0],
                "wait_cpu_per_min": (after[name][0] - cpu0[name]) / (window_end - window_start) * 60,
                "wait_cpu_runner_per_min": (usage(env, name, "children")[0] - runner0[name])
                / (window_end - window_start)
                * 60,
                "idle_rss": before[name][1],
                "waiting_rss": after[name][1],
            }
            for name in TRIGGERERS
        }
        m["scheduler_create_cpu"] = at_waiting["scheduler"][0] - before["scheduler"][0]
        checks = cond.checks(window_start, window_end)
        m["per_cycle"] = per_cycle(checks, window_start, window_end, K, interval)
        m["checks_per_cycle"] = len(checks) / ((window_end - window_start) / interval)
        m["unchecked"] = unchecked(checks, window_start, window_end, interval)
        true_at = time.time()
        cond.set(True)
        owners.phase = "ending"
        env.poll(
            lambda: owners.sample() is not None and _ended(env, n), 3600, f"all {n} waits ending", interval=5
        )
        m["true_to_done"] = time.time() - true_at
        m["moves"] = dict(owners.moves)
        m["peak_rss"] = peak.stop()
        rows = env.query_dicts("SELECT state, try_number, queued_dttm, hostname FROM task_instance")
        m["states"] = dict(collections.Counter(str(r["state"]) for r in rows))
        m["tries"] = dict(collections.Counter(int(r["try_number"]) for r in rows))
        m["worker_phase"] = sum(1 for r in rows if r["queued_dttm"] is not None or r["hostname"])
        m["starts"] = len(starts.read_text().splitlines()) if starts.exists() else 0
        # Airflow 3.2.2+: a trigger runner silent for [triggerer] runner_health_check_threshold stops heartbeats.
        m["heartbeats_withheld"] = withheld(
            env,
            {
                "creation": (created, window_start),
                "waiting": (window_start, true_at),
                "ending": (true_at, time.time() + 1),
            },
        )
    print(f"[bench_cluster] {json.dumps(m, default=str)}", flush=True)
    return m


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def run(tiny: bool) -> Result:
    server = pg_server()
    if not server:
        raise RuntimeError(f"set {PG_ENV} to a PostgreSQL server DSN (two triggerers need PostgreSQL)")
    runs = int(os.environ.get("SMART_EXT_CLUSTER_RUNS", 2 if tiny else RUNS))
    tasks, interval = (10, 10.0) if tiny else (TASKS, float(POKE_INTERVAL))
    # e.g. SMART_EXT_CLUSTER_ENV='{"AIRFLOW__TRIGGERER__RUNNER_HEALTH_CHECK_THRESHOLD": "300"}'
    extra_env = json.loads(os.environ.get("SMART_EXT_CLUSTER_ENV", "{}"))
    cond_dsn = prepare_condition_db(server, K, CONDITION_DB)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        m = run_cluster(Path(tmp), server, cond_dsn, runs, tasks, interval, extra_env)
    n = m["n"]

    per_trig = Table(
        [
            "triggerer",
            "waits held",
            "CPU from creation until all started",
            "per 1,000",
            "CPU while waiting",
            "per 1,000",
            "RSS idle → all waiting (supervisor + runner)",
            "per 1,000 waits",
            "USS per 1,000 waits",
            "peak RSS",
        ],
        caption=(
            f"Airflow {m['version']}, PostgreSQL, T = 2 (capacity {m['capacity']} each): N = {n} zero-worker waits "
            f"({m['runs']} runs x {m['tasks']} tasks), K = {K}, fixed {m['interval']:.0f} s interval."
        ),
    )
    for name, t in m["triggerers"].items():
        thousands = max((t["held"] + t["held_after"]) / 2, 1) / 1000  # the window's start and end: the mean
        grown = t["waiting_rss"] - t["idle_rss"]
        idle_mem, waiting_mem = t["memory_idle"], t["memory_waiting"]
        per_trig.add(
            name,
            f"{t['held']} → {t['held_after']}",
            f"{t['create_cpu']:.0f} s",
            f"{t['create_cpu'] / thousands:.1f} s",
            f"{t['wait_cpu_per_min']:.1f} s/min (runner {t['wait_cpu_runner_per_min']:.1f})",
            f"{t['wait_cpu_per_min'] / thousands:.2f} s/min",
            f"{_mib(t['idle_rss'])} → {_mib(t['waiting_rss'])} "
            f"({_mib(waiting_mem['main_rss'])} + {_mib(waiting_mem['children_rss'])})",
            _mib(grown / thousands),
            _mib((waiting_mem["uss"] - idle_mem["uss"]) / thousands),
            _mib(m["peak_rss"][name]),
        )
    load = Table(["measure", "idle cluster", f"all {n} waiting"])
    load.add(
        "scheduler CPU (share of one core)",
        f"{m['idle']['scheduler_cpu']:.1%}",
        f"{m['waiting']['scheduler_cpu']:.1%}",
    )
    for key in PG_COUNTERS:
        load.add(f"metadata DB {key} per s", f"{m['idle'][key]:,.0f}", f"{m['waiting'][key]:,.0f}")
    outcome = Table(["measure", "value"])
    outcome.add(
        "creation → all held by a triggerer and started",
        f"not within {HOLD_BUDGET} s (held then: {m['held']})"
        if m["to_all_started"] is None
        else f"{m['to_all_started']:.0f} s",
    )
    outcome.add(
        "triggers moved between triggerers, per phase (5 s samples)",
        ", ".join(f"{phase} {m['moves'].get(phase, 0)}" for phase in ("creation", "waiting", "ending")),
    )
    outcome.add(
        "heartbeats withheld (runner silent > [triggerer] runner_health_check_threshold), per phase",
        "; ".join(
            f"{name}: " + ", ".join(f"{phase} {count}" for phase, count in counts.items())
            for name, counts in m["heartbeats_withheld"].items()
        ),
    )
    outcome.add("scheduler CPU from creation until all started", f"{m['scheduler_create_cpu']:.0f} s")
    outcome.add(
        "machine memory used: idle → all waiting (peak)",
        f"{_mib(m['machine_idle'])} → {_mib(m['machine_waiting'])} ({_mib(m['peak_rss']['machine'])}); "
        f"scheduler peak RSS {_mib(m['peak_rss']['scheduler'])}",
    )
    mean, busiest = m["per_cycle"]
    outcome.add(
        "checks per cycle at the polled database (all conditions)",
        f"{m['checks_per_cycle']:.1f} for K = {K}: {mean:.2f} per condition; one condition's most {busiest}",
    )
    outcome.add("condition-cycles without a check (late checks skipped)", "{} of {}".format(*m["unchecked"]))
    outcome.add("conditions true → all ended", f"{m['true_to_done']:.0f} s")
    outcome.add("end states", ", ".join(f"{c} {s}" for s, c in sorted(m["states"].items())))
    outcome.add("try numbers", ", ".join(f"{c} on try {t}" for t, c in sorted(m["tries"].items())))
    outcome.add(
        "task-process starts / task instances with a worker phase", f"{m['starts']} / {m['worker_phase']}"
    )

    succeeded = m["states"].get("success", 0)
    goals = [
        Goal(
            f"{n} zero-worker waits: 0 task-process starts",
            f"{m['starts']} starts, {m['worker_phase']} task instances with a worker phase",
            None if tiny else m["starts"] == 0 and m["worker_phase"] == 0,
        ),
        Goal(
            f"checks per cycle <= 1.2 x K = {1.2 * K:.0f} (the whole cluster), every condition checked every cycle",
            f"{m['checks_per_cycle']:.1f} ({mean:.2f} per condition; one condition's most in a cycle {busiest}); "
            "{} of {} condition-cycles without a check".format(*m["unchecked"]),
            None if tiny else m["checks_per_cycle"] <= 1.2 * K and m["unchecked"][0] == 0,
        ),
        Goal(
            f"all {n} succeed, on their first try",
            f"{succeeded} of {n}; tries {m['tries']}",
            None if tiny else succeeded == n and set(m["tries"]) == {1},
        ),
    ]
    notes = [
        "Airflow settings changed for this run: "
        + (", ".join(f"{key}={value}" for key, value in m["extra_env"].items()) or "none (defaults)")
        + f"; each triggerer's capacity {m['capacity']}."
    ]
    return Result(
        key="cluster",
        title="10,000 zero-worker waits over two triggerers",
        question=(
            "N = 10,000 zero-worker deferrable sensors on K = 10 conditions over two triggerers on PostgreSQL: do all "
            "start in the triggerer and succeed, how many checks reach the polled database per cycle, and what "
            "does each 1,000 waits cost the triggerers, the scheduler and the metadata database?"
        ),
        method=(
            "Real Airflow from the test harness (`AirflowEnv(triggerers=2)`, LocalExecutor, parallelism 8, "
            "PostgreSQL metadata DB, state sampler off); task-process starts by `on_execute_callback`; every check "
            "recorded with the database's clock by the SQL function the sensors call; CPU and RSS of each "
            "component's process tree (psutil); metadata-DB load from `pg_stat_database`; one run."
        ),
        tables=[outcome, per_trig, load],
        goals=goals,
        notes=notes,
    )


if __name__ == "__main__":
    script_main(run)
