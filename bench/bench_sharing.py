"""Question 6 — sharing: N = 1,000 waits on K = 10 distinct SQL conditions; how many queries hit the database?

Each mode (see ``MODES``) runs in a fresh child process holding N live ``BackoffTrigger``s
with ``"sql"`` checks (``conditions/spec.py``) against a real database — a SQLite file, and PostgreSQL when
``SMART_EXT_TEST_PG_DSN`` is set. Trigger ``i`` waits on condition ``i % K``; no condition ever becomes true,
so every trigger keeps checking. The triggers are driven by Airflow's own ``TriggerRunner.run_trigger`` (see
``bench_triggerer``); the connection comes from an ``AIRFLOW_CONN_*`` environment variable.

Real time is compressed by ``TIME_SCALE``: the production-default policy a user gets from
``BackoffSensor(poke_interval=60, max_wait=30 min)`` (read from the sensor, not re-typed here) is divided by
it, and so is the sharing window (``[smart_ext] sharing_window_seconds``, 5 s by default; its fraction of
the interval is scale-free). Every ratio that decides sharing is therefore the production one.

Counted at the database, independent of how the trigger is written: for SQLite, SQLite's own statement trace
callback on every connection the child process opens; for PostgreSQL, the server's scan counters of the
conditions table (``pg_stat_user_tables``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchlib import Goal, Result, Table, fake_ti, fmt_num, fmt_ratio, median, ratio, script_main

from airflow_smart_ext.wait_model.sharing import DEFAULT_SHARING_WINDOW_SECONDS

BENCH_DIR = Path(__file__).resolve().parent
TIME_SCALE = 100.0
CONDITIONS = 10
TRIGGERS = 1000
CONN_ID = "bench_sharing_db"
START_SPREAD_SECONDS = 30.0  # production seconds over which the N tasks start (a fan-out on a busy cluster)
UNSHARED = (False, "condition")
SENSOR_DEFERRED = (True, "condition")
MODES = (UNSHARED, (True, "task"), SENSOR_DEFERRED)
MODE_LABELS = {
    UNSHARED: "`share=False`, condition seed",
    (True, "task"): "`share=True`, task seeds (baseline: window only)",
    SENSOR_DEFERRED: "`share=True`, condition seed (as the sensor defers)",
}


def _production_policy() -> dict[str, Any]:
    """The policy of ``BackoffSensor(poke_interval=60, max_wait=1800)`` with every other default."""
    from poke_schedules import CAP_SECONDS, POKE_INTERVAL, our_policies

    policies, _source = our_policies()
    policy = next(policy for label, policy in policies.items() if label.endswith("(default)"))
    assert policy.initial == POKE_INTERVAL and policy.cap == CAP_SECONDS
    return dict(policy.to_dict())


def _scaled(policy: dict[str, Any], scale: float) -> dict[str, Any]:
    scaled = dict(policy)
    for key in ("initial", "cap", "splay"):
        if scaled.get(key) is not None:
            scaled[key] = float(scaled[key]) / scale
    return scaled


def _mean_interval_at_cap(policy: dict[str, Any]) -> float:
    """Mean gap between two checks of one trigger once its interval is at the cap (measured, not assumed)."""
    from airflow_smart_ext.backoff import BackoffPolicy

    backoff = BackoffPolicy.from_dict(policy)
    first, last = 100, 1100
    gaps = [
        (backoff.offset(f"probe-{n}", last) - backoff.offset(f"probe-{n}", first)) / (last - first)
        for n in range(20)
    ]
    return sum(gaps) / len(gaps)


def _sql_check(condition: int, placeholder: str) -> dict[str, Any]:
    return {
        "type": "sql",
        "conn_id": CONN_ID,
        "sql": f"SELECT ready FROM bench_conditions WHERE name = {placeholder}",
        "parameters": [f"condition_{condition}"],
        "hook_params": None,
        "selector": None,
        "success": None,
        "failure": None,
        "fail_on_empty": False,
    }


async def _child(
    share: bool,
    seeds: str,
    triggers: int,
    conditions: int,
    policy: dict[str, Any],
    warmup: float,
    window: float,
    placeholder: str,
    start_spread: float,
    pg_dsn: str | None = None,
) -> dict[str, Any]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from airflow.jobs.triggerer_job_runner import TriggerRunner

    from airflow_smart_ext.backoff import aligned_start, seeded_uniform
    from airflow_smart_ext.triggers import BackoffTrigger
    from airflow_smart_ext.wait_model.sharing import wait_seed

    counter = _install_sqlite_statement_counter()
    pg_before = _pg_table_scans(pg_dsn) if pg_dsn else 0
    runner = TriggerRunner()
    now = time.time()
    for index in range(triggers):
        check = _sql_check(index % conditions, placeholder)
        # Tasks start spread over START_SPREAD (scaled) before they defer, as a fan-out does.
        started = now - start_spread * seeded_uniform("bench_sharing", index, "start")
        if seeds == "task":  # one seed per task, anchored at its own start (as before the fix)
            seed, anchor = f"bench_sharing/wait_{index}/run", started
        else:  # what BackoffSensor(deferrable=True) passes: the condition's seed, the aligned anchor
            seed, anchor = wait_seed(check), aligned_start(started, policy["initial"])
        trigger = BackoffTrigger(
            check=check,
            policy=policy,
            seed=seed,
            started_at=anchor,
            deadline=None,
            after=0,
            share=share,
        )
        trigger.task_instance = fake_ti(index)
        runner.triggers[index] = {"task": None, "name": f"bench/{index}", "events": 0, "is_watcher": False}
        runner.triggers[index]["task"] = asyncio.create_task(runner.run_trigger(index, trigger))
        if index % 200 == 199:
            await asyncio.sleep(0)
    await asyncio.sleep(max(0.0, now + warmup - time.time()))
    before = counter["count"] + (await asyncio.to_thread(_pg_table_scans, pg_dsn) if pg_dsn else 0)
    await asyncio.sleep(window)
    after = counter["count"] + (await asyncio.to_thread(_pg_table_scans, pg_dsn) if pg_dsn else 0)
    in_window = after - before
    total = after - pg_before
    tasks = [details["task"] for details in runner.triggers.values()]
    alive = sum(1 for task in tasks if not task.done())
    events = [repr(entry)[:200] for entry in list(runner.events)[:3]]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "share": share,
        "seeds": seeds,
        "queries_total": total,
        "queries_window": in_window,
        "alive": alive,
        "events": events,
    }


def _install_sqlite_statement_counter() -> dict[str, int]:
    """Count, at the driver, every statement SQLite runs against the conditions table in this process.

    Every ``sqlite3.connect`` made afterwards (the SQLite hook calls it per check) gets SQLite's own trace
    callback, so the count does not depend on how the trigger is written.
    """
    counter = {"count": 0}
    real_connect = sqlite3.connect

    def trace(statement: str) -> None:
        if "bench_conditions" in statement:
            counter["count"] += 1

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = real_connect(*args, **kwargs)
        connection.set_trace_callback(trace)
        return connection

    sqlite3.connect = connect  # type: ignore[assignment]
    return counter


def _pg_table_scans(dsn: str) -> int:
    """PostgreSQL's own count of scans of the conditions table (sequential + index), all backends."""
    import psycopg2

    # Statistics are flushed by each backend at transaction end (<= 1 s late) and when it exits; the hook
    # opens a connection per check, so they are current within about a second.
    time.sleep(1.2)
    with psycopg2.connect(dsn) as db, db.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables "
            "WHERE relname = 'bench_conditions'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _prepare_sqlite(directory: Path, conditions: int) -> str:
    path = directory / "bench_sharing.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE bench_conditions (name TEXT PRIMARY KEY, ready INTEGER NOT NULL)")
        db.executemany(
            "INSERT INTO bench_conditions VALUES (?, 0)", [(f"condition_{i}",) for i in range(conditions)]
        )
    # Airflow's SQLite connection URI carries the absolute path, percent-encoded, as the host
    # (``sqlite://%2Ftmp%2Fx.db``); ``sqlite:////tmp/x.db`` is rejected by the hook ("invalid uri authority").
    return "sqlite://" + quote(str(path), safe="")


