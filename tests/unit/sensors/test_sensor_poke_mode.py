"""BackoffSensor in poke mode: pokes at the policy's times, outcomes, stats, transient errors."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy, task_seed
from airflow_smart_ext.conditions.outcomes import STATS_XCOM_KEY
from tests.unit.clock import START, FakeClock
from tests.unit.sensors.helpers import (
    Deferred,
    FakeTI,
    PathSensor,
    ScriptedSensor,
    capture_defer,
    make_context,
)


def expected_times(
    policy: BackoffPolicy, seed: str, started_at: float, deadline: float, pokes: int
) -> list[float]:
    """Poke times the policy prescribes when every poke takes no time: check #0 at its splayed time
    (``started_at + offset(seed, 0)``), then next_check."""
    first = started_at + policy.offset(seed, 0)
    times, index, now = [first], 0, first
    while len(times) < pokes:
        check = policy.next_check(seed, started_at, now, deadline, after=index)
        assert check is not None
        times.append(check.at)
        index, now = check.index, check.at
    return times


# ------------------------------------------------------------------ poke mode
@pytest.mark.parametrize("jitter", ["none", "full", "equal", "decorrelated"])
def test_poke_mode_pokes_exactly_at_the_policy_times(clock: FakeClock, jitter: str) -> None:
    sensor = ScriptedSensor(
        task_id="task",
        results=[False] * 7 + [True],
        clock=clock,
        poke_interval=10,
        timeout=10_000,
        jitter=jitter,
    )
    context = make_context()
    assert sensor.execute(context) is None
    seed = task_seed("dag", "task", "run", -1, 1)
    assert sensor.poke_times == expected_times(sensor.backoff_policy, seed, START, START + 10_000, 8)
    assert context["ti"].xcoms[STATS_XCOM_KEY] == {
        "pokes": 8,
        "waited_seconds": round(sensor.poke_times[-1] - START, 3),
        "mode": "poke",
    }


def test_poke_schedule_depends_on_try_number(clock: FakeClock) -> None:
    times = []
    for try_number in (1, 2):
        clock.now = START
        sensor = ScriptedSensor(task_id="task", results=[False] * 4 + [True], clock=clock, poke_interval=10)
        sensor.execute(make_context(FakeTI(try_number=try_number)))
        times.append([t - START for t in sensor.poke_times])
    assert times[0] != times[1]  # a retry is a new schedule with a new seed


def test_success_with_poke_return_value_returns_its_xcom_value(clock: FakeClock) -> None:
    value = {"rows": 3}
    sensor = ScriptedSensor(
        task_id="task",
        results=[False, compat.locations.PokeReturnValue(True, value)],
        clock=clock,
        poke_interval=5,
    )
    context = make_context()
    assert sensor.execute(context) == value
    assert context["ti"].xcoms[STATS_XCOM_KEY]["pokes"] == 2


def test_not_done_poke_return_value_keeps_waiting(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="task",
        results=[
            compat.locations.PokeReturnValue(False, "ignored"),
            compat.locations.PokeReturnValue(True, "v"),
        ],
        clock=clock,
        poke_interval=5,
    )
    assert sensor.execute(make_context()) == "v"
    assert len(sensor.poke_times) == 2


def test_no_stats_xcom_when_do_xcom_push_is_false(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", results=[True], clock=clock, do_xcom_push=False)
    context = make_context()
    sensor.execute(context)
    assert STATS_XCOM_KEY not in context["ti"].xcoms


class RecordingStats:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def incr(self, name: str, count: int = 1, rate: float = 1, tags: dict | None = None) -> None:
        self.calls.append((name, dict(tags or {})))


def test_stats_counters_for_pokes_successes_and_timeouts(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    stats = RecordingStats()
    monkeypatch.setattr(compat.locations, "Stats", stats, raising=False)
    ScriptedSensor(task_id="task", results=[False, False, True], clock=clock, poke_interval=10).execute(
        make_context()
    )
    tags = {"dag_id": "dag", "task_id": "task", "sensor": "ScriptedSensor"}
    assert stats.calls == [("smart_ext.sensor.pokes", tags)] * 3 + [("smart_ext.sensor.successes", tags)]
    stats.calls.clear()
    with pytest.raises(compat.locations.AirflowSensorTimeout):
        ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=15).execute(make_context())
    assert stats.calls[-1] == ("smart_ext.sensor.timeouts", tags)
    assert {name for name, _ in stats.calls[:-1]} == {"smart_ext.sensor.pokes"}


def test_timeout_has_a_final_poke_exactly_at_the_deadline(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=300)
    with pytest.raises(compat.locations.AirflowSensorTimeout, match="timed out"):
        sensor.execute(make_context())
    assert sensor.poke_times[-1] == START + 300
    assert all(t < START + 300 for t in sensor.poke_times[:-1])
    seed = task_seed("dag", "task", "run", -1, 1)
    assert sensor.poke_times == expected_times(
        sensor.backoff_policy, seed, START, START + 300, len(sensor.poke_times)
    )


def test_condition_arriving_just_before_the_timeout_is_caught(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=300)

    def poke(context: Any) -> bool:
        sensor.poke_times.append(clock.now)
        return clock.now >= START + 299  # arrives 1 s before the timeout, after the last backoff check

    sensor.poke = poke  # type: ignore[method-assign]
    sensor.execute(make_context())
    assert sensor.poke_times[-1] == START + 300


def test_soft_fail_skips_on_timeout(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=60, soft_fail=True)
    with pytest.raises(compat.locations.AirflowSkipException, match="soft_fail"):
        sensor.execute(make_context())
    assert sensor.poke_times[-1] == START + 60


def test_poke_errors_propagate_by_default(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", results=[RuntimeError("boom"), True], clock=clock)
    with pytest.raises(RuntimeError, match="boom"):
        sensor.execute(make_context())


def test_silent_fail_treats_poke_errors_as_not_yet(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="task",
        results=[RuntimeError("boom"), RuntimeError("boom"), True],
        clock=clock,
        silent_fail=True,
    )
    assert sensor.execute(make_context()) is None
    assert len(sensor.poke_times) == 3


def test_silent_fail_does_not_swallow_fail_exceptions(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="task",
        results=[compat.locations.AirflowFailException("criteria"), True],
        clock=clock,
        silent_fail=True,
    )
    with pytest.raises(compat.locations.AirflowFailException):
        sensor.execute(make_context())


@pytest.mark.parametrize("error", [RuntimeError("boom"), compat.locations.AirflowFailException("criteria")])
def test_never_fail_skips_on_any_poke_error(clock: FakeClock, error: Exception) -> None:
    sensor = ScriptedSensor(task_id="task", results=[error], clock=clock, never_fail=True)
    with pytest.raises(compat.locations.AirflowSkipException, match="never_fail"):
        sensor.execute(make_context())


def test_soft_fail_skips_fail_exceptions_like_airflow(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="task", results=[compat.locations.AirflowFailException("x")], clock=clock, soft_fail=True
    )
    with pytest.raises(compat.locations.AirflowSkipException):
        sensor.execute(make_context())


def test_poke_mode_survives_past_poke_1026_where_airflow_overflows(clock: FakeClock) -> None:
    # Airflow's own exponential backoff raises OverflowError at poke 1,026 even with max_wait set.
    sensor = ScriptedSensor(
        task_id="task",
        results=[False] * 1500 + [True],
        clock=clock,
        poke_interval=1,
        max_wait=2,
        timeout=10**9,
        jitter="none",
        splay=0,
    )
    sensor.execute(make_context())
    assert len(sensor.poke_times) == 1501
    assert sensor.poke_times[-1] - sensor.poke_times[-2] == 2.0  # capped by max_wait


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_without_splay_the_first_poke_is_at_once(
    clock: FakeClock, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: check #0 is due at the start (offset 0), not one interval later."""
    # a first run
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (0, None))
    sensor = ScriptedSensor(
        task_id="task", results=[True], clock=clock, poke_interval=60, splay=0, mode=mode, timeout=600
    )
    sensor.execute(make_context())
    assert sensor.poke_times == [START]
    assert clock.sleeps == []


