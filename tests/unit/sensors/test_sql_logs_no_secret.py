"""A SQL wait logs neither its rendered SQL nor its bound values, at any level, through any logger, on every
path: poke, reschedule, deferrable (the worker's first poke, then the trigger), the zero-worker start trigger
and a condition watcher. A component's stdout is not masked the way a task log is (Airflow's masker only
knows registered secrets), so every record is read raw, before any handler or masker sees it.

Each test first proves its capture can fail: a canary written at DEBUG through the hook's own logger is
found (issue 35)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import sql as sql_checks
from airflow_smart_ext.sensors import BackoffSqlSensor
from airflow_smart_ext.triggers import log_lines
from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger
from tests.unit.clock import START, FakeClock
from tests.unit.sensors.helpers import Deferred, capture_defer, make_context
from tests.unit.triggers.helpers import _first_event, first_event

SECRET = "pw-4e1d-never-logged"
CANARY = "canary-7f3a-debug-line"
# The secret is bound (twice: as a value and inside the SQL text) and is also what the query finds.
SQL = f"select count(*) from secrets where token = ? and '{SECRET}' <> ''"


@contextlib.contextmanager
def _structlog_capture() -> Iterator[list[Any]]:
    try:
        import structlog
        from structlog.testing import capture_logs
    except ImportError:  # Airflow 2.11 logs through the standard library only
        yield []
        return
    previous = structlog.get_config()["wrapper_class"]
    # Every level: Airflow 3's loggers filter below INFO before any processor would see the line.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as captured:
            yield captured
    finally:
        structlog.configure(wrapper_class=previous)


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> Iterator[Callable[[], str]]:
    """Everything written while the test runs: every stdlib record at every level (whatever propagates
    where), every structlog event, and the process's own stdout/stderr."""
    records: list[logging.LogRecord] = []
    handle = logging.Logger.handle

    def every_record(logger: logging.Logger, record: logging.LogRecord) -> None:
        records.append(record)
        handle(logger, record)

    monkeypatch.setattr(logging.Logger, "handle", every_record)
    monkeypatch.setattr(logging.Logger, "isEnabledFor", lambda _logger, _level: True)  # every level
    with _structlog_capture() as structured:
        yield lambda: "\n".join(
            [*(record.getMessage() for record in records), *map(repr, structured), *capfd.readouterr()]
        )


@pytest.fixture
def conn_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite file whose table holds the secret, behind an Airflow connection."""
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table secrets (token text)")
        db.execute("insert into secrets values (?)", (SECRET,))
    name = f"smart_sqlite_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps({"conn_type": "sqlite", "host": str(path)}))
    return name


def sensor(conn_id: str, **kwargs: Any) -> BackoffSqlSensor:
    return BackoffSqlSensor(task_id="s", conn_id=conn_id, sql=SQL, parameters=[SECRET], **kwargs)


def assert_capture_sees_debug(conn_id: str, logged: Callable[[], str]) -> None:
    """The capture can fail: a DEBUG line through a SQL hook's own logger is there."""
    hook = sql_checks.db_hook(compat.locations.SensorBaseHook.get_connection(conn_id))
    hook.log.debug("a line with %s", CANARY)
    assert CANARY in logged()


def test_a_poke_logs_no_bound_value_and_no_sql_text(conn_id: str, logged: Callable[[], str]) -> None:
    assert_capture_sees_debug(conn_id, logged)
    assert sensor(conn_id).poke({}) is True  # the query ran, with the secret bound
    text = logged()
    assert SECRET not in text
    assert "Poking: SQL on connection" in text  # the line is there, without the values


def test_reschedule_mode_logs_no_bound_value(
    conn_id: str, logged: Callable[[], str], clock: FakeClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert_capture_sees_debug(conn_id, logged)
    with sqlite3.connect(tmp_path / "db.sqlite") as db:
        db.execute("delete from secrets")  # not met yet: the try is rescheduled
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (0, None))
    monkeypatch.setattr(compat.rescheduling, "first_reschedule_anchor", lambda context, now: START)
    with pytest.raises(compat.locations.AirflowRescheduleException):
        sensor(conn_id, mode="reschedule", poke_interval=10).execute(make_context())
    text = logged()
    assert SECRET not in text
    assert "Poking: SQL on connection" in text


