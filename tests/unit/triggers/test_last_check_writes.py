"""The triggerer's last-check writes (issue 35 part 2): per check group, on a kind change at once, the same
kind at most once a minute; a failing write is logged once and never fails or slows a check."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from airflow_smart_ext.triggers import last_check_writes as writes
from airflow_smart_ext.triggers.last_check_writes import LastCheckRecorder
from airflow_smart_ext.wait_model.last_check import LastCheck


def check(clock: Any, kind: str = "transient error", errors: int = 1, error_class: str = "E") -> LastCheck:
    failed = kind.endswith("error")
    return LastCheck(kind, clock.now, clock.now, errors if failed else 0, error_class if failed else None)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_kind_change_writes_at_once_and_the_same_kind_at_most_once_a_minute(clock: Any) -> None:
    written: list[dict[str, Any]] = []

    async def write(record: dict[str, Any]) -> None:
        written.append(record)

    recorder = LastCheckRecorder()
    recorder.record(check(clock, "not met"), write)
    await settle()
    assert [record["outcome"] for record in written] == ["not met"]
    for errors in (1, 2, 3):  # the kind changes: written at once, then throttled
        clock.now += 10
        recorder.record(check(clock, errors=errors), write)
    await settle()
    assert [(record["outcome"], record["errors"]) for record in written] == [
        ("not met", 0),
        ("transient error", 1),
    ]
    clock.now += 41  # 61 s after the first error: the count is written again, its since kept
    recorder.record(check(clock, errors=4), write)
    await settle()
    assert (written[-1]["errors"], written[-1]["since"]) == (4, written[1]["since"])
    assert len(written) == 3
    clock.now += 1
    recorder.record(check(clock, error_class="OtherError"), write)  # another error class is another kind
    recorder.record(check(clock, "not met"), write)
    await settle()
    assert [(record["outcome"], record["error_class"]) for record in written[3:]] == [
        ("transient error", "OtherError"),
        ("not met", None),
    ]


async def test_ten_thousand_members_of_one_group_write_once_per_check(clock: Any) -> None:
    calls = 0

    async def write(record: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1

    recorder = LastCheckRecorder()  # the group's (check_groups.CheckGroup.last_check)
    for _ in range(10_000):  # every member served by the same failing check
        recorder.record(check(clock), write)
    await settle()
    assert calls == 1
    for _ in range(10_000):
        recorder.record(check(clock, "not met"), write)
    await settle()
    assert calls == 2


async def test_a_failing_write_is_logged_once_and_the_check_goes_on(
    clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    attempts = 0
    secret = "pw-09aa-never-logged"

    async def write(record: dict[str, Any]) -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError(f"store refused {secret}")

    recorder = LastCheckRecorder()
    with caplog.at_level(logging.WARNING, logger=writes.__name__):
        recorder.record(check(clock, "not met"), write)  # returns at once: the write is in the background
        await settle()
        clock.now += 61
        recorder.record(check(clock, "not met"), write)
        await settle()
    assert attempts == 2
    lines = [record.getMessage() for record in caplog.records if record.name == writes.__name__]
    assert len(lines) == 1 and "ConnectionError" in lines[0] and secret not in lines[0]
    assert recorder.current is not None and recorder.current.outcome == "not met"


async def test_a_slow_write_does_not_hold_the_check(clock: Any) -> None:
    release = asyncio.Event()

    async def write(record: dict[str, Any]) -> None:
        await release.wait()

    before = set(writes._writes)  # writes of other tests (their loops are gone) are not this test's
    recorder = LastCheckRecorder()
    recorder.record(check(clock), write)  # would hang here if the check awaited its write
    assert len(writes._writes - before) == 1
    release.set()
    await settle()
    assert not writes._writes - before and not recorder._writing


async def test_no_task_instance_writes_nothing(clock: Any) -> None:
    before = set(writes._writes)
    recorder = LastCheckRecorder()
    recorder.record(check(clock), None)
    assert recorder.current is None and not writes._writes - before


async def test_identical_waits_write_one_record_per_group_through_their_task_xcom(
    clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty waits on one failing, then false, then true condition: the group's record is written as one
    member's XCom on each kind change (and a count update a minute on), never once per wait per check."""
    from types import SimpleNamespace

    from airflow_smart_ext import compat
    from airflow_smart_ext.backoff import BackoffPolicy
    from airflow_smart_ext.wait_model.last_check import XCOM_KEY
    from tests.unit.clock import START
    from tests.unit.triggers.fault_sensors import OUTAGE_UNTIL, READY_AT, check
    from tests.unit.triggers.helpers import first_event, make_trigger

    written: list[tuple[str, str, dict[str, Any]]] = []

    async def aset_task_xcom(ti: Any, key: str, value: Any) -> None:
        written.append((ti.task_id, key, value))

    monkeypatch.setattr(compat.task_xcoms, "aset_task_xcom", aset_task_xcom)
    OUTAGE_UNTIL["lastcheck"] = START + 100  # "database is locked" (transient) at +30, +60, +90
    READY_AT["lastcheck"] = START + 185  # then false at +120, +150, +180; true at +210
    triggers = []
    for i in range(20):
        trigger = make_trigger(
            check("OutageSensor", name="lastcheck"),
            BackoffPolicy(initial=30, factor=1, jitter="none"),
            started_at=START + i * 0.1,
        )
        trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id=f"t{i}", map_index=-1)
        triggers.append(trigger)
    events = await asyncio.gather(*(first_event(trigger) for trigger in triggers))
    await settle()
    assert {event["status"] for event in events} == {"success"}
    assert {key for _, key, _ in written} == {XCOM_KEY}
    kinds = [record["outcome"] for _, _, record in written]
    assert [kind for i, kind in enumerate(kinds) if i == 0 or kinds[i - 1] != kind] == [
        "transient error",
        "not met",
        "met",
    ]
    assert len(written) <= 5  # 3 kind changes, one count update a minute into each run of a kind
    errors = [record for _, _, record in written if record["outcome"] == "transient error"]
    assert errors[0]["errors"] == 1 and errors[-1]["errors"] == 3
    assert {record["since"] for record in errors} == {errors[0]["since"]}
    assert errors[0]["error_class"] == "OperationalError"


