"""Trigger rows written by the previous release still build working triggers (issue "One wait, one model", part 6).

``tests/unit/fixtures/previous_release/*.json`` hold what the previous release's own code stored (see
``generate.py`` there): worker-first ``BackoffTrigger`` deferrals (SQL, and a custom sensor with a sealed
secret), zero-worker start triggers (plain and templated) and asset watchers. Each row goes through Airflow's
own ``Trigger`` model (kwargs encrypted and decoded as the triggerer reads them), its classpath is imported
the way the triggerer imports it, the class is called with the stored kwargs, and the trigger must then
serialize to a trigger that builds again and make its first check against a real SQLite database (an Airflow
connection) with the event a user expects. A moved class without an importable alias, a renamed or dropped
kwarg, or a changed meaning of a stored value fails here. Live proof: tests/integration/test_upgrade_live.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.triggers.base import BaseTrigger, TaskSuccessEvent

from airflow_smart_ext import compat
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS
from airflow_smart_ext.sensors import BackoffSqlSensor
from tests.unit.fixtures.previous_release import generate
from tests.unit.fixtures.previous_release.sensors import LoadedDaySensor

try:  # where each triggerer imports a row's classpath from
    from airflow._shared.module_loading import import_string  # 3.x
except ImportError:
    from airflow.utils.module_loading import import_string  # type: ignore[no-redef]  # 2.11

FIXTURES = Path(generate.__file__).parent
ROWS = {path.stem: json.loads(path.read_text()) for path in sorted(FIXTURES.glob("*.json"))}
RELEASE = "aa2412604769fd7b700ae833d9e78cba86c320b4"


@dataclass(frozen=True)
class Expected:
    """What a row is and what its trigger must report once the condition holds."""

    kind: str  # "deferral" (BackoffTrigger), "start" (zero-worker) or "watcher"
    sensor: type | None = None  # the task whose ``next_method`` resumes after the event
    xcom_value: Any = None  # deferral: the event's XCom value
    templated: bool = False  # start: its fields hold Jinja the 3.3 triggerer renders


EXPECTED = {
    "backoff_sql": Expected("deferral", BackoffSqlSensor),
    "backoff_sensor_sealed": Expected("deferral", LoadedDaySensor, {"day": generate.DAY, "state": "ready"}),
    "start_sql": Expected("start", BackoffSqlSensor),
    "start_templated": Expected("start", BackoffSqlSensor, templated=True),
    "watcher_sql": Expected("watcher"),
    "watcher_sensor": Expected("watcher"),
}


def _only_where_written(name: str) -> None:
    """Rows the previous release could not write on this Airflow line are not stored in any DB here."""
    if EXPECTED[name].kind == "watcher" and not AIRFLOW_V_3_0_PLUS:
        pytest.skip("asset watchers need Airflow >= 3.0: 2.11 never stores a watcher row")
    if EXPECTED[name].templated and not compat.start_in_triggerer.START_FROM_TRIGGER_RENDERS_TEMPLATES:
        pytest.skip("before 3.3 a templated sensor starts on a worker: no templated start row is stored")
    if EXPECTED[name].kind == "start" and not compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED:
        pytest.skip("Airflow 3.0-3.2 start no sensor in the triggerer: no start row is stored")


def _reset_fernet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the Fernet objects built from an earlier ``[core] fernet_key`` (each Airflow caches its own)."""
    import airflow.models.crypto as core_crypto

    if hasattr(core_crypto.get_fernet, "cache_clear"):
        core_crypto.get_fernet.cache_clear()
    else:  # 2.11 keeps it in a module global
        monkeypatch.setattr(core_crypto, "_fernet", None)
    try:  # 3.1+: the Task SDK keeps its own
        from airflow.sdk import crypto as sdk_crypto
    except ImportError:
        return
    sdk_crypto.get_fernet.cache_clear()