async def test_a_deferrable_wait_logs_no_bound_value_on_the_worker_or_in_the_trigger(
    conn_id: str, logged: Callable[[], str], clock: FakeClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert_capture_sees_debug(conn_id, logged)
    with sqlite3.connect(tmp_path / "db.sqlite") as db:
        db.execute("delete from secrets")  # the worker's first poke: not met, so the task defers
    waiting = sensor(conn_id, deferrable=True, start_from_trigger=False, poke_interval=10, timeout=600)
    capture_defer(waiting, monkeypatch)
    with pytest.raises(Deferred) as deferral:
        waiting.execute(make_context())
    trigger = deferral.value.kwargs["trigger"]
    assert trigger.check["parameters"] == [SECRET]  # the trigger runs the query with the value bound

    async def release() -> None:  # met by the trigger's check #2 (20 s)
        await clock.asleep(15)
        with sqlite3.connect(tmp_path / "db.sqlite") as db:
            db.execute("insert into secrets values (?)", (SECRET,))

    writer = asyncio.ensure_future(release())
    payload = await first_event(trigger)
    await writer
    await log_lines.flushed()
    assert payload["status"] == "success"
    text = logged()
    assert SECRET not in text
    assert "Poking: SQL on connection" in text and "check #" in text  # both sides wrote their lines


@pytest.mark.skipif(
    not compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED,
    reason="this Airflow starts every task on a worker",
)
async def test_the_zero_worker_start_trigger_logs_no_bound_value(
    conn_id: str, logged: Callable[[], str], clock: FakeClock
) -> None:
    assert_capture_sees_debug(conn_id, logged)
    waiting = sensor(conn_id, deferrable=True, poke_interval=2, timeout=30)
    assert waiting.start_from_trigger
    trigger = BackoffStartTrigger(**waiting.start_trigger_args.trigger_kwargs)
    trigger.task_instance = SimpleNamespace(  # type: ignore[assignment]
        dag_id="d",
        task_id="s",
        run_id="r",
        map_index=-1,
        try_number=1,
        start_date=dt.datetime.fromtimestamp(START, dt.timezone.utc),
    )
    trigger.timeout_after = dt.datetime.fromtimestamp(START + 90, dt.timezone.utc)
    trigger._render_context = {
        "dag_run": SimpleNamespace(logical_date=None, data_interval_start=None, data_interval_end=None)
    }
    event = await _first_event(trigger)
    await log_lines.flushed()
    assert isinstance(event, compat.locations.TaskSuccessEvent)
    text = logged()
    assert SECRET not in text
    assert SECRET not in repr(trigger)
    assert "Zero-worker wait" in text


@pytest.mark.skipif(
    not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED, reason="asset watchers need Airflow >= 3.0"
)
async def test_a_sql_condition_watcher_logs_no_bound_value(
    conn_id: str, logged: Callable[[], str], clock: FakeClock
) -> None:
    from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher
    from airflow_smart_ext.watchers import sql_condition
    from tests.unit.watcher_helpers import collect

    assert_capture_sees_debug(conn_id, logged)
    watcher = ConditionWatcher(
        sql_condition(conn_id, SQL, parameters=[SECRET]), poke_interval=10, max_wait=40, jitter="none"
    )
    events = await collect(clock, watcher.run(), until=30, stop_after=1)
    await log_lines.flushed()
    assert [payload["value"] for _, payload in events] == [1]  # the query ran, with the secret bound
    text = logged()
    assert SECRET not in text
    assert "new value #1" in text


def test_a_hook_line_quoting_the_statement_or_a_value_is_dropped_whatever_its_wording(
    conn_id: str, logged: Callable[[], str]
) -> None:
    awkward = 'it\'s a "pw"\nwith-a-newline-1b9c'  # repr() escapes it inside a list
    hook = sql_checks.db_hook(compat.locations.SensorBaseHook.get_connection(conn_id))
    run = hook.run

    def own_words(sql: str, *args: Any, **kwargs: Any) -> Any:  # a hook subclass logging in its own words
        hook.log.warning("about to run %s", sql)
        hook.log.info("values: %r", kwargs.get("parameters"))
        hook.log.log(logging.ERROR, "first value %s", kwargs.get("parameters", [None])[0])
        hook.log.info("a line of its own")
        return run(sql, *args, **kwargs)

    hook.run = own_words  # type: ignore[method-assign]
    assert sql_checks.fetch_first_row(hook, SQL, [SECRET]) == (1,)
    assert sql_checks.fetch_first_row(hook, "select count(*) from secrets where token <> ?", [awkward]) == (
        1,
    )
    text = logged()
    assert SECRET not in text and "with-a-newline-1b9c" not in text
    assert "from secrets" not in text  # no statement either
    assert text.count("a line of its own") >= 2  # the hook's other lines stay (each call; 2.11 also prints)