async def test_a_steady_outcome_is_refreshed_every_ten_minutes_not_every_minute(clock: Any) -> None:
    written: list[dict[str, Any]] = []

    async def write(record: dict[str, Any]) -> None:
        written.append(record)

    recorder = LastCheckRecorder()
    for _ in range(20):  # a check every 30 s for 10 min, all "not met": nothing new to say
        recorder.record(check(clock, "not met"), write)
        await settle()
        clock.now += 30
    assert len(written) == 1
    recorder.record(check(clock, "not met"), write)  # 600 s after the first: its check time refreshed
    await settle()
    assert len(written) == 2 and written[1]["since"] == written[0]["since"] != written[1]["at"]


async def test_a_slow_store_never_piles_writes_up(clock: Any) -> None:
    """A flapping condition (error, not met, error, ...) while one write hangs: one write in flight, the
    newest record waiting for it, written once it returns."""
    release = asyncio.Event()
    written: list[dict[str, Any]] = []

    async def write(record: dict[str, Any]) -> None:
        await release.wait()
        written.append(record)

    before = set(writes._writes)
    recorder = LastCheckRecorder()
    for n in range(200):
        recorder.record(check(clock, "not met" if n % 2 else "transient error"), write)
        clock.now += 1
        await settle()
        assert len(writes._writes - before) == 1
    release.set()
    await settle()
    assert [record["outcome"] for record in written] == [
        "transient error",
        "not met",
    ]  # the first, the newest
    assert not writes._writes - before and not recorder._writing
