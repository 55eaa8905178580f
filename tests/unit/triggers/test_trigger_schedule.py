"""BackoffTrigger: serialization, its schedule on a virtual clock, outcomes, events, metrics."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import defaultdict
from typing import Any

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat, conditions
from airflow_smart_ext.backoff import BackoffPolicy, replay
from airflow_smart_ext.conditions import sensor_poke as sensor_checks
from airflow_smart_ext.triggers import BackoffTrigger, check_groups
from tests.unit.clock import START, FakeClock
from tests.unit.triggers.helpers import (
    POKES,
    RAISE,
    READY_AT,
    THREADS,
    _event_with_time,
    first_event,
    make_trigger,
    sensor_check,
)

# --- serialization -------------------------------------------------------------------------------------


def test_serialize_returns_exactly_the_contract_kwargs() -> None:
    policy = BackoffPolicy(initial=10, factor=2, cap=60, jitter="full")
    trigger = make_trigger(sensor_check("a"), policy, after=2, share=False)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_smart_ext.triggers.backoff.BackoffTrigger"  # what rows keep (deferral_paths)
    assert kwargs == {
        "check": sensor_check("a"),
        "policy": policy.to_dict(),
        "seed": "seed-1",
        "started_at": START,
        "deadline": START + 3600,
        "after": 2,
        "share": False,
        "transient_errors": [],
        "silent_fail": False,
        "check_timeout": None,
        "rate_limit": None,
    }
    json.dumps(kwargs)
    rebuilt = BackoffTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    # A trigger serialized by the previous release (without the newer keys) still loads.
    old = {
        key: kwargs[key] for key in ("check", "policy", "seed", "started_at", "deadline", "after", "share")
    }
    assert BackoffTrigger(**old).serialize() == (classpath, kwargs)


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ({"type": "http"}, "check['type'] must be one of"),
        ({**sensor_check("a"), "extra": 1}, "unknown ['extra']"),
        ({**sensor_check("a"), "classpath": "NoDots"}, "check['classpath']"),
        (
            {
                "type": "sql",
                "conn_id": "",
                "sql": "select 1",
                "parameters": None,
                "hook_params": None,
                "selector": None,
                "success": None,
                "failure": None,
                "fail_on_empty": False,
            },
            "conn_id must be a non-empty connection id (str); got ''",  # the table's row, as the sensor says
        ),
    ],
)
def test_bad_check_spec_is_rejected_with_the_key_named(check: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make_trigger(check, BackoffPolicy(initial=10))


def test_bad_policy_is_rejected_naming_the_parameter() -> None:
    with pytest.raises(ValueError, match="factor"):
        BackoffTrigger(sensor_check("a"), {"initial": 10, "factor": 0.5}, "s", START, None)


async def test_serialize_rebuild_run_succeeds_with_xcom(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=10, factor=2, cap=80, jitter="full")
    READY_AT["a"] = START + 100
    trigger = make_trigger(sensor_check("a"), policy)
    _, kwargs = trigger.serialize()
    payload = await first_event(BackoffTrigger(**kwargs))
    expected = policy.next_check("seed-1", START, START + 100, START + 3600, after=0)
    assert expected is not None
    assert payload == {
        "status": "success",
        "checks": len(POKES["a"]),  # checks made, not the schedule index
        "checks_complete": True,
        "waited_seconds": round(expected.at - START, 3),
        "xcom_value": {"name": "a", "ds": "2026-01-02"},
        "message": "condition met",
        "check_index": expected.index,
        "error_class": None,
    }
    json.dumps(payload)


# --- schedule under a virtual clock ------------------------------------------------------------------------


async def test_checks_happen_exactly_on_the_policy_schedule_and_time_out_at_the_deadline(
    clock: FakeClock,
) -> None:
    policy = BackoffPolicy(initial=5, factor=2, cap=40, jitter="equal", splay=3)
    deadline = START + 200
    payload = await first_event(make_trigger(sensor_check("never"), policy, deadline=deadline))
    expected = [c.at for c in replay(policy, "seed-1", START, deadline, deadline) if c.index > 0]
    assert POKES["never"] == expected
    assert expected[-1] == deadline
    last = replay(policy, "seed-1", START, deadline, deadline)[-1]
    assert last.final
    assert payload["status"] == "timeout"
    assert payload["check_index"] == last.index
    assert payload["checks"] == len(POKES["never"])  # checks made (check #0 ran on the worker)
    assert payload["waited_seconds"] == 200.0


async def test_restart_mid_schedule_resumes_at_the_right_index(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1.5, cap=120, jitter="full")
    READY_AT["a"] = START + 1000
    _, kwargs = make_trigger(sensor_check("a"), policy, share=False).serialize()

    first = asyncio.ensure_future(first_event(BackoffTrigger(**kwargs)))
    await clock.asleep(START + 300 - clock.now)  # virtual time reaches +300
    assert not first.done(), first.result()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    before_restart = list(POKES["a"])
    assert before_restart, "the first incarnation should have checked"

    # The triggerer was down for a while; a rebuilt trigger (same kwargs) continues the same schedule.
    clock.now = START + 450
    payload = await first_event(BackoffTrigger(**kwargs))
    after_restart = POKES["a"][len(before_restart) :]
    schedule = replay(policy, "seed-1", START, START + 3600, START + 3600)
    assert before_restart == [c.at for c in schedule if c.index > 0 and c.at <= before_restart[-1]]
    assert after_restart == [c.at for c in schedule if START + 450 <= c.at <= after_restart[-1]]
    success_check = next(c for c in schedule if c.at >= START + 1000)
    assert payload["status"] == "success"
    assert payload["check_index"] == success_check.index
    # Counts are checks made: the rebuilt trigger counts its own and says the count is a lower bound.
    assert (payload["checks"], payload["checks_complete"]) == (len(after_restart), False)
    assert payload["checks"] < success_check.index


async def test_deadline_passed_while_down_gives_timeout_without_checking(clock: FakeClock) -> None:
    clock.now = START + 4000
    payload = await first_event(make_trigger(sensor_check("a"), BackoffPolicy(initial=10), after=3))
    assert payload["status"] == "timeout"
    assert (payload["checks"], payload["checks_complete"]) == (0, False)
    assert POKES["a"] == []


# --- outcomes ---------------------------------------------------------------------------------------------


async def test_failure_exception_gives_failure_event(clock: FakeClock) -> None:
    payload = await first_event(
        make_trigger(sensor_check("f", cls="FailingSensor"), BackoffPolicy(initial=10))
    )
    assert payload["status"] == "failure"
    assert "bad partition" in payload["message"]
    assert payload["check_index"] == 1


async def test_raising_check_gives_error_event_to_the_subscribers_of_that_round(clock: FakeClock) -> None:
    RAISE["boom"] = "database on fire"
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    events = await asyncio.gather(
        first_event(make_trigger(sensor_check("boom", task_id="t1"), policy, seed="s1")),
        first_event(make_trigger(sensor_check("boom", task_id="t2"), policy, seed="s2")),
    )
    assert [e["status"] for e in events] == ["error", "error"]
    assert all("RuntimeError: database on fire" in e["message"] for e in events)
    assert all(e["error_class"] == "builtins:RuntimeError" for e in events)  # the worker raises that class
    assert len(POKES["boom"]) == 1  # one shared round, reported to both


async def test_async_apoke_is_awaited_on_the_loop(clock: FakeClock) -> None:
    READY_AT["async"] = START + 25
    payload = await first_event(
        make_trigger(sensor_check("async", cls="AsyncFlagSensor"), BackoffPolicy(initial=10, jitter="none"))
    )
    assert payload["status"] == "success"
    assert THREADS["async"] == {threading.current_thread().name}


async def test_poke_context_has_datetimes_back() -> None:
    context = sensor_checks.poke_context(sensor_check("a")["context"])
    assert context["logical_date"].year == 2026
    assert context["ds"] == "2026-01-02"


@pytest.mark.parametrize(("cls", "status"), [("SkippingSensor", "skip"), ("TimingOutSensor", "timeout")])
async def test_skip_and_task_timeout_in_a_poke_map_like_poke_mode(
    clock: FakeClock, cls: str, status: str
) -> None:
    payload = await first_event(make_trigger(sensor_check(cls.lower(), cls=cls), BackoffPolicy(initial=10)))
    assert payload["status"] == status
    assert len(POKES[cls.lower()]) == 1


# --- decorrelated schedules off the loop ---------------------------------------------------------------------------


@pytest.mark.parametrize(("jitter", "off_loop"), [("decorrelated", True), ("full", False)])
async def test_decorrelated_schedule_is_computed_off_the_event_loop(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, jitter: str, off_loop: bool
) -> None:
    threads: set[str] = set()
    for method in ("next_check", "offset"):
        original = getattr(BackoffPolicy, method)

        def spy(self: BackoffPolicy, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            threads.add(threading.current_thread().name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(BackoffPolicy, method, spy)
    policy = BackoffPolicy(initial=5, factor=2, cap=40, jitter=jitter)
    threads.clear()  # the constructor's validation is not part of the run
    payload = await first_event(make_trigger(sensor_check("dec"), policy, deadline=START + 120))
    assert payload["status"] == "timeout"
    assert threads
    main = threading.current_thread().name
    assert (main not in threads) is off_loop, threads


def test_inline_next_check_matches_the_policy() -> None:
    """The memoised offsets of ``WaitSchedule`` (O(1) strategies, inline) give the policy's own answer."""
    import random

    from airflow_smart_ext.triggers.wait_schedule import WaitSchedule

    rng = random.Random(7)
    for _ in range(100):
        policy = BackoffPolicy(
            initial=rng.choice([1, 5, 30]),
            factor=rng.choice([1, 1.5, 2]),
            cap=rng.choice([60, 600]),
            jitter=rng.choice(["none", "full", "equal"]),
            splay=rng.choice([0, 3]),
        )
        seed = f"s{rng.random()}"
        schedule = WaitSchedule(policy, seed, START)
        real_now = seam.now
        for _ in range(4):  # one schedule asked again and again: answers from its memo must stay right
            deadline = rng.choice([None, START + rng.uniform(0, 900)])
            after = rng.randrange(0, 12)
            now = START + rng.uniform(-5, 1000)
            seam.now = lambda now=now: now  # type: ignore[misc]
            try:
                ours = asyncio.run(schedule.next(after, deadline))
            finally:
                seam.now = real_now  # type: ignore[misc]
            assert ours == policy.next_check(seed, START, now, deadline, after=after)


