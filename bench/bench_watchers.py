"""Question — the cost of waiting for one partition: condition watcher vs zero-worker vs worker-first sensor.

One real Airflow 3.x (``airflow_harness/env.py``; PostgreSQL metadata DB, LocalExecutor) and one
condition database on the same PostgreSQL server. Three legs, one after another, each the same "day": a
partition lands after ``WAIT`` seconds, polled every ``POKE_INTERVAL`` seconds (fixed interval), then one
downstream task (an ``EmptyOperator``) runs:

* ``watcher`` (last: once started it keeps polling): ``Asset(watchers=[AssetWatcher(trigger=ConditionWatcher(sql_condition(...)))])`` and a DAG
  scheduled on the asset, containing only the downstream task (no sensor);
* ``zero_worker``: a DAG run started at the start of the day, ``BackoffSqlSensor(deferrable=True)`` (starts
  and ends in the triggerer) >> the downstream task;
* ``worker_first``: the same with ``start_from_trigger=False`` (check #0 and the ending on a worker);
* ``watcher_unshared``: the watcher with ``share=False`` (no shared stream, no sharing group): what the
  sharing machinery itself costs the triggerer.

Measured per leg: task instances created (while waiting / in all), task-process starts (exact:
``on_execute_callback`` appends a line), trigger rows, checks at the database (the SQL calls
``bench_value(leg)``, which records every check with the database's clock), triggerer CPU seconds above an
idle window of the same length and its RSS, and the time from the partition landing to the downstream task's
success. "Per day" scales the waiting costs linearly to 24 h of waiting at the same interval.
"""

from __future__ import annotations

import sys
import tempfile
import time
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
    fresh_pg_database,
    pg_server,
    script_main,
)

# The watchers last: once started they keep polling, which would add to a later leg's triggerer CPU.
LEGS = ("zero_worker", "worker_first", "watcher", "watcher_unshared")
CONDITION_DB = "bw_bench_conditions"
SIZES = {False: (10, 120), True: (3, 12)}  # tiny -> (POKE_INTERVAL, WAIT) seconds


def _prepare_condition_db(server_dsn: str) -> str:
    import psycopg2

    dsn = fresh_pg_database(server_dsn, CONDITION_DB)
    pg = psycopg2.connect(dsn)
    pg.autocommit = True
    with pg.cursor() as cur:
        cur.execute("CREATE TABLE partitions (leg text PRIMARY KEY, day text)")
        cur.execute("CREATE TABLE checks (leg text NOT NULL, at double precision NOT NULL)")
        cur.execute(
            "CREATE FUNCTION bench_value(c text) RETURNS text LANGUAGE sql VOLATILE AS $$ "
            "INSERT INTO checks VALUES (c, extract(epoch FROM clock_timestamp())); "
            "SELECT day FROM partitions WHERE leg = c; $$"
        )
    pg.close()
    return dsn


def _sql(dsn: str, statement: str, params: tuple = ()) -> list[tuple]:
    import psycopg2

    pg = psycopg2.connect(dsn)
    pg.autocommit = True
    try:
        with pg.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []
    finally:
        pg.close()


def _until(predicate: Any, timeout: float, what: str) -> float:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)
    return time.time()


def measure_leg(
    env: Any, dsn: str, leg: str, interval: int, wait: int, starts: Path, idle_cpu: float
) -> dict:
    dag_id = f"bw_{leg}"
    tis = lambda: env.query("SELECT task_id, state FROM task_instance WHERE dag_id = %s", (dag_id,))  # noqa: E731
    env.unpause(dag_id)
    asset = {"watcher": "bw_partition", "watcher_unshared": "bw_partition_unshared"}.get(leg)
    if asset:  # a watcher runs once its asset's DAG is active and unpaused
        _until(
            lambda: env.query(
                "SELECT 1 FROM asset a JOIN asset_watcher w ON w.asset_id = a.id JOIN trigger t "
                "ON t.id = w.trigger_id WHERE a.name = %s AND t.triggerer_id IS NOT NULL",
                (asset,),
            ),
            300,
            "the watcher did not start",
        )
        time.sleep(interval)  # past its first check
    else:
        env.trigger(dag_id)
        _until(lambda: any(state == "deferred" for _t, state in tis()), 300, f"{leg}: never deferred")
    cpu0, start = component_usage(env, "triggerer")[0], time.time()
    time.sleep(wait)
    waiting_tis = len(tis())
    if asset:
        triggers = len(
            env.query(
                "SELECT w.trigger_id FROM asset_watcher w JOIN asset a ON a.id = w.asset_id WHERE a.name = %s",
                (asset,),
            )
        )
    else:
        triggers = len(
            env.query(
                "SELECT trigger_id FROM task_instance WHERE dag_id = %s AND trigger_id IS NOT NULL", (dag_id,)
            )
        )
    cpu = component_usage(env, "triggerer")[0] - cpu0
    landed = time.time()
    _sql(dsn, "INSERT INTO partitions VALUES (%s, '2026-07-01')", (leg,))
    done = _until(
        lambda: any(t == "process" and s == "success" for t, s in tis()), 300, f"{leg}: process never ran"
    )
    checks = _sql(
        dsn, "SELECT count(*) FROM checks WHERE leg = %s AND at >= %s AND at < %s", (leg, start, landed)
    )
    lines = starts.read_text().splitlines() if starts.exists() else []
    return {
        "leg": leg,
        "waiting_tis": waiting_tis,
        "all_tis": len(tis()),
        "starts": sum(1 for line in lines if f'"{dag_id}"' in line),
        "triggers": triggers,
        "checks": int(checks[0][0]),
        "cpu_above_idle": cpu - idle_cpu,
        "rss": component_usage(env, "triggerer")[1],
        "landed_to_done": done - landed,
        "window": landed - start,
    }


