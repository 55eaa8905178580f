"""Question — is the Waits view fast at 10,000 live waits? Against Airflow's own REST list of the same waits.

One real Airflow 3.x (``airflow_harness/env.py``; PostgreSQL metadata DB when
``SMART_EXT_BENCH_PG_DSN`` / ``SMART_EXT_TEST_PG_DSN`` is set, else SQLite; LocalExecutor). One DAG of
``TASKS`` deferrable ``BackoffSqlSensor`` tasks on ``K`` conditions that stay false; one run makes ``TASKS``
real zero-worker waits (the scheduler writes their trigger rows). The scheduler, dag-processor and triggerer
are then stopped (the rows stay as they are: deferred task instances with their trigger rows) and the run is
cloned row by row (``dag_run``, ``task_instance``, ``trigger``) until ``N`` waits are live. Only the
api-server runs while measuring.

Measured, interleaved (one request of each candidate per round, ``ROUNDS`` rounds), as wall time of one
request on loopback (the client's share is a read of the body):

* ``waits JSON (all)``: ``GET /smart-ext/api/waits?limit=N`` — every wait, its next check, groups and
  connections;
* ``waits JSON (default page)``: the same with the default limit (first 1,000 rows; groups over all N);
* ``waits page (all)``: ``GET /smart-ext/waits?limit=N``, the HTML;
* ``Airflow REST list``: ``GET /api/v2/dags/~/dagRuns/~/taskInstances?state=deferred&limit=N``
  (``[api] maximum_page_limit`` raised to N) — Airflow's own list of the same deferred task instances.

Each is first requested once right after the clone (rows no server has decrypted), then in the rounds, then
once more right after the api-server is restarted (what a deploy does: the trigger kwargs it decrypted before
are kept encrypted in ``$AIRFLOW_HOME``, ``airflow_smart_ext/ui/kwargs_store.py``). ``SMART_EXT_BENCH_UI_N``
sets another ``N`` (a multiple of ``TASKS``).

The goals (issues 26 and 35): the Waits page and its JSON for 10,000 live waits in under 1 s of server time,
and no slower than Airflow's own REST list in the same run; the first request after a start under 1 s too.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from benchlib import REPO_ROOT, Goal, Result, Table, bench_dag_files, fmt_num, pg_server, ratio, script_main

SIZES = {False: (100, 10_000, 7), True: (10, 40, 2)}  # tiny -> (TASKS, N, ROUNDS)
K = 10


def _get(url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as resp:
        body = resp.read()
    return time.perf_counter() - started, body


def _wait_deferred(env: Any, count: int, budget: float) -> None:
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        rows = env.query(
            "SELECT count(*) FROM task_instance WHERE dag_id = 'bench_ui' AND state = 'deferred'"
        )
        if int(rows[0][0]) >= count:
            return
        env.check_components()
        time.sleep(1)
    raise RuntimeError(f"fewer than {count} bench_ui tasks deferred after {budget:.0f} s")


def _insert(env: Any, table: str, columns: list[str], rows: list[list[Any]]) -> None:
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
    if env.uses_postgres:  # JSON columns take psycopg2's Json
        import psycopg2.extras

        rows = [[psycopg2.extras.Json(v) if isinstance(v, dict | list) else v for v in row] for row in rows]
    env.execute_many(sql, rows)


def _columns(env: Any, table: str) -> list[str]:
    if env.uses_postgres:
        rows = env.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            (table,),
        )
    else:
        rows = [(row[1],) for row in env.query(f"PRAGMA table_info({table})")]
    return [str(row[0]) for row in rows]


def clone_waits(env: Any, copies: int) -> None:
    """Copy the one run of ``bench_ui`` (its run, deferred task instances and trigger rows) ``copies`` times.
    Each trigger row's kwargs are encrypted anew, as the scheduler writes every row (a Fernet token holds a
    random IV): a copied token would let a reader decrypt each distinct token once."""
    from cryptography.fernet import Fernet

    fernet = Fernet(env.env["AIRFLOW__CORE__FERNET_KEY"].encode())
    run_cols = _columns(env, "dag_run")
    ti_cols = _columns(env, "task_instance")
    trig_cols = _columns(env, "trigger")
    run = env.query(f"SELECT {', '.join(run_cols)} FROM dag_run WHERE dag_id = 'bench_ui'")[0]
    tis = env.query(f"SELECT {', '.join(ti_cols)} FROM task_instance WHERE dag_id = 'bench_ui'")
    trig_ids = [ti[ti_cols.index("trigger_id")] for ti in tis]
    triggers = {
        row[trig_cols.index("id")]: row
        for row in env.query(
            f"SELECT {', '.join(trig_cols)} FROM trigger WHERE id IN ({', '.join(['%s'] * len(trig_ids))})",
            trig_ids,
        )
    }
    next_trigger = int(env.query("SELECT max(id) FROM trigger")[0][0]) + 1
    run_rows, ti_rows, trig_rows = [], [], []
    run_keep = [c for c in run_cols if c != "id"]
    for copy in range(1, copies + 1):
        run_id = f"{run[run_cols.index('run_id')]}_copy{copy}"
        values = dict(zip(run_cols, run, strict=True))
        values.update(run_id=run_id, logical_date=None)
        run_rows.append([values[c] for c in run_keep])
        for ti in tis:
            ti_values = dict(zip(ti_cols, ti, strict=True))
            trig_values = dict(zip(trig_cols, triggers[ti_values["trigger_id"]], strict=True))
            plaintext = fernet.decrypt(trig_values["kwargs"].encode())
            trig_values.update(id=next_trigger, triggerer_id=None, kwargs=fernet.encrypt(plaintext).decode())
            trig_rows.append([trig_values[c] for c in trig_cols])
            ti_values.update(run_id=run_id, trigger_id=next_trigger)
            if "id" in ti_values:  # 3.x: a UUID primary key
                ti_values["id"] = str(uuid.uuid4())
            ti_rows.append([ti_values[c] for c in ti_cols])
            next_trigger += 1
    _insert(env, "dag_run", run_keep, run_rows)
    _insert(env, "trigger", trig_cols, trig_rows)
    _insert(env, "task_instance", ti_cols, ti_rows)
    if env.uses_postgres:  # trigger ids were given explicitly: move the sequence past them
        env.execute("SELECT setval(pg_get_serial_sequence('trigger', 'id'), (SELECT max(id) FROM trigger))")


def measure(tiny: bool) -> dict[str, Any]:
    sys.path.insert(0, str(REPO_ROOT))
    from airflow_harness.env import AirflowEnv

    tasks, n, rounds = SIZES[tiny]
    n = int(os.environ.get("SMART_EXT_BENCH_UI_N", n))
    server = pg_server()
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        work = Path(tmp)
        cond_db = work / "conditions.db"
        import sqlite3

        with sqlite3.connect(cond_db) as conn:
            conn.execute("CREATE TABLE cond (k TEXT PRIMARY KEY, ok INTEGER NOT NULL)")
            conn.executemany("INSERT INTO cond VALUES (?, 0)", [(f"c{i}",) for i in range(K)])
        env = AirflowEnv(
            bench_dag_files("bench_ui", work, {"tasks": tasks, "k": K}),
            pg_dsn=server,  # the harness makes (and drops) its own database on that server
            parallelism=4,
            extra_env={
                "AIRFLOW_CONN_BENCH_UI_DB": json.dumps({"conn_type": "sqlite", "host": str(cond_db)}),
                "AIRFLOW__API__MAXIMUM_PAGE_LIMIT": str(n),
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(tasks),
            },
        )
        with env:
            if not env.is_airflow3:
                raise RuntimeError("bench_ui measures the Airflow 3 api-server (run it with .venv-3.3)")
            env.wait_for_dag("bench_ui")
            env.unpause("bench_ui")
            env.trigger("bench_ui")
            _wait_deferred(env, tasks, 600)
            for name in ("scheduler", "triggerer", "dag-processor"):
                env.stop_component(name)
            clone_waits(env, n // tasks - 1)
            live = int(env.query("SELECT count(*) FROM task_instance WHERE state = 'deferred'")[0][0])
            base = env.api_url
            urls = {
                "waits JSON (all)": f"{base}/smart-ext/api/waits?limit={n}",
                "waits JSON (default page)": f"{base}/smart-ext/api/waits",
                "waits page (all)": f"{base}/smart-ext/waits?limit={n}",
                "Airflow REST list": f"{base}/api/v2/dags/~/dagRuns/~/taskInstances?state=deferred&limit={n}",
            }
            # The first request of each: imports, first connections, and (ours) decrypting every row
            first = {name: _get(url)[0] for name, url in urls.items()}
            times: dict[str, list[float]] = {name: [] for name in urls}
            bodies: dict[str, bytes] = {}
            for _ in range(rounds):
                for name, url in urls.items():
                    seconds, bodies[name] = _get(url)
                    times[name].append(seconds)
            env.stop_component("api-server")
            env.start_component("api-server")
            restarted = {name: _get(url)[0] for name, url in urls.items()}
            version = env.airflow_version
            metadata = "PostgreSQL" if env.uses_postgres else "SQLite"
    ours = json.loads(bodies["waits JSON (all)"])
    theirs = json.loads(bodies["Airflow REST list"])
    return {
        "n": n,
        "live": live,
        "rounds": rounds,
        "times": times,
        "first": first,
        "restarted": restarted,
        "sizes": {name: len(body) for name, body in bodies.items()},
        "ours_rows": len(ours["waits"]),
        "ours_groups": len(ours["groups"]),
        "theirs_rows": len(theirs["task_instances"]),
        "version": version,
        "metadata": metadata,
    }


def run(tiny: bool) -> Result:
    m = measure(tiny)
    med = {name: statistics.median(values) for name, values in m["times"].items()}
    table = Table(
        [
            "request",
            "first request (rows new to it)",
            "median after it",
            "min / max",
            "first after a restart",
            "body",
            "rows",
        ],
        caption=(
            f"Airflow {m['version']} api-server, {m['metadata']} metadata DB; {m['live']} live deferred waits "
            f"({K} conditions); the first request of each, then {m['rounds']} interleaved rounds, then the "
            "first of each after an api-server restart."
        ),
    )
    rows = {
        "waits JSON (all)": m["ours_rows"],
        "waits JSON (default page)": min(1000, m["ours_rows"]),
        "waits page (all)": m["ours_rows"],
        "Airflow REST list": m["theirs_rows"],
    }
    for name, values in m["times"].items():
        table.add(
            name,
            f"{m['first'][name] * 1000:.0f} ms",
            f"{med[name] * 1000:.0f} ms",
            f"{min(values) * 1000:.0f} / {max(values) * 1000:.0f} ms",
            f"{m['restarted'][name] * 1000:.0f} ms",
            f"{m['sizes'][name] / 2**20:.2f} MiB",
            rows[name],
        )
    rest = med["Airflow REST list"]
    goals = []
    for name in ("waits JSON (all)", "waits page (all)"):
        complete = rows[name] == m["live"]
        goals.append(
            Goal(
                f"{name}, {m['live']} waits: < 1 s and no slower than Airflow's REST list of them",
                f"{med[name] * 1000:.0f} ms; {fmt_num(ratio(med[name], rest), 2)}× the REST list "
                f"({rest * 1000:.0f} ms); {rows[name]} of {m['live']} rows",
                None if tiny else (complete and med[name] < 1.0 and med[name] <= rest),
            )
        )
    for key, when in (
        ("first", "first request, no row decrypted before (every trigger row decrypted)"),
        ("restarted", "first request after an api-server restart (rows decrypted before it)"),
    ):
        first, theirs = m[key]["waits JSON (all)"], m[key]["Airflow REST list"]
        goals.append(
            Goal(
                f"waits JSON (all), {m['live']} waits, {when}: < 1 s",
                f"{first * 1000:.0f} ms; {fmt_num(ratio(first, theirs), 2)}× the REST list's first "
                f"({theirs * 1000:.0f} ms)",
                None if tiny else first < 1.0,
            )
        )
    return Result(
        key="ui",
        title="Waits view at scale",
        question=__doc__.split("\n", 1)[0].removeprefix("Question — "),
        method=__doc__.split("\n\n", 1)[1],
        tables=[table],
        goals=goals,
        notes=[f"groups in the JSON: {m['ours_groups']} (expected {K})"],
    )


if __name__ == "__main__":
    script_main(run)
