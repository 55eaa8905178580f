"""BackoffTrigger under faults (issue 14): log lines off the loop, transient errors, silent_fail, the rate limit."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.triggers import check_groups, log_lines, transient_errors
from tests.unit.clock import START, FakeClock
from tests.unit.triggers.fault_sensors import OUTAGE_UNTIL, POKES, READY_AT, check
from tests.unit.triggers.helpers import first_event
from tests.unit.triggers.helpers import make_trigger as trigger

pytestmark = pytest.mark.usefixtures("fault_sensor_state")


# --- log lines never block the event loop ---------------------------------------------------------------


class ThreadRecordingLog:
    """Records each line with the thread that wrote it."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, int]] = []

    def _write(self, level: str, message: str, *args: Any) -> None:
        self.lines.append((level, message % args if args else message, threading.get_ident()))

    def info(self, message: str, *args: Any) -> None:
        self._write("info", message, *args)

    def warning(self, message: str, *args: Any) -> None:
        self._write("warning", message, *args)


async def test_trigger_log_lines_are_written_off_the_event_loop_and_before_the_event(
    clock: FakeClock,
) -> None:
    OUTAGE_UNTIL["log"] = START + 15
    READY_AT["log"] = START + 25
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    waiting = trigger(check("OutageSensor", name="log"), policy, share=False)
    log = ThreadRecordingLog()
    waiting._log = log
    assert (await first_event(waiting))["status"] == "success"
    # Every line is in the log when the event is yielded: the schedule, the ridden-out error, each check.
    text = [message for _, message, _ in log.lines]
    assert text[0].startswith("BackoffTrigger: ")
    assert [m[: len("check #1 failed (")] for level, m, _ in log.lines if level == "warning"] == [
        "check #1 failed ("
    ]
    assert text[-1].startswith("check #3 ") and text[-1].endswith("next check none"), text
    # ... and none was written by the event loop's thread (a full log socket would block the triggerer).
    assert threading.get_ident() not in {thread for _, _, thread in log.lines}


