"""BackoffTrigger never blocks the event loop; checks are bounded per connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_smart_ext import compat, conditions
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.triggers import gc_tuning
from tests.unit.clock import START, FakeClock
from tests.unit.triggers.helpers import (
    BLOCK_SECONDS,
    DELAY,
    POKES,
    READY_AT,
    THREADS,
    FlagSensor,
    first_event,
    make_trigger,
    sensor_check,
)

# --- never blocking the loop (real time on purpose) --------------------------------------------------------------


async def test_a_blocking_poke_does_not_delay_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # real time: no 3.x event guard
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    BLOCK_SECONDS["slow"] = 1.0
    READY_AT["slow"] = 0.0
    READY_AT["quick"] = 0.0
    now = time.time()
    policy = BackoffPolicy(initial=0.05, factor=1, jitter="none")
    lags: list[float] = []
    stop = asyncio.Event()

    async def watchdog() -> None:
        while not stop.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - before - 0.01)

    dog = asyncio.ensure_future(watchdog())
    slow = asyncio.ensure_future(
        first_event(make_trigger(sensor_check("slow"), policy, started_at=now, deadline=now + 60))
    )
    quick_done_at: list[float] = []

    async def quick() -> None:
        await first_event(make_trigger(sensor_check("quick"), policy, started_at=now, deadline=now + 60))
        quick_done_at.append(time.monotonic())

    started = time.monotonic()
    await asyncio.gather(quick(), slow)
    stop.set()
    await dog
    assert POKES["slow"] and "MainThread" not in THREADS["slow"]
    assert max(lags) < 0.5  # the 1 s sleep in poke ran in a worker thread
    assert quick_done_at[0] - started < 0.8  # the other trigger was not held up by the slow one


async def test_concurrency_is_bounded_per_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__MAX_CONCURRENT_CHECKS_PER_CONNECTION", "2")
    active = 0
    peak = 0

    async def probe() -> None:
        nonlocal active, peak
        async with runtime.connection_slot("conn_id:bounded"):
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.01)
            active -= 1

    await asyncio.gather(*(probe() for _ in range(10)))
    assert peak == 2


async def test_a_trigger_starts_the_opt_in_gc_schedule_of_its_loop(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[asyncio.AbstractEventLoop] = []
    monkeypatch.setattr(gc_tuning, "start", lambda: started.append(asyncio.get_running_loop()))
    READY_AT["a"] = START
    payload = await first_event(make_trigger(sensor_check("a"), BackoffPolicy(initial=10, factor=2, cap=80)))
    assert payload["status"] == "success"
    assert started == [asyncio.get_running_loop()]


def test_bad_config_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__SHARING_WINDOW_SECONDS", "soon")
    from airflow_smart_ext.wait_model.sharing import coalescing_window

    with pytest.raises(ValueError, match=r"\[smart_ext\] sharing_window_seconds"):
        coalescing_window(10)


# --- concurrency bound per connection ---------------------------------------------------------------------------


def test_concurrency_key_uses_a_conn_id_argument_of_a_sensor() -> None:
    base = sensor_check("x")
    assert conditions.concurrency_key(base) == f"sensor:{FlagSensor.__module__}.FlagSensor"
    for name in ("conn_id", "aws_conn_id", "http_conn_id"):
        check = {**base, "kwargs": {"name": "x", name: "warehouse"}}
        assert conditions.concurrency_key(check) == "conn_id:warehouse"
        assert conditions.make_shared_check(check).concurrency_key == "conn_id:warehouse"
    assert (
        conditions.concurrency_key({**base, "kwargs": {"conn_id": 3}})
        == f"sensor:{FlagSensor.__module__}.FlagSensor"
    )
    assert (
        conditions.concurrency_key({**base, "kwargs": {"conn_ids": "a"}})
        == f"sensor:{FlagSensor.__module__}.FlagSensor"
    )


async def test_hung_pokes_on_one_connection_do_not_block_the_class_on_another(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")

    def conn_check(name: str, conn_id: str) -> dict[str, Any]:
        check = sensor_check(name, cls="ConnSensor")
        check["kwargs"] = {"name": name, "conn_id": conn_id}
        return check

    for i in range(4):  # the default bound (4) of the same class, all hung on conn "stuck"
        DELAY[f"hung{i}"] = 10_000.0
    hung = [
        asyncio.ensure_future(first_event(make_trigger(conn_check(f"hung{i}", "stuck"), policy)))
        for i in range(4)
    ]
    READY_AT["fine"] = START + 15
    payload = await first_event(make_trigger(conn_check("fine", "healthy"), policy, started_at=START + 1))
    assert payload["status"] == "success"
    assert POKES["fine"] == [START + 11, START + 21]  # on its own schedule, not after the hung pokes
    for task in hung:
        task.cancel()
    await asyncio.gather(*hung, return_exceptions=True)