def run(tiny: bool) -> Result:

    sys.path.insert(0, str(REPO_ROOT))
    from airflow_harness.env import AirflowEnv

    interval, wait = SIZES[tiny]
    server = pg_server()
    if not server:
        raise RuntimeError(f"set {PG_ENV} to a PostgreSQL server DSN (the condition database lives there)")
    dsn = _prepare_condition_db(server)
    measured: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bw-") as tmp:
        starts = Path(tmp) / "starts.jsonl"
        dag_files = bench_dag_files(
            "bench_watchers", Path(tmp), {"starts": str(starts), "interval": interval}
        )
        env = AirflowEnv(dag_files, pg_dsn=server, parallelism=4, extra_env={"AIRFLOW_CONN_BW_PG": dsn})
        with env:
            for leg in LEGS:
                env.wait_for_dag(f"bw_{leg}")
            cpu0 = component_usage(env, "triggerer")[0]
            time.sleep(wait)  # an idle window: the triggerer's own heartbeats and loop
            idle_cpu = component_usage(env, "triggerer")[0] - cpu0
            for leg in LEGS:
                print(f"[bench_watchers] {leg} ...", flush=True)
                measured[leg] = measure_leg(env, dsn, leg, interval, wait, starts, idle_cpu)
                print(f"[bench_watchers] {leg}: {measured[leg]}", flush=True)
            version = env.airflow_version
    day = 86400 / wait
    table = Table(
        [
            "leg",
            "task instances while waiting / in all",
            "task-process starts",
            "trigger rows while waiting",
            "checks at the DB (per day)",
            "triggerer CPU s above idle (per day)",
            "triggerer RSS",
            "partition landed → downstream done",
        ],
        caption=f"Airflow {version}, PostgreSQL, LocalExecutor; one wait of {wait} s at a fixed {interval} s "
        f"interval per leg; per day = x{day:g} (24 h of waiting at that interval).",
    )
    for leg in LEGS:
        m = measured[leg]
        table.add(
            leg,
            f"{m['waiting_tis']} / {m['all_tis']}",
            m["starts"],
            m["triggers"],
            f"{m['checks']} ({fmt_num(m['checks'] * day, 0)})",
            f"{fmt_num(m['cpu_above_idle'], 2)} ({fmt_num(m['cpu_above_idle'] * day, 0)})",
            f"{m['rss'] / 2**20:.0f} MiB",
            f"{m['landed_to_done']:.1f} s",
        )
    zero, first, watcher, _unshared = (measured[leg] for leg in LEGS)
    goals = [
        Goal(
            "watcher: no task instance and no task process while waiting",
            f"{watcher['waiting_tis']} task instances, {watcher['starts']} process starts "
            f"(zero-worker: {zero['waiting_tis']} / {zero['starts']}; worker-first: {first['waiting_tis']} / "
            f"{first['starts']})",
            None if tiny else watcher["waiting_tis"] == 0 and watcher["starts"] == 0,
        ),
        Goal(
            "watcher: the same checks at the database as a sensor on the same schedule (within 1 cycle)",
            f"{watcher['checks']} vs {zero['checks']} (zero-worker) / {first['checks']} (worker-first)",
            None if tiny else abs(watcher["checks"] - zero["checks"]) <= 1,
        ),
    ]
    return Result(
        key="watchers",
        title="Condition watchers: the cost of waiting for one partition",
        question=(
            "What does waiting for one partition cost with a condition watcher (no sensor task) against a "
            "zero-worker and a worker-first deferrable sensor polling the same condition on the same schedule?"
        ),
        method=(
            "One real Airflow 3.x on PostgreSQL from the test harness; the legs one after another; "
            "checks recorded by the SQL function the condition calls, task-process starts by "
            "`on_execute_callback`, triggerer CPU/RSS from /proc (psutil), CPU above an idle window of the "
            "same length. One run per leg."
        ),
        tables=[table],
        goals=goals,
        notes=[
            "The downstream task is an EmptyOperator without callbacks in every leg (the scheduler completes "
            "it: no task process), so the process starts are the waiting's own. The machine is shared (see the load "
            "average); CPU above idle is small and noisy: compare its order of magnitude."
        ],
    )


if __name__ == "__main__":
    script_main(run)
