"""A deferred wait with a due time (``due=``): its trigger ends with one ``late`` event at the first check
scheduled at or after the due time that finds the condition not met — unless the try already said it — and a
worker says it and defers again (tests/unit/sensors/test_sensor_late.py). Worker-first and zero-worker alike,
on a virtual clock; rebuilt triggers (a triggerer restart) follow the same rule from their kwargs."""

from __future__ import annotations

import asyncio
import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy, replay
from airflow_smart_ext.timetables import DueTime
from airflow_smart_ext.triggers.worker_first import BackoffTrigger
from tests.unit.clock import START, FakeClock
from tests.unit.triggers.helpers import (
    POKES,
    READY_AT,
    _first_event,
    _trigger,
    first_event,
    make_trigger,
    sensor_check,
)

POLICY = BackoffPolicy(initial=10, factor=2, cap=80, jitter="none")


def schedule_after(due_at: float) -> Any:
    """The first check of the trigger's schedule at or after ``due_at`` (check #0 ran on the worker)."""
    return next(
        c
        for c in replay(POLICY, "seed-1", START, START + 3600, START + 3600)
        if c.index > 0 and c.at >= due_at
    )


async def test_the_first_check_at_or_after_the_due_time_not_met_ends_the_trigger_late(
    clock: FakeClock,
) -> None:
    payload = await first_event(make_trigger(sensor_check("never"), POLICY, due_at=START + 45))
    first_late = schedule_after(START + 45)  # checks at +10 +30 +70: #3
    assert payload["status"] == "late" and payload["check_index"] == first_late.index == 3
    assert payload["due_at"] == START + 45 and payload["checked_at"] == first_late.at == START + 70
    assert payload["message"] == "condition not met" and payload["xcom_value"] is None
    assert POKES["never"] == [START + 10, START + 30, START + 70]


async def test_a_last_check_that_is_late_ends_in_a_timeout_that_says_it_too(clock: FakeClock) -> None:
    # The deadline at +70 s makes check #3 the final one: the worker says late, then times out.
    payload = await first_event(
        make_trigger(sensor_check("never"), POLICY, due_at=START + 45, deadline=START + 70)
    )
    assert payload["status"] == "timeout" and payload["deadline_reached"] is True
    assert payload["due_at"] == START + 45 and payload["checked_at"] == START + 70


async def test_a_try_that_said_it_is_late_goes_on_to_its_outcome(clock: FakeClock) -> None:
    payload = await first_event(
        make_trigger(sensor_check("never"), POLICY, due_at=START + 45, late_told=True, deadline=START + 200)
    )
    assert payload["status"] == "timeout"


async def test_a_wait_met_before_its_due_time_is_never_late(clock: FakeClock) -> None:
    READY_AT["soon"] = START + 25
    payload = await first_event(make_trigger(sensor_check("soon"), POLICY, due_at=START + 45))
    assert payload["status"] == "success"


async def test_a_condition_met_at_the_first_check_after_the_due_time_is_a_success_not_late(
    clock: FakeClock,
) -> None:
    READY_AT["at_due"] = START + 60
    payload = await first_event(make_trigger(sensor_check("at_due"), POLICY, due_at=START + 45))
    assert payload["status"] == "success" and payload["check_index"] == 3


async def test_a_rebuilt_trigger_says_late_once_from_its_kwargs(clock: FakeClock) -> None:
    # The triggerer died after check #2 (+30 s) and came back at +100 s: its rebuilt trigger (the same kwargs)
    # makes the first check from then on, after the due time: it says late (nothing said it before).
    _, kwargs = make_trigger(sensor_check("down"), POLICY, due_at=START + 45, share=False).serialize()
    assert kwargs["due_at"] == START + 45 and kwargs["late_told"] is False
    first = asyncio.ensure_future(first_event(BackoffTrigger(**kwargs)))
    await clock.asleep(START + 35 - clock.now)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    clock.now = START + 100
    payload = await first_event(BackoffTrigger(**kwargs))
    assert payload["status"] == "late" and payload["checked_at"] == START + 150  # check #4 (+150 s)


async def test_a_trigger_without_a_due_time_serializes_as_before(clock: FakeClock) -> None:
    _, kwargs = make_trigger(sensor_check("x"), POLICY).serialize()
    assert "due_at" not in kwargs and "late_told" not in kwargs


# --- zero-worker: the due time is computed in the triggerer from the run ---------------------------------


def _due_trigger(name: str, due: DueTime, interval_end: dt.datetime, try_number: int = 1) -> Any:
    trigger = _trigger(name, START, timeout=600, due=due.to_dict())
    trigger._render_context = {
        "dag_run": SimpleNamespace(
            logical_date=None, data_interval_start=None, data_interval_end=interval_end, run_after=None
        )
    }
    trigger.task_instance.try_number = try_number
    return trigger


async def test_a_zero_worker_wait_computes_its_due_time_from_the_run_and_resumes_late(
    clock: FakeClock,
) -> None:
    interval_end = dt.datetime.fromtimestamp(START, dt.timezone.utc)
    event = await _first_event(_due_trigger("zw_late", DueTime(after=15), interval_end))
    assert not isinstance(event, compat.locations.TaskSuccessEvent)
    payload = event.payload
    assert payload["status"] == "late" and payload["due_at"] == pytest.approx(START + 15)
    assert payload["checked_at"] >= START + 15
    # the worker resumes with the try's facts and defers again on the same schedule and deadline
    assert payload["started_at"] == pytest.approx(START, abs=1e-3) and payload["seed"]


async def test_a_zero_worker_retry_after_the_due_time_leaves_it_to_the_worker_that_reads_the_record(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trigger cannot read the task state store: where one keeps what the task instance said (3.3+), the
    retry's first check past the due time resumes the task on a worker, which says it only if no earlier try
    did (``deferral.resume``); before 3.3 the retry takes it as said by its first try and says nothing."""
    interval_end = dt.datetime.fromtimestamp(START - 100, dt.timezone.utc)
    for kept, status in ((True, "late"), (False, "timeout")):
        monkeypatch.setattr(compat.task_state, "TASK_STATE_STORE_SUPPORTED", kept)
        trigger = _due_trigger(f"zw_retry_{kept}", DueTime(after=15), interval_end, try_number=2)
        event = await _first_event(trigger)
        assert event.payload["status"] == status, (kept, event.payload)


async def test_a_zero_worker_due_time_that_cannot_be_computed_is_logged_not_fatal(clock: FakeClock) -> None:
    READY_AT["zw_bad"] = START
    trigger = _trigger("zw_bad", START, timeout=600, due={"at": "09:30", "timezone": "Nowhere/Atlantis"})
    event = await _first_event(trigger)
    assert isinstance(event, compat.locations.TaskSuccessEvent)
