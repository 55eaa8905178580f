"""A SQL poke logs neither its rendered SQL nor its bound values, at any level, through any logger: a
component's stdout is not masked the way a task log is (Airflow's masker only knows registered secrets)."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_smart_ext.sensors import BackoffSqlSensor

SECRET = "pw-4e1d-never-logged"


@contextlib.contextmanager
def _structlog_capture() -> Iterator[list[Any]]:
    try:
        from structlog.testing import capture_logs
    except ImportError:  # Airflow 2.11 logs through the standard library only
        yield []
        return
    with capture_logs() as captured:
        yield captured


def test_a_poke_logs_no_bound_value_and_no_sql_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table secrets (token text)")
        db.execute("insert into secrets values (?)", (SECRET,))
    conn_id = f"smart_sqlite_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "sqlite", "host": str(path)})
    )
    sensor = BackoffSqlSensor(
        task_id="s",
        conn_id=conn_id,
        sql=f"select count(*) from secrets where token = ? and '{SECRET}' <> ''",
        parameters=[SECRET],
    )
    records: list[logging.LogRecord] = []
    handle = logging.Logger.handle

    def every_record(logger: logging.Logger, record: logging.LogRecord) -> None:  # whatever propagates where
        records.append(record)
        handle(logger, record)

    monkeypatch.setattr(logging.Logger, "handle", every_record)
    monkeypatch.setattr(logging.Logger, "isEnabledFor", lambda _logger, _level: True)  # every level
    with contextlib.ExitStack() as stack:
        structured = stack.enter_context(_structlog_capture())  # Airflow 3's task SDK logs through structlog
        assert sensor.poke({}) is True  # the query ran, with the secret bound
    out, err = capfd.readouterr()
    logged = "\n".join([*(record.getMessage() for record in records), *map(repr, structured), out, err])
    assert SECRET not in logged
    assert "Poking: SQL on connection" in logged  # the line is there, without the values
