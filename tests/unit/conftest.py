"""Fixtures shared by the unit tests."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any
from urllib.parse import quote

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.triggers import log_lines
from tests.unit.clock import FakeClock
from tests.unit.triggers import fault_sensors
from tests.unit.triggers.helpers import BLOCK_SECONDS, POKES, RAISE, READY_AT, THREADS


@pytest.fixture(autouse=True)
def _reset_state() -> Any:
    """Every test starts with empty registries of the trigger tests' sensors."""
    for registry in (POKES, READY_AT, RAISE, BLOCK_SECONDS, THREADS):
        registry.clear()
    yield


@pytest.fixture
async def clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake clock behind the package's one clock seam (``airflow_smart_ext/clock.py``): the time, a worker's
    blocking sleep, the triggerer's awaited sleeps and timers, and the waits on threads or the supervisor that
    virtual time must not pass."""
    fake = FakeClock()
    monkeypatch.setattr(seam, "now", fake.time)
    monkeypatch.setattr(seam, "sleep", fake.sleep)
    monkeypatch.setattr(seam, "asleep", fake.asleep)
    monkeypatch.setattr(seam, "call_later", fake.call_later)
    monkeypatch.setattr(runtime, "run_blocking", fake.run_blocking)
    real_aget_connection = compat.connections.aget_connection

    async def aget_connection(conn_id: str, within: float | None = None) -> Any:
        with fake.busy():  # a thread on 2.11, the supervisor on 3.x
            return await real_aget_connection(conn_id, within)

    monkeypatch.setattr(compat.connections, "aget_connection", aget_connection)
    real_flushed = log_lines.flushed

    async def flushed() -> None:
        with fake.busy():  # the log writer thread
            await real_flushed()

    monkeypatch.setattr(log_lines, "flushed", flushed)
    driver = asyncio.ensure_future(fake.drive())
    yield fake
    driver.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driver


@pytest.fixture
def sqlite_conn(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite file behind an Airflow connection (``smart_ext_unit_sqlite``)."""
    path = tmp_path / "events.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE partitions (name TEXT, state TEXT)")
    # The sqlite hook wants the file path URL-quoted as the host ("sqlite:////abs" fails: invalid uri authority).
    monkeypatch.setenv("AIRFLOW_CONN_SMART_EXT_UNIT_SQLITE", f"sqlite://{quote(str(path), safe='')}")
    return str(path)


@pytest.fixture
def fault_sensor_state() -> Any:
    """Empty registries of the fault sensors; hung pokes released at the end."""
    fault_sensors.POKES.clear()
    fault_sensors.OUTAGE_UNTIL.clear()
    fault_sensors.READY_AT.clear()
    fault_sensors.RELEASE.clear()
    fault_sensors.RECOVERED.clear()
    yield
    fault_sensors.RELEASE.set()
    fault_sensors.RECOVERED.set()
    # Released hung threads end now; the next test starts with an empty abandoned-check budget.
    deadline = time.monotonic() + 5
    while runtime.ABANDONED.detached and time.monotonic() < deadline:
        time.sleep(0.01)
