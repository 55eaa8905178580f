"""Shared helpers for the benchmark scripts: timing, medians and ratios, results and the markdown writer.

Every script in ``bench/`` exposes ``run(tiny: bool) -> Result`` and a ``main()`` that writes the result as
JSON (``--json PATH``); ``bench/run_all.py`` runs each script in a fresh process and renders
``docs/benchmarks.md``. The machine is shared and noisy, so comparisons are ratios measured within one run
(candidates interleaved in every repeat) and every figure is a median over repeats.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


# --- statistics --------------------------------------------------------------------------------------
def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); no interpolation, so the value was actually observed."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[rank - 1])


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.inf


# --- timing ------------------------------------------------------------------------------------------
def calls_for(fn: Callable[[], object], budget_seconds: float) -> int:
    """How many calls of ``fn`` fill roughly ``budget_seconds`` (at least 1)."""
    number = 1
    while True:
        started = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - started
        if elapsed >= budget_seconds / 4 or number >= 1 << 22:
            return max(1, int(number * budget_seconds / max(elapsed, 1e-9)))
        number *= 4


def seconds_per_call(fn: Callable[[], object], number: int) -> float:
    started = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - started) / number


def interleaved_per_call(
    candidates: dict[str, Callable[[], object]], repeats: int, budget_seconds: float
) -> dict[str, list[float]]:
    """Seconds per call of each candidate, ``repeats`` times, candidates interleaved in every repeat.

    Interleaving means a burst of load on the shared machine hits all candidates of one repeat alike, so
    the per-repeat ratio stays meaningful even when absolute times move.
    """
    numbers = {name: calls_for(fn, budget_seconds) for name, fn in candidates.items()}
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for repeat in range(repeats):
        names = list(candidates)
        if repeat % 2:  # alternate the order so neither end of a repeat is favoured
            names.reverse()
        for name in names:
            samples[name].append(seconds_per_call(candidates[name], numbers[name]))
    return samples


def median_ratio(samples: dict[str, list[float]], name: str, baseline: str) -> float:
    """Median over repeats of (candidate / baseline) measured in the same repeat."""
    return median([ratio(a, b) for a, b in zip(samples[name], samples[baseline], strict=True)])


# --- formatting --------------------------------------------------------------------------------------
def fmt_seconds(seconds: float) -> str:
    if math.isinf(seconds) or math.isnan(seconds):
        return str(seconds)
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e9:.0f} ns"


def fmt_ratio(value: float) -> str:
    if math.isinf(value) or math.isnan(value):
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}×"
    if value >= 10:
        return f"{value:.1f}×"
    return f"{value:.2f}×"


def fmt_num(value: float, digits: int = 1) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


# --- results -----------------------------------------------------------------------------------------
@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"row has {len(cells)} cells, table has {len(self.headers)} columns")
        self.rows.append([str(cell) for cell in cells])


@dataclass
class Goal:
    text: str
    measured: str
    met: bool | None  # None: could not be measured in this run (said why in ``measured``)


@dataclass
class Result:
    key: str
    title: str
    question: str
    method: str
    tables: list[Table] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Result:
        data = json.loads(text)
        data["tables"] = [Table(**table) for table in data["tables"]]
        data["goals"] = [Goal(**goal) for goal in data["goals"]]
        return cls(**data)


def verdict(met: bool | None) -> str:
    return {True: "**met**", False: "**MISSED**", None: "**not measured**"}[met]


def render_markdown_table(table: Table) -> str:
    lines = []
    if table.caption:
        lines += [table.caption, ""]
    lines.append("| " + " | ".join(table.headers) + " |")
    lines.append("|" + "|".join(" --- " for _ in table.headers) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return "\n".join(lines)


def render_result(result: Result, number: int) -> str:
    parts = [f"## {number}. {result.title}", "", f"**Question.** {result.question}", ""]
    parts += [f"**Method.** {result.method}", ""]
    for table in result.tables:
        parts += [render_markdown_table(table), ""]
    if result.goals:
        parts += ["**Goals.**", ""]
        parts += [f"- {verdict(goal.met)} — {goal.text}: {goal.measured}" for goal in result.goals]
        parts.append("")
    for note in result.notes:
        parts += [f"> {note}", ""]
    parts += [f"_Script wall time: {result.seconds:.1f} s._", ""]
    return "\n".join(parts)


# --- machine description -------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def machine_description() -> dict[str, str]:
    import airflow

    try:
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        load = "unknown"
    return {
        "CPU": f"{_cpu_model()} — {os.cpu_count()} logical CPUs",
        "Memory": _memory_gib(),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "Airflow": airflow.__version__,
        "Load average (1/5/15 min) at start": load,
    }


# --- measuring processes -------------------------------------------------------------------------------
def rss_bytes() -> int:
    """RSS of this process, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def fake_ti(index: int) -> SimpleNamespace:
    """What run_trigger reads from trigger.task_instance for logging/tracing (both 2.11 and 3.x)."""
    return SimpleNamespace(
        id=f"bench-{index}",
        dag_id="bench_triggerer",
        task_id=f"wait_{index}",
        run_id="bench",
        try_number=1,
        map_index=-1,
        context_carrier=None,
        trigger_timeout=None,
    )


def peak_in_window(times: list[float], width: float, not_before: float = 0.0) -> int:
    """Largest number of times inside any half-open window [x, x + width) with x >= not_before."""
    ordered = sorted(t for t in times if t >= not_before)
    best = 0
    low = 0
    for high, at in enumerate(ordered):
        while ordered[low] <= at - width:
            low += 1
        best = max(best, high - low + 1)
    return best