def _prepare_postgres(dsn: str, conditions: int) -> str:
    import psycopg2

    with psycopg2.connect(dsn) as db, db.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_conditions")
        cursor.execute("CREATE TABLE bench_conditions (name TEXT PRIMARY KEY, ready INTEGER NOT NULL)")
        cursor.executemany(
            "INSERT INTO bench_conditions VALUES (%s, 0)", [(f"condition_{i}",) for i in range(conditions)]
        )
    # Airflow connection URIs use the "postgres" scheme.
    return dsn.replace("postgresql://", "postgres://", 1)


def _run_child(
    mode: tuple[bool, str], conn_uri: str, placeholder: str, policy: dict[str, Any], sizes: dict[str, Any]
) -> dict[str, Any]:
    share, seeds = mode
    with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp:
        out = Path(tmp) / "out.json"
        env = dict(os.environ)
        env.setdefault("AIRFLOW_HOME", tmp)
        env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        env[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = conn_uri
        env["AIRFLOW__SMART_EXT__SHARING_WINDOW_SECONDS"] = str(
            DEFAULT_SHARING_WINDOW_SECONDS / sizes["scale"]
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))
        pg_dsn = os.environ.get("SMART_EXT_TEST_PG_DSN") if placeholder == "%s" else None
        arguments = {
            "share": share,
            "seeds": seeds,
            "policy": policy,
            "placeholder": placeholder,
            "pg_dsn": pg_dsn,
            **sizes,
        }
        proc = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(arguments), str(out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"share={share} seeds={seeds} child failed ({proc.returncode}): {proc.stderr[-3000:]}"
            )
        return json.loads(out.read_text())


