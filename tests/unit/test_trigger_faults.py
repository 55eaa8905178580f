"""BackoffTrigger under faults (issue 14): hung checks, transient errors, silent_fail, the rate limit."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import importlib
import logging
import sqlite3
import sys
import threading
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.conditions import check_threads, runtime
from airflow_smart_ext.triggers import BackoffTrigger, log_lines, ride_out, sharing
from airflow_smart_ext.triggers import backoff as trigger_module
from tests.unit import test_trigger
from tests.unit.test_trigger import START, VirtualClock, first_event, sql_check
from tests.unit.test_trigger import make_trigger as trigger

vclock = test_trigger.vclock  # the virtual-clock fixture
sqlite_conn = test_trigger.sqlite_conn  # a SQLite file behind an Airflow connection

POKES: dict[str, list[float]] = defaultdict(list)
OUTAGE_UNTIL: dict[str, float] = {}
READY_AT: dict[str, float] = {}
RELEASE = threading.Event()  # hung pokes block until the test ends
RECOVERED = threading.Event()  # a "recovers" poke blocks until this is set, then its condition is true


class OutageSensor(compat.BaseSensorOperator):
    """'database is locked' until OUTAGE_UNTIL[name], then done from READY_AT[name] on."""

    def __init__(
        self, *, name: str, conn_id: str = "warehouse", error: str = "locked", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.name, self.conn_id, self.error = name, conn_id, error

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(sharing.now())
        if sharing.now() < OUTAGE_UNTIL.get(self.name, float("-inf")):
            if self.error == "locked":
                raise sqlite3.OperationalError("database is locked")
            raise RuntimeError("permanent: bad configuration")
        return sharing.now() >= READY_AT.get(self.name, float("inf"))


class HungSensor(compat.BaseSensorOperator):
    """A poke that never returns (until the test releases it)."""

    def __init__(self, *, name: str, conn_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name, self.conn_id = name, conn_id

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(time.time())
        RELEASE.wait(120)
        return False


@pytest.fixture(autouse=True)
def _reset() -> Any:
    POKES.clear()
    OUTAGE_UNTIL.clear()
    READY_AT.clear()
    RELEASE.clear()
    RECOVERED.clear()
    yield
    RELEASE.set()
    RECOVERED.set()
    # Released hung threads end now; the next test starts with an empty abandoned-check budget.
    deadline = time.monotonic() + 5
    while runtime.ABANDONED.detached and time.monotonic() < deadline:
        time.sleep(0.01)


def check(cls: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "type": "sensor",
        "classpath": f"{__name__}.{cls}",
        "kwargs": kwargs,
        "context": {"dag_id": "d", "task_id": "wait", "run_id": "r", "ds": "2026-01-02"},
    }


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
    vclock: VirtualClock,
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

    def counting(callback: Any, *args: Any) -> Any:
        wake_ups.append(callback)
        return real_call_soon_threadsafe(callback, *args)

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
    # The loop stays busy (blocked here) while the writer works through the burst, as in a large fan-out.
    deadline = time.monotonic() + 10
    while (len(written) < burst or not log_lines._lines.empty()) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the writer announces the last flush
    await asyncio.wait_for(asyncio.gather(*flushes), 10)
    assert written == [f"check #{index}" for index in range(burst)]
    # Every flush is announced only after every line queued before it is written (none missing: >= 0) ...
    assert len(written_when_flushed) == burst and min(written_when_flushed) >= 0
    # ... and the whole burst with a wake-up of the loop per written batch, not one per flush.
    assert 1 <= len(wake_ups) <= 2 * burst // log_lines.WRITE_BATCH + 2, len(wake_ups)


# --- transient errors -------------------------------------------------------------------------------------


async def test_a_shared_outage_is_ridden_out_by_every_subscriber(
    vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[str] = []
    monkeypatch.setattr(compat.Stats, "incr", lambda name, *a, **k: counted.append(name))
    OUTAGE_UNTIL["c"] = START + 60
    READY_AT["c"] = START + 90
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    triggers = [trigger(check("OutageSensor", name="c"), policy, seed="shared") for _ in range(8)]
    payloads = await asyncio.gather(*(first_event(t) for t in triggers))
    # 0 failed: every subscriber succeeds after the recovery, none saw the errors as an event.
    assert [p["status"] for p in payloads] == ["success"] * 8
    assert min(POKES["c"]) < START + 60 <= max(POKES["c"])
    assert counted.count(ride_out.METRIC_TRANSIENT_ERRORS) >= 8 * 5  # each subscriber, each check


async def test_transient_errors_until_the_deadline_end_in_timeout(vclock: VirtualClock) -> None:
    OUTAGE_UNTIL["d"] = float("inf")
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(check("OutageSensor", name="d"), policy, deadline=START + 60))
    assert payload["status"] == "timeout"


async def test_permanent_errors_fail_and_silent_fail_keeps_waiting_in_the_triggerer(
    vclock: VirtualClock,
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


async def test_user_transient_errors_travel_as_dotted_paths(vclock: VirtualClock) -> None:
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


# --- a connection lookup that fails in the triggerer ------------------------------------------------------------

needs_supervisor = pytest.mark.skipif(
    not compat.AIRFLOW_V_3_1_PLUS, reason="2.11 / 3.0 look connections up in a thread, not via a supervisor"
)


class FakeSupervisor:
    """``SUPERVISOR_COMMS`` of a 3.x triggerer: answers ``GetConnection`` with ``answer``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def asend(self, msg: Any) -> Any:
        self.asked.append(msg.conn_id)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def lookups_say_not_defined(monkeypatch: pytest.MonkeyPatch, times: int) -> list[float]:
    """Airflow's lookup answers "isn't defined" ``times`` times (what it answers when every secrets backend
    failed), then looks up as usual. Returns the times of the lookups; retry delays are cut to 10 ms."""
    monkeypatch.setattr(compat.connections, "CONNECTION_LOOKUP_RETRY_DELAYS", (0.01, 0.01, 0.01))
    hook = compat.SensorBaseHook
    calls: list[float] = []

    def not_defined_at_first(conn_id: str) -> bool:
        calls.append(time.monotonic())
        return len(calls) <= times

    if compat.AIRFLOW_V_3_1_PLUS:
        real_async = hook.aget_connection

        async def aget_connection(conn_id: str) -> Any:
            if not_defined_at_first(conn_id):
                raise compat.AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
            return await real_async(conn_id)

        monkeypatch.setattr(hook, "aget_connection", aget_connection)
    else:
        real_sync = hook.get_connection

        def get_connection(conn_id: str) -> Any:
            if not_defined_at_first(conn_id):
                raise compat.AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
            return real_sync(conn_id)

        monkeypatch.setattr(hook, "get_connection", get_connection)
    return calls


