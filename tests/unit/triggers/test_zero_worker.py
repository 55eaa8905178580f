"""Zero-worker waits (issue 15): the parse-time plan (``start_from_trigger`` + static ``StartTriggerArgs`` or a
worker-first reason) and ``BackoffStartTrigger`` run on a virtual clock. Real-Airflow proof:
tests/integration/test_zero_worker_live.py."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.backoff import aligned_start
from airflow_smart_ext.sensors import BackoffSqlSensor
from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger, reserved_field_names
from tests.unit.clock import START
from tests.unit.triggers.helpers import POKES, READY_AT, ArgSensor, _first_event, _trigger


def sql_sensor(**kwargs: Any) -> BackoffSqlSensor:
    defaults: dict[str, Any] = {
        "task_id": "wait",
        "conn_id": "db",
        "sql": "SELECT status FROM loads WHERE day = %(day)s",
        "parameters": {"day": "d1"},
        "deferrable": True,
        "poke_interval": 2,
        "timeout": 30,
    }
    return BackoffSqlSensor(**{**defaults, **kwargs})


# --- the plan at DAG parse --------------------------------------------------------------------------------


def test_untemplated_sensor_starts_in_the_triggerer_where_airflow_can() -> None:
    sensor = sql_sensor()
    assert sensor.start_from_trigger is compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED
    if not compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED:
        assert "does not start tasks in the triggerer" in str(sensor.worker_first_reason)
        return
    args = sensor.start_trigger_args
    assert args.trigger_cls == "airflow_smart_ext.triggers.start.BackoffStartTrigger"  # 0.1.0 triggerers too
    assert args.next_method == "execute_complete"
    assert args.timeout == dt.timedelta(seconds=30 + 60)  # timeout + grace: Airflow's timeout is a backstop
    kwargs = args.trigger_kwargs
    # Every template field is a top-level trigger kwarg (Airflow renders those on the trigger, 3.3+).
    assert {"sql", "parameters", "conn_id", "hook_params"} <= set(kwargs)
    start = kwargs["start"]
    assert start["fields"]["sql"] == ["sql"] and start["timeout"] == 30
    assert start["backstop_seconds"] == 90 and start["policy"]["initial"] == 2


def test_execution_timeout_caps_the_backstop_as_airflow_does() -> None:
    """Airflow's defer_task caps a start trigger's timeout by execution_timeout: so does the backstop."""
    capped = sql_sensor(execution_timeout=dt.timedelta(seconds=45))  # below timeout 30 s + 60 s grace
    roomy = sql_sensor(execution_timeout=dt.timedelta(hours=1))
    assert (
        capped.start_from_trigger
        is roomy.start_from_trigger
        is compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED
    )
    if not compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED:
        assert capped.start_trigger_args is None and roomy.start_trigger_args is None
        return
    for sensor, backstop in ((capped, 45), (roomy, 30 + 60)):
        assert sensor.start_trigger_args.trigger_kwargs["start"]["backstop_seconds"] == backstop
        assert sensor.start_trigger_args.timeout == dt.timedelta(seconds=backstop)


def test_templated_arguments_need_a_triggerer_that_renders() -> None:
    sensor = ArgSensor(task_id="wait", name="{{ ds }}", deferrable=True, poke_interval=2, timeout=30)
    expected = (
        compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED
        and compat.start_in_triggerer.START_FROM_TRIGGER_RENDERS_TEMPLATES
    )
    assert sensor.start_from_trigger is expected
    if expected:
        kwargs = sensor.start_trigger_args.trigger_kwargs
        assert kwargs["name"] == "{{ ds }}" and kwargs["start"]["fields"] == {"name": ["kwargs", "name"]}
    elif compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED:
        assert "does not render templates in the triggerer" in str(sensor.worker_first_reason)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"start_from_trigger": False}, "start_from_trigger=False"),
        ({"sql": "query.sql"}, "template file"),
    ],
)
def test_worker_first_with_a_reason(kwargs: dict[str, Any], reason: str) -> None:
    sensor = sql_sensor(**kwargs)
    assert sensor.start_from_trigger is False and sensor.start_trigger_args is None
    assert reason in str(sensor.worker_first_reason)


def test_an_upstream_xcom_argument_starts_worker_first_with_a_reason() -> None:
    from airflow import DAG

    from airflow_smart_ext.compat.locations import task

    with DAG("xcom_args", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)):

        @task
        def upstream() -> str:
            return "a"

        output = upstream()
        sensors = [
            ArgSensor(task_id="custom", name=output, deferrable=True),
            sql_sensor(task_id="sql_text", sql=output),
            sql_sensor(task_id="sql_parameters", parameters=output),
            sql_sensor(task_id="sql_nested", parameters={"day": output}),
        ]
    for sensor in sensors:
        assert sensor.start_from_trigger is False and sensor.start_trigger_args is None, sensor.task_id
        assert "comes from an upstream task's XCom" in str(sensor.worker_first_reason), sensor.task_id


def test_not_deferrable_never_starts_in_the_triggerer() -> None:
    sensor = sql_sensor(deferrable=False)
    assert sensor.start_from_trigger is False and sensor.worker_first_reason is None


def test_bad_start_from_trigger_fails_at_parse_naming_it() -> None:
    with pytest.raises(ValueError, match="start_from_trigger must be None, True or False"):
        sql_sensor(start_from_trigger="yes")


def test_reserved_field_names() -> None:
    assert reserved_field_names(["sql", "start", "log", "_x", "path"]) == ["_x", "log", "start"]


def test_trigger_round_trips_its_kwargs() -> None:
    sensor = sql_sensor()
    if not sensor.start_from_trigger:
        pytest.skip("this Airflow starts every task on a worker")
    kwargs = sensor.start_trigger_args.trigger_kwargs
    classpath, again = BackoffStartTrigger(**kwargs).serialize()
    assert classpath == sensor.start_trigger_args.trigger_cls and again == kwargs


async def test_success_ends_the_task_in_the_triggerer_with_the_xcom(clock: Any) -> None:
    READY_AT["a"] = START + 7
    event = await _first_event(_trigger("a", START))
    assert isinstance(event, compat.locations.TaskSuccessEvent)
    assert event.xcoms["return_value"] == {"name": "a"}
    assert event.xcoms["backoff_sensor_stats"]["mode"] == "deferrable"


async def test_check_zero_runs_at_once_in_its_slot(clock: Any) -> None:
    started = aligned_start(START, 2.0) + 1.9  # late in the grid slot of check #0
    clock.now = started
    READY_AT["b"] = started  # already true: check #0 (not a later one) must find it
    event = await _first_event(_trigger("b", started))
    assert isinstance(event, compat.locations.TaskSuccessEvent)
    assert event.xcoms["backoff_sensor_stats"]["pokes"] == 1


async def test_check_zero_is_served_by_any_check_since_the_start_of_the_try(clock: Any) -> None:
    # A triggerer may take a minute to start 1,000 such triggers: a late starter's check #0 reuses a check of
    # the same condition made since its try started (as fresh as poke mode's check #0), never an older one.
    fixed = {"poke_interval": 20, "splay": 0, "exponential_backoff": False}
    started = aligned_start(START, 20.0) + 0.1
    clock.now = started + 0.2
    waits = [asyncio.ensure_future(_first_event(_trigger("same", started, timeout=60, sensor_kwargs=fixed)))]
    await seam.asleep(15)  # then a second task of the same run starts, still in check #0's slot
    waits.append(
        asyncio.ensure_future(_first_event(_trigger("same", started, timeout=60, sensor_kwargs=fixed)))
    )
    await seam.asleep(1)
    assert POKES["same"] == [pytest.approx(started + 0.2, abs=1e-3)]  # one check #0 for both
    # A try that started after that check was made gets a check of its own.
    waits.append(
        asyncio.ensure_future(_first_event(_trigger("same", started + 10, timeout=60, sensor_kwargs=fixed)))
    )
    await seam.asleep(1)
    assert POKES["same"] == [pytest.approx(started + 0.2, abs=1e-3), pytest.approx(started + 16.2, abs=1e-3)]
    for wait in waits:
        wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)


async def test_timeout_resumes_on_a_worker_with_the_try_facts(clock: Any) -> None:
    event = await _first_event(_trigger("never", START, timeout=9))
    assert not isinstance(event, compat.locations.TaskSuccessEvent)
    payload = event.payload
    assert payload["status"] == "timeout"
    # The deadline is the start of the try (from Airflow's record) + timeout, wherever the trigger runs.
    assert payload["started_at"] == pytest.approx(START, abs=1e-3) and payload["deadline"] == pytest.approx(
        START + 9, abs=1e-3
    )


async def test_trigger_started_after_the_deadline_still_checks_once(clock: Any) -> None:
    clock.now = START + 12  # picked up late: after the deadline (+9 s), within the final-check grace
    READY_AT["late"] = START
    event = await _first_event(_trigger("late", START, timeout=9))
    assert isinstance(event, compat.locations.TaskSuccessEvent)


async def test_success_callbacks_end_on_a_worker_where_airflow_drops_them(clock: Any) -> None:
    READY_AT["cb"] = START
    event = await _first_event(_trigger("cb", START, success_callbacks=True))
    assert (
        isinstance(event, compat.locations.TaskSuccessEvent)
        is compat.start_in_triggerer.trigger_end_runs_success_callbacks()
    )


@pytest.mark.parametrize("try_number", [1, 2, 3])
async def test_a_later_try_ends_its_success_on_a_worker(clock: Any, try_number: int) -> None:
    # A clear or a retry stamped the task instance's end_date; a try the scheduler starts in the triggerer
    # keeps it, and so would a TaskSuccessEvent (end_date before start_date): only try 1 ends here.
    READY_AT[f"try{try_number}"] = START
    trigger = _trigger(f"try{try_number}", START)
    trigger.task_instance.try_number = try_number
    event = await _first_event(trigger)
    assert isinstance(event, compat.locations.TaskSuccessEvent) is (try_number == 1)
    if try_number > 1:
        assert event.payload["status"] == "success"