def test_reschedule_at_a_huge_index_is_overflow_free(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = datetime.datetime.fromtimestamp(START, tz=datetime.timezone.utc)
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (10**7, first))
    clock.now = START + 10**7 * 3.0
    sensor = ScriptedSensor(
        task_id="task", clock=clock, mode="reschedule", poke_interval=1, max_wait=4, timeout=10**9
    )
    with pytest.raises(compat.locations.AirflowRescheduleException) as err:
        sensor.execute(make_context())
    assert err.value.reschedule_date.timestamp() >= clock.now


# ------------------------------------------------------------------ transient errors (issue 14, part 2)
def test_transient_errors_are_not_yet_in_poke_mode(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    counted: list[str] = []
    monkeypatch.setattr(compat.locations.Stats, "incr", lambda name, *a, **k: counted.append(name))
    sensor = ScriptedSensor(
        task_id="task",
        results=[sqlite3.OperationalError("database is locked"), ConnectionResetError("reset"), True],
        clock=clock,
    )
    assert sensor.execute(make_context()) is None  # succeeded: no try spent on the outage
    assert len(sensor.poke_times) == 3
    assert counted.count("smart_ext.sensor.transient_errors") == 2


def test_permanent_errors_still_fail_the_try(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", results=[ValueError("bad value"), True], clock=clock)
    with pytest.raises(ValueError, match="bad value"):
        sensor.execute(make_context())


def test_user_transient_errors_by_class_or_dotted_path(clock: FakeClock) -> None:
    for spec in ([LookupError], ["builtins.LookupError"], "builtins.LookupError"):
        sensor = ScriptedSensor(
            task_id="task", results=[KeyError("not there yet"), True], clock=clock, transient_errors=spec
        )
        assert sensor.execute(make_context()) is None
        assert len(sensor.poke_times) == 2


def test_transient_errors_until_the_deadline_time_out(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="task", results=[TimeoutError("slow")], clock=clock, poke_interval=10, timeout=100
    )
    with pytest.raises(compat.locations.AirflowSensorTimeout):
        sensor.execute(make_context())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transient_errors": ["no.such.Error"]}, "transient_errors: cannot import 'no.such.Error'"),
        ({"transient_errors": [int]}, "transient_errors: <class 'int'> is not an exception class"),
        (
            {"transient_errors": ["ValueError"]},
            "'ValueError' is not an exception class (a builtin needs its module: 'builtins.ValueError')",
        ),
        ({"check_timeout": 0}, "check_timeout must be > 0 seconds"),
        ({"rate_limit": -1}, "rate_limit must be a number of checks per second > 0"),
        ({"rate_limit": "fast"}, "rate_limit must be a number of checks per second > 0"),
    ],
)
def test_new_arguments_are_validated_at_parse(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        PathSensor(task_id="task", path="/p", **kwargs)
    assert message in str(err.value)


def test_deferral_ships_transient_errors_silent_fail_time_and_rate_limits(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = PathSensor(
        task_id="task",
        path="/p",
        deferrable=True,
        silent_fail=True,
        transient_errors=[LookupError],
        check_timeout=datetime.timedelta(seconds=45),
        rate_limit=2.5,
    )
    monkeypatch.setattr(sensor, "poke", lambda context: False)
    capture_defer(sensor, monkeypatch)
    with pytest.raises(Deferred) as err:
        sensor.execute(make_context())
    _, kwargs = err.value.kwargs["trigger"].serialize()
    assert kwargs["transient_errors"] == ["builtins.LookupError"]
    assert (kwargs["silent_fail"], kwargs["check_timeout"], kwargs["rate_limit"]) == (True, 45.0, 2.5)
    json.dumps(kwargs)


# ------------------------------------------------------------------ execution_timeout: ended before Airflow's alarm
@pytest.mark.parametrize("ti_started_before", [None, 0.0, 0.2, 3.0])
@pytest.mark.parametrize("execution_seconds", [1.0, 6.0, 45.0])
def test_poke_mode_ends_the_try_at_execution_timeout_before_airflows_alarm(
    clock: FakeClock, execution_seconds: float, ti_started_before: float | None
) -> None:
    """Airflow 3's SIGALRM handler can deadlock on structlog's lock (the task then runs for ever): poke mode
    ends the try itself, with the same retryable AirflowTaskTimeout, before the alarm (armed after the try's
    start_date) is due. A limit too short to end first ends where the try's timeline does: a final check at
    the execution deadline, then the same task timeout (the alarm, due at that instant, may come first)."""
    ti = FakeTI()
    if ti_started_before is not None:
        ti.start_date = datetime.datetime.fromtimestamp(START - ti_started_before, tz=datetime.timezone.utc)  # type: ignore[attr-defined]
    sensor = ScriptedSensor(
        task_id="task",
        results=[False],
        clock=clock,
        poke_interval=4,
        timeout=1_000,
        execution_timeout=datetime.timedelta(seconds=execution_seconds),
    )
    try_start = START - (ti_started_before or 0.0)
    alarm_at = START + execution_seconds  # armed after both the try's start_date and our start
    if execution_seconds <= 1.0:
        with pytest.raises(compat.locations.AirflowTaskTimeout, match="execution_timeout of 1s"):
            sensor.execute(make_context(ti))
        assert clock.now == pytest.approx(alarm_at)  # the final check, at the execution deadline
        return
    with pytest.raises(
        compat.locations.AirflowTaskTimeout, match=f"execution_timeout of {execution_seconds:g}s"
    ):
        sensor.execute(make_context(ti))
    assert clock.now == pytest.approx(try_start + execution_seconds - 0.5)
    assert clock.now < alarm_at
    assert all(t < clock.now for t in sensor.poke_times)