def with_supervisor(monkeypatch: pytest.MonkeyPatch, answer: Any) -> FakeSupervisor:
    from airflow.sdk.execution_time import task_runner

    supervisor = FakeSupervisor(answer)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
    return supervisor


def error_response(kind: str, detail: Any = None) -> Any:
    from airflow.sdk.execution_time.comms import ErrorResponse

    return ErrorResponse(error=kind, detail=detail)


def api_server_error() -> Any:
    """What the supervisor sends back when its API call raised (an error frame, raised by ``asend``)."""
    from airflow.sdk.exceptions import AirflowRuntimeError

    return AirflowRuntimeError(error_response("API_SERVER_ERROR", {"status_code": 500}))


async def test_a_connection_that_is_not_defined_for_a_moment_is_looked_up_again(
    monkeypatch: pytest.MonkeyPatch, sqlite_conn: str
) -> None:
    calls = lookups_say_not_defined(monkeypatch, 3)
    connection = await compat.aget_connection("smart_ext_unit_sqlite")
    assert connection.conn_id == "smart_ext_unit_sqlite"
    assert len(calls) == 4  # three answers "not defined", then found: no failed check at all
    assert all(later - earlier >= 0.009 for earlier, later in zip(calls, calls[1:], strict=False))


async def test_a_connection_that_stays_not_defined_fails_saying_how_often_it_was_looked_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_smart_ext.errors import classify

    if compat.AIRFLOW_V_3_1_PLUS:
        with_supervisor(monkeypatch, error_response("CONNECTION_NOT_FOUND", {"conn_id": "nope"}))
    calls = lookups_say_not_defined(monkeypatch, 1000)
    with pytest.raises(compat.AirflowNotFoundException) as raised:
        await compat.aget_connection("nope")
    assert len(calls) == 4
    assert "The conn_id `nope` isn't defined (looked up 4 times over 0.03s)" in str(raised.value)
    assert not classify(raised.value).transient