def component_usage(env: Any, name: str) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a component: the triggerer's whole tree (its trigger runner is a child),
    the scheduler's own process (its LocalExecutor workers run task code: counted as worker time)."""
    import psutil

    component = env.components.get(name)
    if component is None or component.process.poll() is not None:
        return 0.0, 0
    try:
        main = psutil.Process(component.process.pid)
        procs = [main] + (main.children(recursive=True) if name == "triggerer" else [])
        cpu = rss = 0
        for proc in procs:
            try:
                times = proc.cpu_times()
                cpu += times.user + times.system
                rss += proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return float(cpu), int(rss)
    except psutil.NoSuchProcess:
        return 0.0, 0


# --- real Airflow: DAG files, PostgreSQL, conditions ------------------------------------------------------
BENCH_DAGS_DIR = REPO_ROOT / "bench" / "dags"
PG_ENV = "SMART_EXT_BENCH_PG_DSN"  # a PostgreSQL server for condition databases and metadata DBs


def pg_server() -> str:
    """The benches' PostgreSQL server DSN (``SMART_EXT_BENCH_PG_DSN``, else the tests' server, else "")."""
    return os.environ.get(PG_ENV) or os.environ.get("SMART_EXT_TEST_PG_DSN", "")


def bench_dag_files(
    template: str, folder: Path, params: dict[str, Any], name: str | None = None
) -> list[Path]:
    """``bench/dags/<template>.py`` as ``<folder>/<name>.py`` with its parameters in ``<name>.json`` next to
    it (the DAG file reads them), plus the helper module it imports: the ``dag_sources`` of an AirflowEnv."""
    name = name or template
    dag_file = folder / f"{name}.py"
    shutil.copyfile(BENCH_DAGS_DIR / f"{template}.py", dag_file)
    dag_file.with_suffix(".json").write_text(json.dumps(params))
    return [BENCH_DAGS_DIR / "bench_dag_support.py", dag_file, dag_file.with_suffix(".json")]


def fresh_pg_database(server_dsn: str, name: str) -> str:
    """Drop and create database ``name`` on the PostgreSQL server of ``server_dsn``; its DSN."""
    import psycopg2

    admin = psycopg2.connect(server_dsn)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
            cur.execute(f"CREATE DATABASE {name}")
    finally:
        admin.close()
    return server_dsn.rsplit("/", 1)[0] + f"/{name}"


def prepare_condition_db(server_dsn: str, k: int, name: str) -> str:
    """A fresh condition database: K conditions ``c0..`` (all false) and ``bench_check(cond)``, the function
    the sensors' SQL calls, which records every check with the database's clock; its DSN."""
    import psycopg2

    dsn = fresh_pg_database(server_dsn, name)
    pg = psycopg2.connect(dsn)
    pg.autocommit = True
    try:
        with pg.cursor() as cur:
            cur.execute("CREATE TABLE conditions (cond text PRIMARY KEY, ok boolean NOT NULL)")
            cur.executemany("INSERT INTO conditions VALUES (%s, false)", [(f"c{i}",) for i in range(k)])
            cur.execute("CREATE TABLE checks (cond text NOT NULL, at double precision NOT NULL)")
            cur.execute(
                "CREATE FUNCTION bench_check(c text) RETURNS boolean LANGUAGE sql VOLATILE AS $$ "
                "INSERT INTO checks VALUES (c, extract(epoch FROM clock_timestamp())); "
                "SELECT ok FROM conditions WHERE cond = c; $$"
            )
    finally:
        pg.close()
    return dsn


class Conditions:
    """The condition database of ``prepare_condition_db``: flip every condition, read the checks."""

    def __init__(self, dsn: str) -> None:
        import psycopg2

        self.pg = psycopg2.connect(dsn)
        self.pg.autocommit = True

    def set(self, ok: bool) -> None:
        with self.pg.cursor() as cur:
            cur.execute("UPDATE conditions SET ok = %s", (ok,))

    def checks(self, start: float, end: float) -> list[tuple[str, float]]:
        with self.pg.cursor() as cur:
            cur.execute("SELECT cond, at FROM checks WHERE at >= %s AND at < %s", (start, end))
            return [(str(cond), float(at)) for cond, at in cur.fetchall()]


def per_cycle(
    checks: list[tuple[str, float]], start: float, end: float, k: int, period: float
) -> tuple[float, int]:
    """(checks per condition per cycle over [start, end), the most checks one condition got in one full
    ``period`` window of the epoch grid the schedules use)."""
    if end <= start:
        return math.nan, 0
    mean = len(checks) / k / ((end - start) / period)
    first = math.ceil(start / period) * period
    per_window: collections.Counter[tuple[str, int]] = collections.Counter(
        (cond, int((at - first) // period))
        for cond, at in checks
        if first <= at < first + period * ((end - first) // period)
    )
    return mean, max(per_window.values(), default=0)


# --- script entry point ----------------------------------------------------------------------------------


def script_main(run: Callable[[bool], Result]) -> None:
    """Common ``main()``: ``--tiny`` for a smoke-sized run, ``--json PATH`` to write the result."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true", help="smoke-test sizes (seconds, not minutes)")
    parser.add_argument("--json", type=Path, help="write the Result as JSON to this path")
    args = parser.parse_args()
    started = time.perf_counter()
    result = run(args.tiny)
    result.seconds = time.perf_counter() - started
    if args.json:
        args.json.write_text(result.to_json())
    else:
        sys.stdout.write(render_result(result, 0) + "\n")
