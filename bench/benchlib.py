"""Shared helpers for the benchmark scripts: timing, medians and ratios, results and the markdown writer.

Every script in ``bench/`` exposes ``run(tiny: bool) -> Result`` and a ``main()`` that writes the result as
JSON (``--json PATH``); ``bench/run_all.py`` runs each script in a fresh process and renders
``docs/benchmarks.md``. The machine is shared and noisy, so comparisons are ratios measured within one run
(candidates interleaved in every repeat) and every figure is a median over repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

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


# --- script entry point ----------------------------------------------------------------------------------
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