async def test_a_short_check_time_limit_keeps_the_lookups_within_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # check_timeout=5 s: only the 1-s re-ask fits in half of it, so the clear "not defined" comes in time.
    if compat.AIRFLOW_V_3_1_PLUS:
        with_supervisor(monkeypatch, error_response("CONNECTION_NOT_FOUND", {"conn_id": "nope"}))
    calls = lookups_say_not_defined(monkeypatch, 1000)
    monkeypatch.setattr(compat.connections, "CONNECTION_LOOKUP_RETRY_DELAYS", (0.01, 0.02, 0.04))
    with pytest.raises(compat.AirflowNotFoundException, match=r"looked up 2 times over 0.01s"):
        await compat.aget_connection("nope", within=0.05)
    assert len(calls) == 2


async def test_the_check_time_limit_reaches_the_connection_lookup(
    vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    async def aget_connection(conn_id: str, within: float | None = None) -> Any:
        seen.append(within)
        raise compat.AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")

    monkeypatch.setattr(compat, "aget_connection", aget_connection)
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(sql_check(conn_id="nope"), policy, share=False, check_timeout=7))
    assert payload["status"] == "error" and seen == [7.0], (payload, seen)


@needs_supervisor
@pytest.mark.parametrize(
    "answer, transient",
    [
        ("API_SERVER_ERROR", True),  # the supervisor's API call failed
        ("raises", True),  # the request itself failed
        ("found", True),  # the supervisor finds it now: the lookups just before had failed
        ("CONNECTION_NOT_FOUND", False),  # not defined
        pytest.param(
            "PERMISSION_DENIED",  # an authoritative deny
            False,
            marks=pytest.mark.skipif(
                not compat.AIRFLOW_V_3_2_PLUS,
                reason="the Task SDK's PERMISSION_DENIED error type arrived in Airflow 3.2 (older supervisors "
                "cannot send it)",
            ),
        ),
    ],
)
async def test_the_supervisor_tells_a_failed_lookup_from_a_connection_that_is_not_defined(
    monkeypatch: pytest.MonkeyPatch, answer: str, transient: bool
) -> None:
    from airflow.sdk.exceptions import AirflowRuntimeError
    from airflow.sdk.execution_time.comms import ConnectionResult

    from airflow_smart_ext.errors import classify

    supervisor = with_supervisor(
        monkeypatch,
        {  # built on demand: each SDK version validates only the answers it knows
            "API_SERVER_ERROR": api_server_error,
            "raises": lambda: RuntimeError("Reader loop exited"),
            "found": lambda: ConnectionResult(
                conn_id="warehouse",
                conn_type="sqlite",
                host="/tmp/x.db",
                schema=None,
                login=None,
                password=None,
                port=None,
                extra=None,
            ),
            "CONNECTION_NOT_FOUND": lambda: error_response("CONNECTION_NOT_FOUND", {"conn_id": "warehouse"}),
            "PERMISSION_DENIED": lambda: AirflowRuntimeError(error_response("PERMISSION_DENIED")),
        }[answer](),
    )
    calls = lookups_say_not_defined(monkeypatch, 1000)
    with pytest.raises(Exception) as raised:
        await compat.aget_connection("warehouse")
    assert len(calls) == 4 and supervisor.asked == ["warehouse"]
    assert classify(raised.value).transient is transient
    if transient:
        assert isinstance(raised.value, compat.ConnectionLookupFailed)
        assert "Looking up connection 'warehouse' failed in the triggerer" in str(raised.value)
        assert isinstance(raised.value.__cause__, compat.AirflowNotFoundException)
    else:
        assert isinstance(raised.value, compat.AirflowNotFoundException)