@pytest.fixture
def release_fernet_key(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``[core] fernet_key`` as on the deployment that wrote the rows (sealed values open only with it)."""
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", generate.FERNET_KEY)
    _reset_fernet(monkeypatch)
    yield
    monkeypatch.delenv("AIRFLOW__CORE__FERNET_KEY")
    _reset_fernet(monkeypatch)


@pytest.fixture
def conditions_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The rows' connection, to a real SQLite file with the condition already true."""
    path = tmp_path / "conditions.db"
    with sqlite3.connect(path) as db:
        db.execute(generate.SCHEMA)
        db.execute("INSERT INTO loads VALUES (?, 'ready', ?)", (generate.DAY, generate.API_TOKEN))
    monkeypatch.setenv(f"AIRFLOW_CONN_{generate.CONN_ID.upper()}", generate.sqlite_uri(path))
    return path


def stored_kwargs(classpath: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` through a trigger row and back, as the triggerer reads them (3.3 ``create_triggers``:
    ``Trigger._decrypt_kwargs`` then ``smart_decode_trigger_kwargs``; 2.11: ``Trigger.kwargs``)."""
    from airflow.models.trigger import Trigger

    row = Trigger(classpath=classpath, kwargs=kwargs)
    try:  # Airflow 3.3 decodes each kwarg on its own
        from airflow.serialization.decoders import smart_decode_trigger_kwargs
    except ImportError:  # earlier lines read ``Trigger.kwargs``
        decoded: dict[str, Any] = row.kwargs
        return decoded

    return {
        key: smart_decode_trigger_kwargs(value)
        for key, value in row._decrypt_kwargs(row.encrypted_kwargs).items()
    }


def inflate(classpath: str, kwargs: dict[str, Any]) -> Any:
    """The trigger a triggerer builds from a row: ``import_string(classpath)(**kwargs)``."""
    return import_string(classpath)(**stored_kwargs(classpath, kwargs))


def test_every_row_kind_of_the_previous_release_is_covered() -> None:
    assert set(ROWS) == set(EXPECTED)
    assert {row["release"] for row in ROWS.values()} == {RELEASE}
    assert {row["classpath"] for row in ROWS.values()} == {
        "airflow_smart_ext.triggers.backoff.BackoffTrigger",
        "airflow_smart_ext.triggers.start.BackoffStartTrigger",
        "airflow_smart_ext.triggers.watcher.ConditionWatcher",
    }
    sealed = ROWS["backoff_sensor_sealed"]["kwargs"]["check"]["kwargs"]["api_token"]
    assert set(sealed) == {"__smart_ext_sealed__"}  # the secret is stored sealed, never in plaintext


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_stored_row_builds_a_trigger_that_serializes_and_builds_again(
    name: str, release_fernet_key: None
) -> None:
    _only_where_written(name)
    row = ROWS[name]
    trigger = inflate(row["classpath"], row["kwargs"])
    assert isinstance(trigger, BaseTrigger)
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # a row holds JSON
    again = inflate(classpath, kwargs)
    assert type(again) is type(trigger)
    assert again.serialize() == (classpath, kwargs)
    expected = EXPECTED[name]
    if expected.sensor is not None:
        # The task resumes on a worker running the new code as Airflow calls it (``resume_execution``): the
        # stored next_method with the context, then the stored next_kwargs and the trigger's event by keyword.
        resume = getattr(expected.sensor, row["next_method"])
        inspect.signature(resume).bind(None, {}, event={"status": "success"}, **row["next_kwargs"])


async def _first_event(trigger: Any) -> Any:
    events = trigger.run()
    try:
        return await events.__anext__()
    finally:
        await events.aclose()


def _start_as_the_triggerer_does(trigger: Any, row: dict[str, Any], now: float) -> None:
    """What the triggerer gives a start trigger before ``run``: the task instance (with the task, 3.3), the
    trigger timeout of the try and, 3.3+, the rendered template fields."""
    kwargs = row["kwargs"]
    task = SimpleNamespace(  # the serialized task the triggerer loads (template fields, start_trigger_args)
        task_id="start",
        template_fields=tuple(name for name in kwargs if name != "start"),
        template_ext=(".sql",),
        render_template_as_native_obj=None,
        start_trigger_args=SimpleNamespace(trigger_kwargs=kwargs),
    )
    started = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    trigger.task_instance = SimpleNamespace(
        dag_id="previous_release",
        task_id="start",
        run_id="scheduled__2026-01-02",
        map_index=-1,
        try_number=1,
        start_date=started,  # 2.11: the start of the try
        task=task,
    )
    backstop = float(kwargs["start"]["backstop_seconds"])
    trigger.timeout_after = started + dt.timedelta(seconds=backstop)  # 3.x: the start of the try + backstop
    if AIRFLOW_V_3_0_PLUS:
        logical = dt.datetime.fromisoformat(f"{generate.DAY}T00:00:00+00:00")
        dag_run = SimpleNamespace(
            logical_date=logical,
            data_interval_start=logical,
            data_interval_end=logical + dt.timedelta(days=1),
        )
        trigger.render_template_fields(context={"ds": generate.DAY, "dag_run": dag_run})


async def _tick(clock: Any) -> None:
    while True:
        await clock.asleep(1.0)


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_a_stored_row_makes_its_first_check_and_reports_the_condition(
    name: str, release_fernet_key: None, conditions_db: Path, clock: Any, request: pytest.FixtureRequest
) -> None:
    _only_where_written(name)
    row, expected = ROWS[name], EXPECTED[name]
    trigger = inflate(row["classpath"], row["kwargs"])
    if expected.kind == "deferral":
        # The triggerer picks the row up right after the worker deferred (check #0 done there).
        clock.now = float(row["kwargs"]["started_at"]) + 1
        payload = (await _first_event(trigger)).payload
        assert (payload["status"], payload["xcom_value"]) == ("success", expected.xcom_value)
        assert payload["check_index"] == 1  # the first check in the triggerer saw the condition
    elif expected.kind == "start":
        if not AIRFLOW_V_3_0_PLUS:
            request.getfixturevalue("airflow_db")  # 2.11 reads the run's dates from the metadata DB
        _start_as_the_triggerer_does(trigger, row, clock.now)
        if expected.templated:
            assert trigger.serialize()[1]["parameters"] == [generate.DAY]  # rendered, as the triggerer does
        # Virtual time moves one second at a time while the check runs: the only other timer is the hung-check
        # guard an hour ahead, which a loaded machine's slow lookup thread must not let the clock jump to.
        ticker = asyncio.ensure_future(_tick(clock))
        try:
            event = await _first_event(trigger)
        finally:
            ticker.cancel()
        assert isinstance(event, TaskSuccessEvent)  # ends in the triggerer on its first check
        assert event.xcoms["backoff_sensor_stats"]["pokes"] == 1  # the XCom users read
    else:
        event = await _first_event(trigger)
        assert (event.payload["value"], event.payload["seq"]) == (generate.DAY, 1)