def run(tiny: bool) -> Result:
    scale = 1000.0 if tiny else TIME_SCALE
    production = _production_policy()
    policy = _scaled(production, scale)
    cycle = _mean_interval_at_cap(policy)
    # Warm-up: long enough for the interval to reach the cap; then measure whole cycles at the cap.
    from airflow_smart_ext.backoff import BackoffPolicy

    to_cap = BackoffPolicy.from_dict(policy).offset("probe", 2 if tiny else 12)
    sizes = {
        "scale": scale,
        "triggers": 20 if tiny else TRIGGERS,
        "conditions": 4 if tiny else CONDITIONS,
        "warmup": to_cap + (0.2 if tiny else 2.0),
        "window": cycle * (1 if tiny else 3),
        "start_spread": START_SPREAD_SECONDS / scale,
    }
    repeats = 1 if tiny else 2
    databases: list[tuple[str, str, str]] = []
    tmp = tempfile.TemporaryDirectory(prefix="bench-share-db-")
    try:
        databases.append(("SQLite file", _prepare_sqlite(Path(tmp.name), sizes["conditions"]), "?"))
        dsn = os.environ.get("SMART_EXT_TEST_PG_DSN")
        notes = []
        if dsn and not tiny:
            databases.append(("PostgreSQL", _prepare_postgres(dsn, sizes["conditions"]), "%s"))
        elif not dsn:
            notes.append("PostgreSQL not measured: `SMART_EXT_TEST_PG_DSN` was not set for this run.")
        results: dict[tuple[str, tuple[bool, str]], list[dict[str, Any]]] = {}
        for _ in range(repeats):
            for name, uri, placeholder in databases:
                for mode in MODES:  # interleaved
                    results.setdefault((name, mode), []).append(
                        _run_child(mode, uri, placeholder, policy, {k: sizes[k] for k in sizes})
                    )
    finally:
        tmp.cleanup()

    n, k = sizes["triggers"], sizes["conditions"]
    cycles = sizes["window"] / cycle
    table = Table(
        [
            "database",
            "mode",
            "queries in window",
            "queries per cycle",
            "vs N (no sharing)",
            "vs K (physical limit)",
            "triggers alive",
            "reading",
        ]
    )
    goal = Goal(f"checks per cycle with sharing ≈ K = {k} (vs N = {n:,} without)", "not measured", None)
    for name, _uri, _placeholder in databases:
        per_cycle_without = median([r["queries_window"] for r in results[(name, UNSHARED)]]) / cycles
        for mode in MODES:
            share, seeds = mode
            runs = results[(name, mode)]
            window_queries = median([r["queries_window"] for r in runs])
            per_cycle = window_queries / cycles
            alive = min(r["alive"] for r in runs)
            for r in runs:
                if r["events"]:
                    notes.append(f"{name} share={share}: unexpected events {r['events']}")
            if not share:
                reading = f"every trigger queries on its own: ≈ N = {n:,} per cycle"
            else:
                saving = ratio(per_cycle_without, per_cycle)
                reading = (
                    f"{fmt_ratio(saving)} fewer queries than without sharing; "
                    f"{per_cycle / k:.1f}× the physical limit K"
                )
                if name == "SQLite file" and mode == SENSOR_DEFERRED:
                    goal = Goal(
                        goal.text,
                        f"{fmt_num(per_cycle)} per cycle with sharing vs {fmt_num(per_cycle_without)} without "
                        f"({fmt_ratio(saving)} fewer; {per_cycle / k:.1f}× K)",
                        (per_cycle <= 2 * k) if not tiny else None,
                    )
            table.add(
                name,
                MODE_LABELS[mode],
                fmt_num(window_queries, 0),
                fmt_num(per_cycle),
                fmt_ratio(ratio(per_cycle, n)),
                fmt_ratio(ratio(per_cycle, k)),
                f"{alive:,} / {n:,}",
                reading,
            )
    notes.append(
        f"Policy: production {production} scaled by 1/{scale:g} → {policy}; sharing window "
        f"{DEFAULT_SHARING_WINDOW_SECONDS:g} s / {scale:g}. One cycle = the mean gap between two checks of one "
        f"trigger at the cap = {cycle:.3f} s here (= {cycle * scale / 60:.1f} min in production); the window is "
        f"{cycles:.0f} cycles after a {sizes['warmup']:.1f} s warm-up. Goal judged as met when sharing stays "
        "within 2× K."
    )
    notes.append(
        f"Task starts spread uniformly over {START_SPREAD_SECONDS:g} s (production; "
        f"{sizes['start_spread']:.3f} s here) before deferring. 'condition seed' is what "
        "`BackoffSensor(deferrable=True)` passes the trigger (`wait_seed(check)`, anchor = "
        "`aligned_start(start, poke_interval)`); 'task seed' is the same trigger given one seed per task and its "
        "own start (as before the fix), kept as the baseline that shows what the coalescing window alone does."
    )
    return Result(
        key="sharing",
        title="Sharing identical waits",
        question=(
            f"N = {n:,} deferred waits on K = {k} distinct SQL conditions against a real database: how many "
            "queries per cycle reach the database with sharing vs without?"
        ),
        method=(
            "Fresh child process per mode and database; triggers driven by Airflow's `TriggerRunner.run_trigger` "
            "on a plain asyncio loop; executed queries counted by the database (SQLite trace callback / PostgreSQL "
            "table scan statistics). Time compressed "
            f"×{scale:g} (policy and sharing window alike). Median of {repeats} runs; modes interleaved; ratios "
            "within the same run."
        ),
        tables=[table],
        goals=[goal],
        notes=notes,
    )


def _child_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("ARGS_JSON", "OUT"))
    args = parser.parse_args()
    arguments = json.loads(args.child[0])
    result = asyncio.run(
        _child(
            arguments["share"],
            arguments["seeds"],
            arguments["triggers"],
            arguments["conditions"],
            arguments["policy"],
            arguments["warmup"],
            arguments["window"],
            arguments["placeholder"],
            arguments["start_spread"],
            arguments.get("pg_dsn"),
        )
    )
    Path(args.child[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    if "--child" in sys.argv:
        _child_main()
    else:
        script_main(run)
