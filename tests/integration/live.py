"""Helpers of the live tests (runs, task instances, logs, the SQLite condition DB): one place, imported by
the test modules (no test module imports another)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import sqlite3
import struct
import sysconfig
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from airflow_harness.env import AirflowEnv
from airflow_harness.state import TERMINAL_TI_STATES, AirflowEnvError
from airflow_smart_ext.backoff import BackoffPolicy, task_seed

# One check line of BackoffTrigger, e.g. "check #3 at=1795633335.101 (scheduled 2026-…+00:00): negative; group
# of 1; next check #4 at 2026-11-25T19:02:17.457+00:00" (" early" / " shared" may follow the parenthesis).
TRIGGER_CHECK_RE = re.compile(
    r"check #(?P<index>\d+) at=(?P<at>[\d.]+) \(scheduled [^)]*\)[^:]*: (?P<status>\w+).*?; "
    r"group of (?P<group>\d+); next check (?:#(?P<next>\d+) at (?P<next_at>\S+)|none)"
)


# The scheduler's line when it failed a task whose executor event it read late: a process that died before the
# task ran (an overloaded machine), or a run's "success" drained after the next run was queued (reschedule:
# apache/airflow #71172; deferral: #71580). It says nothing of how our code ended the wait.
LOST_BY_EXECUTOR_RE = (
    r"TaskInstance: {dag_id}\.{task_id} {run_id}(?: map_index=\d+)? \[\w+\][^\n]*finished with state \w+, "
    r"but the task instance's state attribute is (?:scheduled|queued|running|restarting)"
)


def lost_by_executor(
    env: AirflowEnv, dag_id: str, run_id: str, task_id: str, map_index: int | None = None
) -> int:
    """How many times the scheduler failed this task instance on a late executor event (LOST_BY_EXECUTOR_RE);
    of any map index, or of ``map_index`` only."""
    pattern = LOST_BY_EXECUTOR_RE.format(
        dag_id=re.escape(dag_id), task_id=re.escape(task_id), run_id=re.escape(run_id)
    )
    if map_index is not None:
        index = "" if map_index == -1 else f" map_index={map_index}"
        pattern = pattern.replace(r"(?: map_index=\d+)?", index, 1)
    return len(re.findall(pattern, scheduler_logs(env)))


def scheduler_logs(env: AirflowEnv) -> str:
    """Every scheduler's log: with two, the one that queued a task instance reads its executor events."""
    return "\n".join(env.component_log(name) for name in env.scheduler_names)


# The scheduler's line when it reset task instances a scheduler that no longer heartbeats had queued (its own
# after a stall, or a dead one's at start-up: ``adopt_or_reset_orphaned_tasks``, in 2.11 and 3.x alike): each
# such task instance starts a new try, although it has no retries, and TaskInstanceHistory records the
# abandoned one as "failed". Such a try says nothing of how our code ended the wait.
RESET_ORPHANS_RE = re.compile(
    r"Reset the following \d+ orphaned TaskInstances:(?P<tis>(?:\s*<TaskInstance: [^>\n]*>)+)"
)
# The scheduler's lines about why it reset task instances, printed when one was.
RESET_REASON_RE = re.compile(r"[^\n]*(?:orphaned TaskInstances|SchedulerJob instances as failed)[^\n]*")


def reset_by_scheduler(env: AirflowEnv, dag_id: str, run_id: str, task_id: str) -> int:
    """How many times the scheduler reset this task instance (any map index) as an orphan (RESET_ORPHANS_RE)."""
    instance = re.compile(
        rf"<TaskInstance: {re.escape(dag_id)}\.{re.escape(task_id)} {re.escape(run_id)}(?: map_index=\d+)? \["
    )
    return sum(
        len(instance.findall(block["tis"])) for block in RESET_ORPHANS_RE.finditer(scheduler_logs(env))
    )


def wait_for(predicate, timeout: float, what: str, env: AirflowEnv) -> None:  # type: ignore[no-untyped-def]
    env.poll(predicate, timeout, what, interval=0.3)


def triggerer_pokes(counter: Path, since: float = 0.0) -> list[float]:
    return [
        line["at"] for line in counter_lines(counter) if line["where"] == "triggerer" and line["at"] >= since
    ]