# --- Airflow 3.3.2 executor race guard --------------------------------------------------------------------------


@pytest.mark.parametrize("delay", [5.0, 0.0])
async def test_event_is_never_sooner_than_the_minimum_delay_after_start(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", delay)
    READY_AT["soon"] = START
    policy = BackoffPolicy(initial=1, factor=1, jitter="none")
    payload, at = await _event_with_time(make_trigger(sensor_check("soon"), policy), clock)
    assert POKES["soon"] == [START + 1]
    assert (payload["status"], payload["check_index"], payload["waited_seconds"]) == ("success", 1, 1.0)
    assert at == START + max(1.0, delay)
    # A trigger that starts after its deadline answers at once, but not before the guard either.
    clock.now = START + 4000
    payload, at = await _event_with_time(make_trigger(sensor_check("late"), policy), clock)
    assert payload["status"] == "timeout"
    assert at == START + 4000 + delay


async def test_the_guard_holds_an_early_event_to_five_seconds_on_airflow_3_only(clock: FakeClock) -> None:
    """This Airflow line's own guard (not set by the test): a condition true at the first check (1 s after the
    deferral) is reported 5 s after it on Airflow 3 (apache/airflow #71580), at once on 2.11 (no such race)."""
    READY_AT["guarded"] = START
    policy = BackoffPolicy(initial=1, factor=1, jitter="none")
    payload, at = await _event_with_time(make_trigger(sensor_check("guarded"), policy), clock)
    assert POKES["guarded"] == [START + 1]
    assert (payload["status"], payload["waited_seconds"]) == ("success", 1.0)
    assert at - START == (5.0 if compat.versions.AIRFLOW_V_3_0_PLUS else 1.0)


# --- deterministic events -----------------------------------------------------------------------------------------


async def test_event_payload_does_not_depend_on_when_it_is_built(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=10)
    payloads = []
    for restart_at in (START + 4000, START + 5000):
        clock.now = restart_at
        payloads.append(await first_event(make_trigger(sensor_check("det"), policy, after=3)))
    assert payloads[0] == payloads[1]
    assert payloads[0]["waited_seconds"] == 3600.0


async def test_early_completion_reports_the_observation_time(clock: FakeClock) -> None:
    READY_AT["early"] = START + 50
    fast = make_trigger(
        sensor_check("early", task_id="fast"), BackoffPolicy(initial=10, factor=1, jitter="none")
    )
    slow = make_trigger(
        sensor_check("early", task_id="slow"), BackoffPolicy(initial=500, factor=1, jitter="none")
    )
    events = await asyncio.gather(first_event(fast), first_event(slow))
    assert [e["waited_seconds"] for e in events] == [50.0, 50.0]


# --- metrics ------------------------------------------------------------------------------------------------------


class RecordingStats:
    def __init__(self) -> None:
        self.counters: dict[str, int] = defaultdict(int)
        self.gauges: dict[str, list[float]] = defaultdict(list)

    def incr(self, name: str, count: int = 1, **kwargs: Any) -> None:
        self.counters[name] += count

    def gauge(self, name: str, value: float, **kwargs: Any) -> None:
        self.gauges[name].append(value)


async def test_stats_counters_and_gauges(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = RecordingStats()
    monkeypatch.setattr(compat.locations, "Stats", stats, raising=False)
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    READY_AT["mx"] = READY_AT["my"] = START + 25
    await asyncio.gather(
        *(first_event(make_trigger(sensor_check("mx", task_id=f"t{i}"), policy)) for i in range(3)),
        first_event(make_trigger(sensor_check("my"), policy)),
    )
    # Checks at +10, +20, +30 for each of the two conditions. x's other two subscribers are due at the same
    # moments (one shared schedule, woken together) and join each of the three checks: 6 saved.
    assert stats.counters == {check_groups.METRIC_CHECKS: 6, check_groups.METRIC_CHECKS_SAVED: 6}
    assert stats.gauges[check_groups.METRIC_GROUPS][:4] == [1, 1, 1, 2]
    assert stats.gauges[check_groups.METRIC_SUBSCRIBERS][:4] == [1, 2, 3, 4]
    assert max(stats.gauges[check_groups.METRIC_GROUPS]) == 2
    assert stats.gauges[check_groups.METRIC_GROUPS][-1] == 0
    assert stats.gauges[check_groups.METRIC_SUBSCRIBERS][-1] == 0


def test_subscriber_count_is_o1_with_many_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat.locations, "Stats", RecordingStats(), raising=False)

    class NoScan(dict):  # type: ignore[type-arg]
        def values(self) -> Any:
            raise AssertionError("the registry scans every group")

    class Keyed(conditions.SharedCheck):
        concurrency_key = "k"

    registry = check_groups.SharingRegistry()
    registry.groups = NoScan()
    groups = [registry.join(f"k{i}", Keyed) for i in range(2000)]
    groups.append(registry.join("k0", Keyed))
    assert registry.subscriber_count == 2001 and len(registry.groups) == 2000
    for group in groups:
        group.leave()
    assert registry.subscriber_count == 0 and registry.groups == {}


async def test_a_connections_rate_bucket_is_forgotten_once_idle(clock: FakeClock) -> None:
    """A long-running triggerer keeps no token bucket for a connection nobody checks any more."""

    class OnConn(conditions.SharedCheck):
        concurrency_key = "conn:slow_db"

        async def run(self, context: Any) -> Any:
            return None

    loop = asyncio.get_running_loop()
    bucket = check_groups.rate_limiter(OnConn.concurrency_key, 0.5)
    assert bucket.reserve() == 0 and bucket.reserve() == pytest.approx(2.0)  # busy for 4 s from now
    check_groups.CheckGroup("k", OnConn(), None).close()
    assert OnConn.concurrency_key in check_groups._buckets[loop]  # still reserved: kept
    await seam.asleep(4.5)
    assert loop not in check_groups._buckets
