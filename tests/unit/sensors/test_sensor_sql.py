"""BackoffSqlSensor: first-row evaluation, and real databases through an Airflow Connection.

SQLite always (a real database file); PostgreSQL too when ``SMART_EXT_TEST_PG_DSN`` is set
(``postgresql://user:password@host:port/dbname``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.conditions.outcomes import STATS_XCOM_KEY
from airflow_smart_ext.conditions.sql import FirstRowOutcome, evaluate_first_row
from airflow_smart_ext.sensors import BackoffSqlSensor
from tests.unit.clock import FakeClock
from tests.unit.sensors.helpers import make_context

HELPERS = "tests.unit.sensors.helpers"


# ------------------------------------------------------------------ evaluate_first_row (pure)
def test_no_row_waits_or_fails_on_empty() -> None:
    assert not evaluate_first_row(None)
    with pytest.raises(compat.locations.AirflowFailException, match="fail_on_empty"):
        evaluate_first_row(None, fail_on_empty=True)


@pytest.mark.parametrize(("cell", "done"), [(1, True), ("yes", True), (0, False), ("", False), (None, False)])
def test_default_is_truthiness_of_the_first_cell(cell: Any, done: bool) -> None:
    outcome = evaluate_first_row((cell, "ignored"))
    assert isinstance(outcome, FirstRowOutcome)
    assert bool(outcome) is done and outcome.value == cell
    assert outcome.xcom_value is None


def test_failure_is_evaluated_before_success_and_raises_fail_exception() -> None:
    def always(_: Any) -> bool:
        return True

    with pytest.raises(compat.locations.AirflowFailException, match=r"failure\(-1\) returned True"):
        evaluate_first_row((-1,), success=always, failure=always)


def test_selector_and_criteria_accept_dotted_paths() -> None:
    row = (0, 5)
    assert evaluate_first_row(row, selector=f"{HELPERS}.second_cell", success=f"{HELPERS}.is_positive")
    assert not evaluate_first_row(
        (0, -5), selector=f"{HELPERS}.second_cell", success=f"{HELPERS}.is_positive"
    )
    with pytest.raises(compat.locations.AirflowFailException):
        evaluate_first_row((0, -5), selector=f"{HELPERS}.second_cell", failure=f"{HELPERS}.is_negative")


def test_criteria_exceptions_propagate_as_errors() -> None:
    def broken(_: Any) -> bool:
        raise KeyError("nope")

    with pytest.raises(KeyError):
        evaluate_first_row((1,), success=broken)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"success": "no_dots"}, "success must be a callable or a dotted path"),
        (
            {"failure": "tests.unit.sensors.helpers.missing"},
            "failure='tests.unit.sensors.helpers.missing' cannot be imported",
        ),
        ({"selector": 42}, "selector must be None, a callable or a dotted path"),
        ({"fail_on_empty": "yes"}, "fail_on_empty must be True or False"),
    ],
)
def test_bad_criteria_fail_at_construction(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        BackoffSqlSensor(task_id="s", conn_id="c", sql="select 1", **kwargs)
    assert message in str(err.value)


# ------------------------------------------------------------------ deferrable spec (the "sql" check spec)
def test_sql_check_spec_has_rendered_fields_and_dotted_criteria() -> None:
    from tests.unit.sensors.helpers import is_negative, second_cell

    sensor = BackoffSqlSensor(
        task_id="s",
        conn_id="{{ params.conn }}",
        sql="select ready from jobs where day = ?",
        parameters=("{{ ds }}",),
        selector=second_cell,
        success=f"{HELPERS}.is_positive",
        failure=is_negative,
        fail_on_empty=True,
        hook_params={"timeout": 3},
        deferrable=True,
    )
    assert set(sensor.template_fields) == {"sql", "hook_params", "parameters", "conn_id"}
    sensor.conn_id, sensor.parameters = "warehouse", ("2026-01-01",)  # as rendered by Airflow
    spec = sensor.deferrable_check(make_context())
    assert spec == {
        "type": "sql",
        "conn_id": "warehouse",
        "sql": "select ready from jobs where day = ?",
        "parameters": ["2026-01-01"],
        "hook_params": {"timeout": 3},
        "selector": f"{HELPERS}.second_cell",
        "success": f"{HELPERS}.is_positive",
        "failure": f"{HELPERS}.is_negative",
        "fail_on_empty": True,
    }
    json.dumps(spec)


def test_lambda_criterion_is_not_shippable() -> None:
    with pytest.raises(ValueError, match="success=.*lambda.*cannot be imported by name in the triggerer"):
        BackoffSqlSensor(task_id="s", conn_id="c", sql="select 1", success=lambda v: v, deferrable=True)
    fallback = BackoffSqlSensor(
        task_id="s2",
        conn_id="c",
        sql="select 1",
        success=lambda v: v,
        deferrable=True,
        deferrable_fallback="reschedule",
    )
    assert fallback.mode == "reschedule" and not fallback.deferrable


# ------------------------------------------------------------------ real databases
@dataclass
class Database:
    conn_id: str
    placeholder: str  # the driver's paramstyle
    execute: Callable[[str, tuple], None]  # run a statement directly (not through the sensor)
    table_exists: Callable[[str], bool]


def _sqlite_database(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Database:
    path = tmp_path / "sensor.db"
    sqlite3.connect(path).close()
    conn_id = f"smart_sqlite_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "sqlite", "host": str(path)})
    )

    def execute(sql: str, params: tuple = ()) -> None:
        with sqlite3.connect(path) as db:
            db.execute(sql, params)

    def table_exists(name: str) -> bool:
        with sqlite3.connect(path) as db:
            return (
                db.execute(
                    "select count(*) from sqlite_master where type='table' and name=?", (name,)
                ).fetchone()[0]
                == 1
            )

    return Database(conn_id, "?", execute, table_exists)


def _postgres_database(monkeypatch: pytest.MonkeyPatch) -> Database:
    dsn = os.environ.get("SMART_EXT_TEST_PG_DSN")
    if not dsn:
        pytest.skip("SMART_EXT_TEST_PG_DSN is not set (scripts/dev.py test starts a PostgreSQL cluster)")
    import psycopg2

    url = urlparse(dsn)
    conn_id = f"smart_pg_{uuid.uuid4().hex[:8]}"
    connection = {
        "conn_type": "postgres",
        "host": url.hostname,
        "port": url.port or 5432,
        "login": url.username,
        "password": url.password or "",
        "schema": url.path.lstrip("/"),
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))

    def execute(sql: str, params: tuple = ()) -> None:
        with psycopg2.connect(dsn) as db, db.cursor() as cursor:
            cursor.execute(sql, params)

    def table_exists(name: str) -> bool:
        with psycopg2.connect(dsn) as db, db.cursor() as cursor:
            cursor.execute("select to_regclass(%s) is not null", (name,))
            return bool(cursor.fetchone()[0])

    return Database(conn_id, "%s", execute, table_exists)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(
    request: pytest.FixtureRequest, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Database]:
    db = (
        _sqlite_database(tmp_path, monkeypatch)
        if request.param == "sqlite"
        else _postgres_database(monkeypatch)
    )
    table = f"t_{uuid.uuid4().hex[:8]}"
    db.execute(f"create table {table} (name varchar(100), status integer)", ())
    db.table = table  # type: ignore[attr-defined]
    yield db
    db.execute(f"drop table if exists {table}", ())


def test_row_appearing_later_is_detected(database: Database) -> None:
    table = database.table  # type: ignore[attr-defined]
    sensor = BackoffSqlSensor(
        task_id="wait_row",
        conn_id=database.conn_id,
        sql=f"select status from {table} where name = {database.placeholder}",
        parameters=("job-1",),
        poke_interval=0.2,
        backoff_factor=1.5,
        max_wait=0.5,
        timeout=120,
        mode="poke",
    )
    inserted = threading.Event()
    first_poke_done = threading.Event()
    original_poke = sensor.poke

    def poke_and_signal(context: Any) -> Any:
        result = original_poke(context)
        first_poke_done.set()
        return result

    sensor.poke = poke_and_signal  # type: ignore[method-assign]

    def insert_later() -> None:
        # After the first (negative) poke, however slow a loaded machine makes it.
        first_poke_done.wait(60)
        time.sleep(0.3)
        database.execute(f"insert into {table} values ({database.placeholder}, 1)", ("job-1",))
        inserted.set()

    writer = threading.Thread(target=insert_later)
    writer.start()
    context = make_context()
    try:
        sensor.execute(context)
    finally:
        writer.join()
    assert inserted.is_set()
    assert context["ti"].xcoms[STATS_XCOM_KEY]["pokes"] > 1  # it waited, then saw the row


def test_failure_criterion_fails_fast_without_retry(database: Database, clock: FakeClock) -> None:
    table = database.table  # type: ignore[attr-defined]
    database.execute(f"insert into {table} values ({database.placeholder}, -1)", ("job-1",))
    sensor = BackoffSqlSensor(
        task_id="wait_row",
        conn_id=database.conn_id,
        sql=f"select status from {table}",
        failure=f"{HELPERS}.is_negative",
        silent_fail=True,  # must not swallow a matched failure criterion (common-sql's trap)
        retries=3,
        poke_interval=10,
        splay=0,  # no splayed first poke: any sleep would mean a second poke
    )
    with pytest.raises(compat.locations.AirflowFailException, match="Failure criteria met"):
        sensor.execute(make_context())
    assert clock.sleeps == []  # the very first poke decided


def test_sql_error_is_reported_clearly(database: Database, clock: FakeClock) -> None:
    sensor = BackoffSqlSensor(
        task_id="wait_row", conn_id=database.conn_id, sql="selec status from no_such_table", poke_interval=10
    )
    # A permanent error (the statement is wrong) fails the try; transient ones are ridden out (test below).
    with pytest.raises(compat.locations.AirflowException) as err:
        sensor.execute(make_context())
    message = str(err.value)
    assert f"Query failed on connection {database.conn_id!r}" in message
    assert "selec" in message


def test_malicious_parameter_is_bound_not_executed(database: Database, clock: FakeClock) -> None:
    table = database.table  # type: ignore[attr-defined]
    database.execute(f"insert into {table} values ({database.placeholder}, 1)", ("safe",))
    evil = f"x'); DROP TABLE {table}; --"
    sensor = BackoffSqlSensor(
        task_id="wait_row",
        conn_id=database.conn_id,
        sql=f"select count(*) from {table} where name = {database.placeholder}",
        parameters=(evil,),
        poke_interval=10,
        timeout=30,
        soft_fail=True,
    )
    with pytest.raises(
        compat.locations.AirflowSkipException
    ):  # count(*) = 0 every time -> timeout -> soft_fail skip
        sensor.execute(make_context())
    assert database.table_exists(table)
    database.execute(f"insert into {table} values ({database.placeholder}, 1)", (evil,))
    assert sensor.poke(make_context()) is True  # the value is matched literally, as data


def test_only_one_row_is_fetched(
    database: Database, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = database.table  # type: ignore[attr-defined]
    for index in range(5):
        database.execute(f"insert into {table} values ({database.placeholder}, {index + 1})", (f"n{index}",))
    sensor = BackoffSqlSensor(task_id="wait_row", conn_id=database.conn_id, sql=f"select status from {table}")
    hook = sensor._get_hook()
    calls: list[str] = []
    real_get_conn = hook.get_conn

    class CursorSpy:
        def __init__(self, cursor: Any) -> None:
            self.cursor = cursor

        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(self.cursor, name)

    class ConnSpy:
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        def cursor(self) -> CursorSpy:
            return CursorSpy(self.conn.cursor())

        def __getattr__(self, name: str) -> Any:  # commit, autocommit, ... of the real connection
            return getattr(self.conn, name)

    monkeypatch.setattr(hook, "get_conn", lambda: ConnSpy(real_get_conn()))
    monkeypatch.setattr(sensor, "_get_hook", lambda: hook)
    assert sensor.poke(make_context()) is True
    assert "fetchone" in calls and "fetchall" not in calls and "fetchmany" not in calls


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"success": "no.such.fn"}, "success"),
        ({"failure": 42}, "failure must be None, a callable or a dotted path"),
        ({"fail_on_empty": "x"}, "fail_on_empty must be True or False; got 'x'"),
    ],
)
def test_mapped_and_unmapped_sql_sensors_get_identical_validation(kwargs: dict, message: str) -> None:
    base = {"task_id": "s", "conn_id": "db", "sql": "SELECT 1"}
    with pytest.raises(ValueError) as unmapped:
        BackoffSqlSensor(**base, **kwargs)
    with pytest.raises(ValueError) as mapped:
        BackoffSqlSensor.partial(**base, **kwargs)
    assert message in str(unmapped.value)
    assert str(mapped.value) == str(unmapped.value)
