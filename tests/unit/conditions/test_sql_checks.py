"""SQL checks in the triggerer, against a real SQLite file: criteria, errors, sharing, one connection lookup."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.conditions import sql as sql_checks
from tests.unit.clock import START, FakeClock
from tests.unit.triggers.helpers import first_event, make_trigger, sql_check

# --- SQL against a real SQLite file ---------------------------------------------------------------------------------


async def test_sql_check_waits_for_the_row_then_succeeds(clock: FakeClock, sqlite_conn: str) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    inserted_at: list[float] = []

    async def insert_row_at_35s() -> None:
        # On the virtual clock, so the row lands strictly between check #3 (30 s) and check #4 (40 s).
        await clock.asleep(35)
        with sqlite3.connect(sqlite_conn) as db:
            db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'ready')")
        inserted_at.append(clock.now)

    writer = asyncio.ensure_future(insert_row_at_35s())
    payload = await first_event(make_trigger(sql_check(), policy))
    await writer
    assert inserted_at == [START + 35]
    assert payload["status"] == "success"
    assert payload["check_index"] == 4
    assert payload["xcom_value"] is None


async def test_sql_failure_criterion_and_per_subscriber_criteria(clock: FakeClock, sqlite_conn: str) -> None:
    with sqlite3.connect(sqlite_conn) as db:
        db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'broken')")
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    # Same query (one shared fetch), different criteria: one fails, the other has no failure criterion.
    failing = make_trigger(sql_check(), policy, deadline=START + 30)
    lenient = make_trigger(sql_check(failure=None), policy, deadline=START + 30)
    events = await asyncio.gather(first_event(failing), first_event(lenient))
    assert events[0]["status"] == "failure"
    assert "broken" in events[0]["message"]
    assert events[1]["status"] == "timeout"


async def test_sql_error_is_reported(clock: FakeClock, sqlite_conn: str) -> None:
    payload = await first_event(
        make_trigger(sql_check(sql="SELECT nope FROM partitions"), BackoffPolicy(initial=10))
    )
    # A permanent error (the statement is wrong) fails as before; a transient one is ridden out (below).
    assert payload["status"] == "error"
    assert "no such column: nope" in payload["message"]


async def test_sql_checks_of_identical_queries_are_shared(clock: FakeClock, sqlite_conn: str) -> None:
    calls: list[float] = []
    original = sql_checks.SqlSharedCheck.run

    async def counting(self: sql_checks.SqlSharedCheck, context: Any) -> Any:
        calls.append(clock.now)
        return await original(self, context)

    sql_checks.SqlSharedCheck.run = counting  # type: ignore[method-assign]
    try:
        policy = BackoffPolicy(initial=10, factor=1, jitter="none")
        events = await asyncio.gather(
            *(
                first_event(make_trigger(sql_check(), policy, seed=f"s{i}", deadline=START + 40))
                for i in range(5)
            )
        )
    finally:
        sql_checks.SqlSharedCheck.run = original  # type: ignore[method-assign]
    assert {e["status"] for e in events} == {"timeout"}
    assert len(calls) == 4  # +10, +20, +30, +40 (final) -- for five subscribers


# --- SQL: one connection lookup ------------------------------------------------------------------------------------


async def test_sql_check_does_not_look_the_connection_up_again_in_the_thread(
    clock: FakeClock, sqlite_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.sqlite.hooks.sqlite import SqliteHook

    lookups: list[str] = []

    def get_connection(cls: Any, conn_id: str) -> Any:
        lookups.append(conn_id)
        raise AssertionError("second connection lookup from the worker thread")

    monkeypatch.setattr(SqliteHook, "get_connection", classmethod(get_connection))
    with sqlite3.connect(sqlite_conn) as db:
        db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'ready')")
    payload = await first_event(make_trigger(sql_check(), BackoffPolicy(initial=10)))
    assert payload["status"] == "success", payload["message"]
    assert lookups == []