@needs_supervisor
async def test_failed_connection_lookups_are_ridden_out_and_the_sql_wait_succeeds(
    vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch, sqlite_conn: str
) -> None:
    supervisor = with_supervisor(monkeypatch, api_server_error())
    calls = lookups_say_not_defined(monkeypatch, 5)
    with sqlite3.connect(sqlite_conn) as db:
        db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'ready')")
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(sql_check(), policy, share=False))
    # Check #1: four lookups fail and the supervisor reports an API error: "not yet". Check #2 finds it.
    assert payload["status"] == "success" and payload["check_index"] == 2, payload
    assert len(calls) == 6 and supervisor.asked == ["smart_ext_unit_sqlite"]


async def test_a_connection_that_is_not_defined_ends_the_wait_with_a_clear_error(
    vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compat.AIRFLOW_V_3_1_PLUS:
        with_supervisor(monkeypatch, error_response("CONNECTION_NOT_FOUND", {"conn_id": "nope"}))
    lookups_say_not_defined(monkeypatch, 1000)
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(sql_check(conn_id="nope"), policy, share=False))
    assert payload["status"] == "error" and payload["check_index"] == 1, payload
    assert "The conn_id `nope` isn't defined (looked up 4 times" in payload["message"]


# --- the rate limit -------------------------------------------------------------------------------------------


async def test_rate_limit_delays_checks_never_drops_them_never_past_the_deadline(
    vclock: VirtualClock,
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
    monkeypatch.setattr(sharing, "_clock", lambda: now[0])
    bucket = sharing.TokenBucket(rate=4.0)
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.25, 0.5, 0.75]
    assert bucket.reserve(not_after=100.3) == pytest.approx(0.3)  # over budget at its deadline, not later
    now[0] = 110.0
    assert bucket.reserve() == 0.0


# --- hung checks (real time, real threads) ---------------------------------------------------------------------


async def test_hung_checks_on_one_connection_never_starve_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """100 checks that never return on one connection + one healthy sensor on another: the healthy one is
    checked on schedule and the thread count stays within the fixed pool."""
    monkeypatch.setattr(compat, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    baseline = threading.active_count()
    start = time.time()
    policy = BackoffPolicy(initial=0.5, factor=1, jitter="none", splay=0)
    hung = [
        BackoffTrigger(
            check=check("HungSensor", name=f"h{i}", conn_id="hung"),
            policy=policy.to_dict(),
            seed=f"h{i}",
            started_at=start,
            deadline=start + 60,
            check_timeout=0.4,
        )
        for i in range(100)
    ]
    READY_AT["ok"] = float("inf")
    healthy = BackoffTrigger(
        check=check("OutageSensor", name="ok", conn_id="healthy"),
        policy=policy.to_dict(),
        seed="ok",
        started_at=start,
        deadline=start + 4,
        check_timeout=0.4,
    )
    tasks = [asyncio.ensure_future(first_event(t)) for t in hung]
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, threading.active_count() - baseline)
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    try:
        payload = await asyncio.wait_for(first_event(healthy), 30)
    finally:
        sampler.cancel()
        for task in tasks:
            task.cancel()
        RELEASE.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert payload["status"] == "timeout"  # it never came true; what matters is when it was checked
    # Checks #1..#8 (#0 was the worker's) are due every 0.5 s, #8 at the deadline. Starved (the bug), the
    # healthy wait gets no check at all. On a loaded machine its own first check (building the sensor in a
    # check thread) can outlast its 0.4 s time limit, and the slots it covers are skipped by design (missed
    # checks are skipped; no second check of a condition while one runs): seen on 2.11 under load, the first
    # check at 2.0-3.1 s, then every 0.5 s. So: checks made, none before its slot, every check after the
    # first on schedule, and the final check at the deadline.
    seen = [at - start for at in POKES["ok"]]
    assert 2 <= len(seen) <= 8 and seen == sorted(seen), seen
    assert all(at >= 0.5 * (n + 1) - 0.01 for n, at in enumerate(seen)), seen  # never before its slot
    gaps = [later - earlier for earlier, later in zip(seen, seen[1:], strict=False)]
    assert max(gaps) <= 1.5, seen  # once its first check reported, a slot's interval plus 1.0 s late at most
    assert 4 - 0.01 <= seen[-1] <= 4 + 1.0, seen  # the final check at the deadline
    # The hung connection holds its abandoned-check budget (detached threads) plus its own slots, no more:
    # each hung condition runs one check (no second while it hangs), the other conditions find the slots taken.
    hung_threads = (
        runtime.DEFAULT_MAX_ABANDONED_PER_KEY + runtime.DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION
    )
    # (fewer when a loaded machine starts some hung conditions' checks only after the window)
    assert 0 < sum(len(v) for k, v in POKES.items() if k != "ok") <= hung_threads
    assert all(len(v) == 1 for k, v in POKES.items() if k != "ok")
    assert peak <= hung_threads + 4  # plus the few threads the healthy checks use
    print(f"hung checks: threads above baseline peak={peak}; healthy checks {len(seen)}/8 on time")