async def test_trigger_log_lines_reach_a_plain_logger_in_the_callers_context(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trigger_id: contextvars.ContextVar[int] = contextvars.ContextVar("trigger_id", default=0)
    seen: list[int] = []

    class Routed(logging.Filter):  # Airflow routes a line to its task's log by a context variable
        def filter(self, record: logging.LogRecord) -> bool:
            seen.append(trigger_id.get())
            return True

    logger = logging.getLogger("smart_ext_test_plain")  # Airflow 2.11 gives triggers a stdlib logger
    logger.addFilter(Routed())
    trigger_id.set(7)
    with caplog.at_level(logging.INFO, logger="smart_ext_test_plain"):
        log_lines.emit(logger, "info", "check #%d at %s", 3, "noon")
        await log_lines.flushed()
    assert [r.getMessage() for r in caplog.records] == ["check #3 at noon"]
    assert seen == [7]


async def test_the_flushes_of_a_burst_wake_the_loop_once_not_once_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 1,000 waits ending together each await a flush. A loop wake-up per flush is a byte through the loop's
    # self-pipe, and the loop reads that pipe until it is empty: a stream of them stalled the fan-out.
    loop = asyncio.get_running_loop()
    wake_ups: list[object] = []
    real_call_soon_threadsafe = loop.call_soon_threadsafe
    announced: list[Any] = []  # the flushes the writer has announced to the loop so far
    all_announced = threading.Event()

    def counting(callback: Any, *args: Any) -> Any:
        wake_ups.append(callback)
        handle = real_call_soon_threadsafe(callback, *args)
        if args and isinstance(args[0], list):  # the writer's wake-up: the flushes it resolves
            announced.extend(args[0])
            if len(announced) >= burst:
                all_announced.set()
        return handle

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    gate = threading.Event()
    written: list[str] = []

    def write(message: str, *args: Any) -> None:
        gate.wait(10)  # the writer is busy while the burst queues up behind it
        written.append(message % args)

    logger = SimpleNamespace(info=write)
    burst = 500
    flushes = []
    written_when_flushed: list[int] = []
    for index in range(burst):
        log_lines.emit(logger, "info", "check #%d", index)
        flush = asyncio.ensure_future(log_lines.flushed())
        flush.add_done_callback(lambda _, index=index: written_when_flushed.append(len(written) - index - 1))
        flushes.append(flush)
    await asyncio.sleep(0)  # every flush is queued
    gate.set()
    # The loop stays busy (blocked here) while the writer works through the burst, as in a large fan-out,
    # until the writer has announced the last flush.
    assert all_announced.wait(10)
    await asyncio.wait_for(asyncio.gather(*flushes), 10)
    assert written == [f"check #{index}" for index in range(burst)]
    # Every flush is announced only after every line queued before it is written (none missing: >= 0) ...
    assert len(written_when_flushed) == burst and min(written_when_flushed) >= 0
    # ... and the whole burst with a wake-up of the loop per written batch, not one per flush.
    assert 1 <= len(wake_ups) <= 2 * burst // log_lines.WRITE_BATCH + 2, len(wake_ups)


# --- transient errors -------------------------------------------------------------------------------------


async def test_a_shared_outage_is_ridden_out_by_every_subscriber(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[str] = []
    monkeypatch.setattr(compat.locations.Stats, "incr", lambda name, *a, **k: counted.append(name))
    OUTAGE_UNTIL["c"] = START + 60
    READY_AT["c"] = START + 90
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    triggers = [trigger(check("OutageSensor", name="c"), policy, seed="shared") for _ in range(8)]
    payloads = await asyncio.gather(*(first_event(t) for t in triggers))
    # 0 failed: every subscriber succeeds after the recovery, none saw the errors as an event.
    assert [p["status"] for p in payloads] == ["success"] * 8
    assert min(POKES["c"]) < START + 60 <= max(POKES["c"])
    assert counted.count(transient_errors.METRIC_TRANSIENT_ERRORS) >= 8 * 5  # each subscriber, each check


async def test_transient_errors_until_the_deadline_end_in_timeout(clock: FakeClock) -> None:
    OUTAGE_UNTIL["d"] = float("inf")
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(check("OutageSensor", name="d"), policy, deadline=START + 60))
    assert payload["status"] == "timeout"


async def test_permanent_errors_fail_and_silent_fail_keeps_waiting_in_the_triggerer(
    clock: FakeClock,
) -> None:
    OUTAGE_UNTIL["p"] = START + 30
    READY_AT["p"] = START + 40
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    spec = check("OutageSensor", name="p", error="permanent")
    failed = await first_event(trigger(spec, policy, share=False))
    assert failed["status"] == "error" and "bad configuration" in failed["message"]
    # silent_fail: no event per error (no worker launch), the wait goes on to its success.
    silent = await first_event(trigger(spec, policy, share=False, silent_fail=True))
    assert silent["status"] == "success"


async def test_user_transient_errors_travel_as_dotted_paths(clock: FakeClock) -> None:
    OUTAGE_UNTIL["u"] = START + 30
    READY_AT["u"] = START + 40
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    spec = check("OutageSensor", name="u", error="permanent")
    payload = await first_event(
        trigger(spec, policy, share=False, transient_errors=["builtins.RuntimeError"])
    )
    assert payload["status"] == "success"
    with pytest.raises(ValueError, match="transient_errors: cannot import 'no.such.Error'"):
        trigger(spec, policy, transient_errors=["no.such.Error"])


# --- the rate limit -------------------------------------------------------------------------------------------


async def test_rate_limit_delays_checks_never_drops_them_never_past_the_deadline(
    clock: FakeClock,
) -> None:
    # 30 distinct conditions on one connection, all due at the start, 2 checks/s allowed.
    policy = BackoffPolicy(initial=1000, factor=1, jitter="none", splay=0)
    READY_AT.update({f"r{i}": START for i in range(30)})
    triggers = [
        trigger(
            check("OutageSensor", name=f"r{i}", conn_id="limited"),
            policy,
            rate_limit=2.0,
            started_at=START - 1000,  # check #1 (the first in the triggerer) is due now
            deadline=START + 10,
            seed=f"s{i}",
        )
        for i in range(30)
    ]
    payloads = await asyncio.gather(*(first_event(t) for t in triggers))
    assert [p["status"] for p in payloads] == ["success"] * 30  # none dropped
    starts = sorted(times[0] for times in POKES.values())
    # Within budget until the deadline: at most rate * w + 1 checks in any window of w seconds.
    before_deadline = [t for t in starts if t < START + 10]
    for i, first in enumerate(before_deadline):
        in_window = [t for t in before_deadline[i:] if t < first + 5]
        assert len(in_window) <= 2.0 * 5 + 1
    # The checks that did not fit before the deadline ran at the deadline, never later.
    assert max(starts) == pytest.approx(START + 10, abs=1e-3)
    assert len(before_deadline) == 20


def test_token_bucket_spaces_reservations_and_yields_to_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(seam, "now", lambda: now[0])
    bucket = check_groups.TokenBucket(rate=4.0)
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.25, 0.5, 0.75]
    assert bucket.reserve(not_after=100.3) == pytest.approx(0.3)  # over budget at its deadline, not later
    now[0] = 110.0
    assert bucket.reserve() == 0.0