SQLITE_CONN_ID = "sn_sqlite"


def start_run(env: AirflowEnv, dag_id: str, conf: dict[str, Any] | None = None) -> str:
    env.wait_for_dag(dag_id)
    env.unpause(dag_id)
    return env.trigger(dag_id, conf=conf or {})


def ti_row(env: AirflowEnv, dag_id: str, run_id: str, task_id: str) -> dict[str, Any] | None:
    for row in env.task_instances(dag_id, run_id):
        if row["task_id"] == task_id and row["map_index"] == -1:
            return row
    return None


def wait_ti_state(
    env: AirflowEnv, dag_id: str, run_id: str, task_id: str, states: Iterable[str], timeout: float = 180
) -> dict[str, Any]:
    """Until the task instance is in one of ``states`` (fails early when it ends in another one)."""
    wanted = set(states)
    deadline = time.monotonic() + timeout
    row = None
    while time.monotonic() < deadline:
        row = ti_row(env, dag_id, run_id, task_id)
        if row is not None and row["state"] in wanted:
            return row
        if row is not None and row["state"] in TERMINAL_TI_STATES:
            raise AssertionError(f"{dag_id}.{task_id} ended {row['state']!r} while waiting for {wanted}")
        env.check_components()
        time.sleep(0.2)
    raise AssertionError(f"{dag_id}.{task_id} not in {wanted} within {timeout}s: {row}")


def policy_for(
    poke_interval: float,
    max_wait: float | None,
    factor: float = 2.0,
    jitter: str = "full",
    splay: float | None = None,
) -> BackoffPolicy:
    """The policy BackoffSensor builds for these arguments (splay None = one poke_interval)."""
    return BackoffPolicy(
        initial=poke_interval,
        factor=factor,
        cap=max_wait,
        jitter=jitter,
        splay=poke_interval if splay is None else splay,
    )


def seed_of(dag_id: str, task_id: str, run_id: str, try_number: int = 1) -> str:
    return task_seed(dag_id, task_id, run_id, -1, try_number)


def epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def sensor_log(env: AirflowEnv, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
    """The task's log; waits briefly for the last lines (log files are flushed just after the state)."""
    text = ""
    for _ in range(20):
        text = env.task_log(dag_id, run_id, task_id, try_number)
        if "Success criteria met" in text or "timed out" in text or "Failure criteria" in text:
            break
        time.sleep(0.5)
    return text


def sqlite_db(env: AirflowEnv) -> Path:
    """A SQLite database FILE reached through the Airflow connection ``sn_sqlite`` (created once per env)."""
    path = env.home / "sn_condition.db"
    if not getattr(env, "_sn_sqlite_ready", False):
        sqlite3.connect(path).close()
        # Host = the absolute path (the sqlite hook turns it into file:/abs/path). Fields, not a URI: the 2.11
        # CLI crashes on `connections add --conn-uri sqlite://...` (UnboundLocalError 'netloc' in its metrics).
        add_connection_fields(env, SQLITE_CONN_ID, "sqlite", host=str(path))
        env._sn_sqlite_ready = True  # type: ignore[attr-defined]
    return path


def add_connection_fields(env: AirflowEnv, conn_id: str, conn_type: str, **fields: Any) -> None:
    """``airflow connections add`` with separate fields (host, port, login, password, schema)."""
    env.airflow_cli("connections", "delete", conn_id, check=False)
    args = ["connections", "add", conn_id, "--conn-type", conn_type]
    for key, value in fields.items():
        if value is not None:
            args += [f"--conn-{key}", str(value)]
    env.airflow_cli(*args)


def sqlite_exec(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path, timeout=30)
    try:
        with conn:
            return conn.execute(sql, tuple(params)).fetchall()
    finally:
        conn.close()


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def day_conf(table: str, conn_id: str = SQLITE_CONN_ID) -> dict[str, Any]:
    """``dag_run.conf`` of the templated SQL DAGs: wait for the status row of day ``d1`` in ``table``."""
    return {
        "conn_id": conn_id,
        "sql": f"SELECT status FROM {table} WHERE day = :day",
        "params": {"day": "d1"},
    }


def counter_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def event_payload(extra: Any) -> dict[str, Any]:
    """An asset event's ``payload`` from its ``extra`` column (JSON text, bytes or already parsed)."""
    if isinstance(extra, (bytes, memoryview)):
        extra = bytes(extra).decode()
    if isinstance(extra, str):
        extra = json.loads(extra)
    return dict((extra or {}).get("payload") or {})


@contextlib.contextmanager
def pg_cursor(dsn: str) -> Iterator[Any]:
    """A cursor in autocommit mode (``with psycopg2.connect()`` would open a transaction), closed after."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def watchers_running(env: AirflowEnv, names: list[str], timeout: float = 240) -> None:
    """Until every named asset's watcher trigger is assigned to a running triggerer."""
    deadline = time.monotonic() + timeout
    while True:
        rows = env.query(
            "SELECT a.name FROM asset a JOIN asset_watcher w ON w.asset_id = a.id "
            "JOIN trigger t ON t.id = w.trigger_id WHERE t.triggerer_id IS NOT NULL"
        )
        running = {name for (name,) in rows}
        if set(names) <= running:
            return
        if time.monotonic() > deadline:
            raise AirflowEnvError(f"watchers not running within {timeout}s: {sorted(set(names) - running)}")
        time.sleep(1)


def add_postgres_connection(env: AirflowEnv, conn_id: str, dsn: str) -> None:
    """The Airflow connection ``conn_id`` to the PostgreSQL database of ``dsn`` (a row, not `airflow connections
    add`: a CLI call costs ~40 s on a loaded machine)."""
    host_port = dsn.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    login = dsn.split("//", 1)[1].split("@", 1)[0]
    env.execute("DELETE FROM connection WHERE conn_id = %s", (conn_id,))
    env.execute(
        "INSERT INTO connection (conn_id, conn_type, host, port, login, schema, is_encrypted, "
        "is_extra_encrypted) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (conn_id, "postgres", host, int(port), login, dsn.rsplit("/", 1)[1], False, False),
    )


#: A zone the clock-change tests write (a TZif file found through ``PYTHONTZPATH``): New York's offsets either
#: side of a change the test sets (a real Airflow runs on the wall clock, so the test controls the zone).
SHIFT_ZONE = "SmartExt/Shift"
SHIFT_BEFORE, SHIFT_AFTER = -5 * 3600, -4 * 3600  # UTC offsets either side of the change


def write_shift_zone(folder: Path, change_at: int) -> None:
    """``SHIFT_ZONE`` as a TZif file (version 1) under ``folder``: -05:00 "EST" until ``change_at`` (epoch
    seconds), -04:00 "EDT" from then on."""
    names = b"EST\0EDT\0"
    header = b"TZif" + b"\0" + bytes(15) + struct.pack(">6l", 0, 0, 0, 1, 2, len(names))
    types = struct.pack(">lBB", SHIFT_BEFORE, 0, 0) + struct.pack(">lBB", SHIFT_AFTER, 1, 4)
    path = folder / SHIFT_ZONE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + struct.pack(">l", change_at) + bytes([1]) + types + names)


def shift_zone_env(work: Path, dag_sources: Sequence[Path]) -> tuple[AirflowEnv, Path]:
    """(an Airflow, not started, whose components find ``SHIFT_ZONE`` through ``PYTHONTZPATH``, the zones'
    folder): the zone exists from the start with a change in 2033; the test sets the real one
    (:func:`write_shift_zone`) before any component reads it (before a DAG names it)."""
    zones = work / "zoneinfo"
    write_shift_zone(zones, 2_000_000_000)
    search = os.pathsep.join([str(zones), sysconfig.get_config_var("TZPATH") or "/usr/share/zoneinfo"])
    return AirflowEnv(list(dag_sources), extra_env={"PYTHONTZPATH": search}), zones


def absence_record(env: AirflowEnv, asset: str) -> dict[str, Any] | None:
    """A watcher's late rule's record in Airflow's asset state store (beside the watermark; 3.3+)."""
    rows = env.query(
        "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id WHERE a.name = %s "
        "AND s.key LIKE %s",
        (asset, "%#late"),
    )
    if not rows:
        return None
    value = rows[0][0]
    return json.loads(value) if isinstance(value, str) else value  # type: ignore[no-any-return]