async def test_the_trigger_reports_its_timeout_at_the_deadline_while_its_check_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compat, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    monkeypatch.setattr(trigger_module, "FINAL_CHECK_GRACE_SECONDS", 0.3)
    start = time.time()
    policy = BackoffPolicy(initial=0.5, factor=1, jitter="none", splay=0)
    hung = BackoffTrigger(
        check=check("HungSensor", name="late", conn_id="hung-deadline"),
        policy=policy.to_dict(),
        seed="late",
        started_at=start,
        deadline=start + 1.0,
        check_timeout=600,  # far beyond the deadline: the deadline must win
    )
    payload = await asyncio.wait_for(first_event(hung), 10)
    elapsed = time.time() - start
    assert payload["status"] == "timeout"
    assert 1.0 <= elapsed < 1.0 + 0.3 + 0.5, elapsed


def dags_folder_module(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, module: str, code: str) -> None:
    """``module`` in a DAGs folder that is not on sys.path (as in the 3.x triggerer) and not imported yet."""
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path))
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry != str(tmp_path)])
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_transient_errors_from_a_dags_folder_module_resolve_in_the_triggerer(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers put the DAGs folder on sys.path, the 3.x triggerer does not: the trigger must still find it.
    dags_folder_module(
        tmp_path, monkeypatch, "zz_dag_side_errors", "class FlakyWarehouse(Exception):\n    pass\n"
    )
    built = trigger(
        test_trigger.sensor_check("a"),
        BackoffPolicy(initial=1),
        transient_errors=["zz_dag_side_errors.FlakyWarehouse"],
    )
    assert [cls.__name__ for cls in built._transient_types] == ["FlakyWarehouse"]


def test_an_import_that_fails_just_before_another_thread_adds_the_dags_folder_is_retried(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Triggers starting together import their criteria in several check threads at once: this import fails
    # (the DAGs folder is not on sys.path yet), another thread adds the folder, then this one falls back.
    dags_folder_module(
        tmp_path, monkeypatch, "zz_dag_side_criteria", "def is_done(value):\n    return value == 'done'\n"
    )
    real_import = importlib.import_module
    failed_first: list[str] = []

    def import_module(name: str, package: str | None = None) -> Any:
        if name == "zz_dag_side_criteria" and not failed_first:
            failed_first.append(name)
            sys.path.append(str(tmp_path))  # the other thread, between this failure and its fallback
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert runtime.import_object("zz_dag_side_criteria.is_done")("done") is True
    assert failed_first and sys.path.count(str(tmp_path)) == 1
    with pytest.raises(ModuleNotFoundError):  # a module that is nowhere still fails, after one retry
        runtime.import_object("zz_no_such_module_anywhere.is_done")


# --- other tasks' hung checks never hurt a wait: one table of fault scenarios ---------------------------


class ProbeSensor(compat.BaseSensorOperator):
    """``behaviour``: "hang" (never returns until the test ends), "recovers" (its first poke hangs until
    RECOVERED, then the condition is true), "never" or "ready". Without ``conn_id`` it is bounded by its class."""

    def __init__(self, *, name: str, behaviour: str, **kwargs: Any) -> None:
        conn_id = kwargs.pop("conn_id", None)
        super().__init__(**kwargs)
        self.name, self.behaviour = name, behaviour
        if conn_id is not None:
            self.conn_id = conn_id

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(time.time())
        if self.behaviour == "hang":
            RELEASE.wait(120)
            return False
        if self.behaviour == "recovers":
            RECOVERED.wait(120)
            return True
        return self.behaviour == "ready"


class OtherProbeSensor(ProbeSensor):
    """Another class: another concurrency key when no connection is named."""


@dataclasses.dataclass(frozen=True)
class HungScenario:
    id: str
    hung: tuple[tuple[str, str | None, int], ...]  # (sensor class, conn_id or None, number of hung waits)
    healthy: tuple[str, str | None, str]  # (sensor class, conn_id or None, behaviour "never" | "ready")
    hung_behaviour: str = "hang"
    hung_check_timeout: float = 0.15  # the hung waits' own check_timeout
    cancel_hung_at: float | None = None  # the hung waits are cancelled (task cleared) then
    recover_at: float | None = None  # RECOVERED is set then


SLOTS = runtime.DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION
PER_KEY_BUDGET = runtime.DEFAULT_MAX_ABANDONED_PER_KEY
HUNG_SCENARIOS = [
    HungScenario("hung-same-class", (("ProbeSensor", None, 4),), ("ProbeSensor", None, "ready")),
    HungScenario("hung-same-class-never-true", (("ProbeSensor", None, 4),), ("ProbeSensor", None, "never")),
    HungScenario("hung-same-connection", (("ProbeSensor", "nfs", 4),), ("OtherProbeSensor", "nfs", "never")),
    HungScenario("hung-different-class", (("OtherProbeSensor", None, 4),), ("ProbeSensor", None, "never")),
    # The most a key may hang with every healthy wait of it still on time: its budget plus all slots but one.
    HungScenario(
        "n-hung-then-healthy",
        (("ProbeSensor", None, PER_KEY_BUDGET + SLOTS - 1),),
        ("ProbeSensor", None, "never"),
    ),
    HungScenario(
        "hung-on-many-keys",
        (("ProbeSensor", None, 6), ("OtherProbeSensor", None, 6), ("ProbeSensor", "nfs", 6)),
        ("ProbeSensor", "healthy-db", "never"),
    ),
    HungScenario(
        "hung-then-recovers",
        (("ProbeSensor", None, 4),),
        ("ProbeSensor", None, "never"),
        hung_behaviour="recovers",
        recover_at=1.0,
    ),
    HungScenario(
        "cancelled-while-its-check-hangs",
        (("ProbeSensor", None, 4),),
        ("ProbeSensor", None, "never"),
        hung_check_timeout=30,
        cancel_hung_at=0.3,
    ),
]


@pytest.mark.parametrize("scenario", HUNG_SCENARIOS, ids=lambda s: s.id)
async def test_other_tasks_hung_checks_never_delay_a_healthy_wait(
    scenario: HungScenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hung waits check first (at once) and are abandoned (time limit or cancellation) before the healthy
    wait's first check at 0.5 s: every check of the healthy wait runs on its schedule, each hung condition
    runs one check while it hangs, threads stay within the budget and Stats shows the abandoned checks."""
    monkeypatch.setattr(compat, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    gauges: list[tuple[str, float]] = []
    monkeypatch.setattr(compat.Stats, "gauge", lambda name, value, *a, **k: gauges.append((name, value)))
    baseline = threading.active_count()
    start = time.time()

    def probe(cls: str, conn_id: str | None, name: str, behaviour: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"name": name, "behaviour": behaviour}
        if conn_id is not None:
            kwargs["conn_id"] = conn_id
        return check(cls, **kwargs)

    hung = [
        BackoffTrigger(
            check=probe(cls, conn_id, f"hung-{cls}-{conn_id}-{i}", scenario.hung_behaviour),
            policy=BackoffPolicy(initial=0.1, factor=1, jitter="none", splay=0).to_dict(),
            seed=f"h{i}",
            started_at=start - 0.1,  # check #1 due at once
            deadline=start + 30,
            check_timeout=scenario.hung_check_timeout,
        )
        for cls, conn_id, count in scenario.hung
        for i in range(count)
    ]
    hung_tasks = [asyncio.ensure_future(first_event(t)) for t in hung]
    healthy_cls, healthy_conn, behaviour = scenario.healthy
    healthy = BackoffTrigger(
        check=probe(healthy_cls, healthy_conn, "healthy", behaviour),
        policy=BackoffPolicy(initial=0.5, factor=1, jitter="none", splay=0).to_dict(),
        seed="ok",
        started_at=start,
        deadline=start + 2,
        check_timeout=0.4,
    )
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, threading.active_count() - baseline)
            await asyncio.sleep(0.02)

    async def faults() -> None:
        if scenario.cancel_hung_at is not None:
            await asyncio.sleep(start + scenario.cancel_hung_at - time.time())
            for task in hung_tasks:
                task.cancel()
        if scenario.recover_at is not None:
            await asyncio.sleep(start + scenario.recover_at - time.time())
            RECOVERED.set()

    side = [asyncio.ensure_future(sample()), asyncio.ensure_future(faults())]
    try:
        payload = await asyncio.wait_for(first_event(healthy), 20)
        recovered = (
            await asyncio.wait_for(asyncio.gather(*hung_tasks), 10) if scenario.recover_at is not None else []
        )
    finally:
        for task in [*side, *hung_tasks]:
            task.cancel()
        RELEASE.set()
        await asyncio.gather(*side, *hung_tasks, return_exceptions=True)

    expected = [start + 0.5] if behaviour == "ready" else [start + 0.5 * k for k in range(1, 5)]
    assert payload["status"] == ("success" if behaviour == "ready" else "timeout")
    assert len(POKES["healthy"]) == len(expected), POKES["healthy"]
    for seen, due in zip(POKES["healthy"], expected, strict=True):
        assert due - 0.01 <= seen <= due + 0.5, (seen - start, due - start)
    hung_pokes = {name: len(times) for name, times in POKES.items() if name.startswith("hung-")}
    if scenario.recover_at is not None:
        # No second check while the first hung; once it returned, the next check found the condition true.
        assert all(event["status"] == "success" for event in recovered)
        assert set(hung_pokes.values()) == {2}, hung_pokes
    else:
        assert set(hung_pokes.values()) == {1}, hung_pokes  # one check per hung condition, never a second
    # Threads: per key at most its abandoned budget plus its slots, plus the few the healthy checks use.
    per_key: dict[tuple[str, str | None], int] = defaultdict(int)
    for cls, conn_id, count in scenario.hung:
        per_key[(cls if conn_id is None else "", conn_id)] += count
    bound = sum(min(count, PER_KEY_BUDGET + SLOTS) for count in per_key.values()) + 4
    assert peak <= bound, (peak, bound)
    assert any(name == check_threads.METRIC_ABANDONED_RUNNING and value > 0 for name, value in gauges), gauges
    print(f"{scenario.id}: threads above baseline peak={peak} (bound {bound}); healthy on time")


def test_a_detached_check_thread_gives_its_place_to_queued_work_and_ends_with_its_call() -> None:
    pool = check_threads.CheckThreads(2, name="smart-ext-test-pool")
    gate = threading.Event()
    blocked = [pool.submit(lambda: gate.wait(30)) for _ in range(2)]  # both live threads busy
    queued = pool.submit(lambda: "ran")
    time.sleep(0.1)
    assert not queued.done()  # no third live thread
    assert pool.detach(blocked[0])
    assert queued.result(timeout=5) == "ran"  # a new live thread took the detached one's place
    assert not pool.detach(blocked[0])  # once
    names = lambda: {t.name for t in threading.enumerate() if t.name.startswith("smart-ext-test-pool")}  # noqa: E731
    assert len(names()) == 3
    gate.set()
    assert all(f.result(timeout=5) for f in blocked)
    deadline = time.monotonic() + 5
    while len(names()) > 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(names()) == 2  # the detached thread ended with its call; the live ones stay
