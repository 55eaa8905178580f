"""BackoffSensor: validation, poke/reschedule schedules = the policy's, outcomes, deferrable side (Contract C)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy, aligned_start, condition_seed, task_seed
from airflow_smart_ext.conditions import outcome_from_exception, sharing_key
from airflow_smart_ext.conditions.outcomes import error_class_path
from airflow_smart_ext.sensors import parameters as sensor_parameters
from airflow_smart_ext.sensors.base import DEFERRAL_GRACE_SECONDS, STATS_XCOM_KEY, BackoffSensor
from tests.unit.test_sensor_helpers import (
    T0,
    FakeClock,
    FakeTI,
    PathSensor,
    RenamedFieldSensor,
    ScriptedSensor,
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


# ------------------------------------------------------------------ validation (DAG parse)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backoff_factor": 0.5}, "backoff_factor must be a finite number >= 1"),
        ({"backoff_factor": "2"}, "backoff_factor must be a finite number >= 1"),
        (
            {"jitter": "random"},
            "jitter must be one of none, full, equal, decorrelated, or None for the default; got 'random'",
        ),
        ({"poke_interval": 10, "max_wait": 5}, "max_wait (5s) must be >= poke_interval (10s)"),
        ({"splay": -1}, "splay must be >= 0 seconds"),
        ({"splay": "soon"}, "splay must be >= 0 seconds (a number or a datetime.timedelta), or None"),
        ({"poke_interval": 0}, "poke_interval must be > 0 seconds"),
        ({"deferrable_fallback": "poke"}, "deferrable_fallback must be one of None, 'reschedule'"),
        ({"deferrable": "yes"}, "deferrable must be True or False, or None"),
        ({"jitter": "decorrelated", "backoff_factor": 1}, "factor=1 (fixed interval) cannot be combined"),
        (
            {"jitter": "decorrelated", "poke_interval": 0.01, "timeout": 7 * 86400},
            "jitter='decorrelated' is replayed check by check and supports at most 20,000 checks",
        ),
    ],
)
def test_invalid_parameters_raise_at_construction_naming_the_parameter(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        ScriptedSensor(task_id="s", **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"jitter": "bogus"},
            "jitter must be one of none, full, equal, decorrelated, or None for the default; got 'bogus'",
        ),
        ({"poke_interval": 10, "max_wait": 5}, "max_wait (5s) must be >= poke_interval (10s)"),
        ({"default_args": {"backoff_factor": 0.5}}, "backoff_factor must be a finite number >= 1"),
    ],
)
def test_mapped_sensor_partial_is_checked_at_parse(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        PathSensor.partial(task_id="mapped", **kwargs)
    assert message in str(err.value)


def test_mapped_sensor_with_valid_partial_expands() -> None:
    from airflow import DAG

    with DAG("mapped_dag", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        mapped = PathSensor.partial(task_id="mapped", poke_interval=10, jitter="equal").expand(
            path=["/a", "/b"]
        )
        # None means "the default", as in the constructor
        PathSensor.partial(task_id="defaults", backoff_factor=None, jitter=None, splay=None).expand(
            path=["/c"]
        )
    assert mapped.partial_kwargs["jitter"] == "equal"


def test_negative_poke_interval_is_rejected_by_airflow_itself() -> None:
    with pytest.raises(Exception, match="poke_interval"):
        ScriptedSensor(task_id="s", poke_interval=-1)


def test_defaults_build_the_documented_policy() -> None:
    sensor = ScriptedSensor(task_id="s", poke_interval=30, timeout=600)
    # No max_wait: the default cap is 10 x poke_interval (at most 1 h), not the policy's 1-day fallback.
    assert sensor.backoff_policy == BackoffPolicy(initial=30, factor=2.0, cap=300, jitter="full", splay=30)
    sensor = ScriptedSensor(
        task_id="s2",
        poke_interval=datetime.timedelta(seconds=5),
        max_wait=datetime.timedelta(minutes=1),
        backoff_factor=1.5,
        jitter="equal",
        splay=datetime.timedelta(seconds=2),
    )
    assert sensor.backoff_policy == BackoffPolicy(initial=5, factor=1.5, cap=60, jitter="equal", splay=2)


def test_explicit_exponential_backoff_false_means_a_fixed_interval() -> None:
    sensor = ScriptedSensor(task_id="s", exponential_backoff=False, poke_interval=10)
    assert (sensor.backoff_policy.factor, sensor.backoff_policy.jitter) == (1.0, "none")
    assert sensor.exponential_backoff is False
    # explicit backoff arguments still win
    sensor = ScriptedSensor(task_id="s2", exponential_backoff=False, backoff_factor=3, jitter="equal")
    assert (sensor.backoff_policy.factor, sensor.backoff_policy.jitter) == (3.0, "equal")
    # not passing it keeps the backoff defaults
    assert ScriptedSensor(task_id="s3").backoff_policy.factor == 2.0


def test_exponential_backoff_is_accepted_and_our_policy_governs() -> None:
    sensor = ScriptedSensor(task_id="s", exponential_backoff=True, poke_interval=10)
    assert sensor.exponential_backoff is False  # Airflow's own series never runs
    assert sensor.backoff_policy.factor == 2.0


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
    assert sensor.poke_times == expected_times(sensor.backoff_policy, seed, T0, T0 + 10_000, 8)
    assert context["ti"].xcoms[STATS_XCOM_KEY] == {
        "pokes": 8,
        "waited_seconds": round(sensor.poke_times[-1] - T0, 3),
        "mode": "poke",
    }


def test_poke_schedule_depends_on_try_number(clock: FakeClock) -> None:
    times = []
    for try_number in (1, 2):
        clock.now = T0
        sensor = ScriptedSensor(task_id="task", results=[False] * 4 + [True], clock=clock, poke_interval=10)
        sensor.execute(make_context(FakeTI(try_number=try_number)))
        times.append([t - T0 for t in sensor.poke_times])
    assert times[0] != times[1]  # a retry is a new schedule with a new seed


def test_success_with_poke_return_value_returns_its_xcom_value(clock: FakeClock) -> None:
    value = {"rows": 3}
    sensor = ScriptedSensor(
        task_id="task", results=[False, compat.PokeReturnValue(True, value)], clock=clock, poke_interval=5
    )
    context = make_context()
    assert sensor.execute(context) == value
    assert context["ti"].xcoms[STATS_XCOM_KEY]["pokes"] == 2


def test_not_done_poke_return_value_keeps_waiting(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="task",
        results=[compat.PokeReturnValue(False, "ignored"), compat.PokeReturnValue(True, "v")],
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
    monkeypatch.setattr(compat, "Stats", stats, raising=False)
    ScriptedSensor(task_id="task", results=[False, False, True], clock=clock, poke_interval=10).execute(
        make_context()
    )
    tags = {"dag_id": "dag", "task_id": "task", "sensor": "ScriptedSensor"}
    assert stats.calls == [("smart_ext.sensor.pokes", tags)] * 3 + [("smart_ext.sensor.successes", tags)]
    stats.calls.clear()
    with pytest.raises(compat.AirflowSensorTimeout):
        ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=15).execute(make_context())
    assert stats.calls[-1] == ("smart_ext.sensor.timeouts", tags)
    assert {name for name, _ in stats.calls[:-1]} == {"smart_ext.sensor.pokes"}


def test_timeout_has_a_final_poke_exactly_at_the_deadline(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=300)
    with pytest.raises(compat.AirflowSensorTimeout, match="timed out"):
        sensor.execute(make_context())
    assert sensor.poke_times[-1] == T0 + 300
    assert all(t < T0 + 300 for t in sensor.poke_times[:-1])
    seed = task_seed("dag", "task", "run", -1, 1)
    assert sensor.poke_times == expected_times(
        sensor.backoff_policy, seed, T0, T0 + 300, len(sensor.poke_times)
    )


def test_condition_arriving_just_before_the_timeout_is_caught(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=300)

    def poke(context: Any) -> bool:
        sensor.poke_times.append(clock.now)
        return clock.now >= T0 + 299  # arrives 1 s before the timeout, after the last backoff check

    sensor.poke = poke  # type: ignore[method-assign]
    sensor.execute(make_context())
    assert sensor.poke_times[-1] == T0 + 300


def test_soft_fail_skips_on_timeout(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, timeout=60, soft_fail=True)
    with pytest.raises(compat.AirflowSkipException, match="soft_fail"):
        sensor.execute(make_context())
    assert sensor.poke_times[-1] == T0 + 60


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
        task_id="task", results=[compat.AirflowFailException("criteria"), True], clock=clock, silent_fail=True
    )
    with pytest.raises(compat.AirflowFailException):
        sensor.execute(make_context())


@pytest.mark.parametrize("error", [RuntimeError("boom"), compat.AirflowFailException("criteria")])
def test_never_fail_skips_on_any_poke_error(clock: FakeClock, error: Exception) -> None:
    sensor = ScriptedSensor(task_id="task", results=[error], clock=clock, never_fail=True)
    with pytest.raises(compat.AirflowSkipException, match="never_fail"):
        sensor.execute(make_context())


def test_soft_fail_skips_fail_exceptions_like_airflow(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="task", results=[compat.AirflowFailException("x")], clock=clock, soft_fail=True
    )
    with pytest.raises(compat.AirflowSkipException):
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
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (0, None))  # a first run
    sensor = ScriptedSensor(
        task_id="task", results=[True], clock=clock, poke_interval=60, splay=0, mode=mode, timeout=600
    )
    sensor.execute(make_context())
    assert sensor.poke_times == [T0]
    assert clock.sleeps == []


def test_reschedule_at_a_huge_index_is_overflow_free(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = datetime.datetime.fromtimestamp(T0, tz=datetime.timezone.utc)
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (10**7, first))
    clock.now = T0 + 10**7 * 3.0
    sensor = ScriptedSensor(
        task_id="task", clock=clock, mode="reschedule", poke_interval=1, max_wait=4, timeout=10**9
    )
    with pytest.raises(compat.AirflowRescheduleException) as err:
        sensor.execute(make_context())
    assert err.value.reschedule_date.timestamp() >= clock.now


# ------------------------------------------------------------------ reschedule mode
def run_reschedule_mode(
    sensor: ScriptedSensor,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    pokes: int,
    dates: list | None = None,
):
    """Drive reschedule mode as Airflow would: each execution sees the exact reschedule count/first date."""
    history: list[float] = []  # start times of earlier executions (= TaskReschedule rows of this try)
    dates = [] if dates is None else dates
    for _ in range(pokes):
        first = datetime.datetime.fromtimestamp(history[0], tz=datetime.timezone.utc) if history else None
        count = len(history)
        monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context, c=count, f=first: (c, f))
        started = clock.now  # a TaskReschedule row's start_date is the execution's start (as on 2.11)
        monkeypatch.setattr(compat, "first_reschedule_anchor", lambda context, now, s=started: s)
        try:
            return sensor.execute(make_context()), dates
        except compat.AirflowRescheduleException as reschedule:
            history.append(started)
            dates.append(reschedule.reschedule_date)
            clock.now = reschedule.reschedule_date.timestamp()
    return None, dates


def test_reschedule_mode_continues_the_same_schedule_across_reschedules(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)  # the schedule itself (floor: below)
    poke_sensor = ScriptedSensor(task_id="task", results=[False] * 6 + [True], clock=clock, poke_interval=10)
    poke_sensor.execute(make_context())
    clock.now = T0
    sensor = ScriptedSensor(
        task_id="task", results=[False] * 6 + [True], clock=clock, poke_interval=10, mode="reschedule"
    )
    result, dates = run_reschedule_mode(sensor, clock, monkeypatch, 10)
    assert result is None
    assert sensor.poke_times == pytest.approx(poke_sensor.poke_times, abs=1e-6)
    assert [d.timestamp() for d in dates] == pytest.approx(poke_sensor.poke_times[1:], abs=1e-6)
    assert all(d.tzinfo is not None for d in dates)


def test_reschedule_mode_waits_for_a_long_splay_without_poking_then_matches_poke_mode(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)  # the schedule itself (floor: below)
    params = {"task_id": "task", "clock": clock, "poke_interval": 10, "splay": 300}
    poke_sensor = ScriptedSensor(results=[False] * 4 + [True], **params)
    poke_sensor.execute(make_context())
    splay_offset = poke_sensor.backoff_policy.offset(task_seed("dag", "task", "run", -1, 1), 0)
    assert splay_offset >= 1.0  # precondition: long enough to be worth a reschedule
    assert poke_sensor.poke_times[0] == pytest.approx(T0 + splay_offset)
    clock.now = T0
    sensor = ScriptedSensor(results=[False] * 4 + [True], mode="reschedule", **params)
    result, dates = run_reschedule_mode(sensor, clock, monkeypatch, 10)
    assert result is None
    # First execution: no poke, rescheduled to the splayed check #0; then the very same pokes as poke mode.
    assert dates[0].timestamp() == pytest.approx(T0 + splay_offset)
    assert sensor.poke_times == pytest.approx(poke_sensor.poke_times, abs=1e-6)


def test_reschedule_never_sooner_than_the_minimum_gap(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3's executor race: a check due within the minimum gap runs at the gap, same index."""
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)
    sensor = ScriptedSensor(
        task_id="task", clock=clock, poke_interval=1, mode="reschedule", jitter="none", splay=0
    )
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (0, None))
    with pytest.raises(compat.AirflowRescheduleException) as err:
        sensor.execute(make_context())  # check #0 at T0; #1 is due at T0 + 1
    assert err.value.reschedule_date.timestamp() == T0 + 3
    first = datetime.datetime.fromtimestamp(T0, tz=datetime.timezone.utc)
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (1, first))
    clock.now = T0 + 3
    with pytest.raises(compat.AirflowRescheduleException) as err:
        sensor.execute(make_context())  # check #1 (late); #2 is due at T0 + 3, i.e. now
    assert err.value.reschedule_date.timestamp() == T0 + 6
    assert sensor.poke_times == [T0, T0 + 3]


@pytest.mark.parametrize(("setting", "gap"), [(None, 3.0), ("12", 12.0), ("0", 0.0)])
def test_the_minimum_gap_is_a_setting(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, setting: str | None, gap: float
) -> None:
    """``[smart_ext] reschedule_min_gap_seconds`` overrides the version's default (for a scheduler that
    stalls longer than it); unset, the default holds."""
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)
    if setting is None:
        monkeypatch.delenv("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", setting)
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (0, None))
    sensor = ScriptedSensor(
        task_id="task", clock=clock, poke_interval=1, mode="reschedule", jitter="none", splay=0
    )
    with pytest.raises(compat.AirflowRescheduleException) as err:
        sensor.execute(make_context())  # check #0 at T0; #1 is due at T0 + 1
    assert err.value.reschedule_date.timestamp() == T0 + max(1.0, gap)


def test_a_bad_minimum_gap_setting_names_the_option(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", "soon")
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (0, None))
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=1, mode="reschedule", splay=0)
    with pytest.raises(ValueError, match=r"\[smart_ext\] reschedule_min_gap_seconds must be a number >= 0"):
        sensor.execute(make_context())


def test_a_splay_shorter_than_the_minimum_gap_is_slept_not_rescheduled(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3's executor race also applies to the splayed first reschedule."""
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (0, None))
    for task_id in [f"task_{n}" for n in range(20)]:
        clock.now = T0
        sensor = ScriptedSensor(task_id=task_id, clock=clock, poke_interval=10, splay=2.9, mode="reschedule")
        offset = sensor.backoff_policy.offset(task_seed("dag", task_id, "run", -1, 1), 0)
        with pytest.raises(compat.AirflowRescheduleException) as err:
            sensor.execute(make_context(FakeTI(task_id=task_id)))
        # check #0 was poked on the worker after sleeping the splay; the reschedule is for check #1
        assert sensor.poke_times == [pytest.approx(T0 + offset)]
        assert err.value.reschedule_date.timestamp() >= sensor.poke_times[0] + 3.0 - 1e-6


@pytest.mark.parametrize("row_stamped_at", ["report", "start"])
def test_a_slow_first_poke_does_not_shift_the_reschedule_schedule(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, row_stamped_at: str
) -> None:
    """Every reschedule date is ``first reschedule date + offset(k)``, whichever time Airflow stamps on the
    first TaskReschedule row (3.x: when the reschedule is reported; 2.11: the run's start)."""
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    run_start = {"at": T0}
    monkeypatch.setattr(
        compat,
        "first_reschedule_anchor",
        lambda context, now: now if row_stamped_at == "report" else run_start["at"],
    )

    class SlowSensor(ScriptedSensor):
        def poke(self, context: Any) -> Any:
            result = super().poke(context)
            clock.now += 7.0  # a slow query
            return result

    sensor = SlowSensor(
        task_id="task", clock=clock, poke_interval=10, jitter="none", splay=0, mode="reschedule"
    )
    seed = task_seed("dag", "task", "run", -1, 1)
    rows: list[float] = []
    dates: list[float] = []
    for _ in range(5):
        run_start["at"] = clock.now
        first = datetime.datetime.fromtimestamp(rows[0], tz=datetime.timezone.utc) if rows else None
        count = len(rows)
        monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context, c=count, f=first: (c, f))
        with pytest.raises(compat.AirflowRescheduleException) as err:
            sensor.execute(make_context())
        rows.append(clock.now if row_stamped_at == "report" else run_start["at"])
        dates.append(err.value.reschedule_date.timestamp())
        clock.now = dates[-1]
    offsets = [sensor.backoff_policy.offset(seed, k) for k in range(1, 6)]
    assert dates == pytest.approx([rows[0] + offset for offset in offsets], abs=1e-6)


def test_late_reschedule_skips_missed_checks_instead_of_bursting(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = ScriptedSensor(
        task_id="task", clock=clock, poke_interval=10, mode="reschedule", jitter="none", splay=0
    )
    first = datetime.datetime.fromtimestamp(T0, tz=datetime.timezone.utc)
    # 2nd execution, but the scheduler ran it 1000 s late: the next check is the first one still ahead.
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (1, first))
    clock.now = T0 + 1000
    with pytest.raises(compat.AirflowRescheduleException) as err:
        sensor.execute(make_context())
    # jitter none: checks at 0, 10, 30, 70, 150 s, then every 100 s (the default cap, 10 x poke_interval)
    offsets = [sensor.backoff_policy.offset("any", k) for k in range(20)]
    assert offsets[:6] == [0, 10, 30, 70, 150, 250]
    assert err.value.reschedule_date.timestamp() - T0 == min(o for o in offsets if o >= 1000)


def test_reschedule_mode_times_out_at_the_deadline_measured_from_the_first_reschedule(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, mode="reschedule", timeout=200)
    dates: list[datetime.datetime] = []
    with pytest.raises(compat.AirflowSensorTimeout):
        run_reschedule_mode(sensor, clock, monkeypatch, 50, dates)
    assert dates[-1].timestamp() == T0 + 200  # the final check is scheduled exactly at the deadline
    assert sensor.poke_times[-1] == T0 + 200 and len(sensor.poke_times) == len(dates) + 1


@pytest.mark.parametrize("soft_fail", [False, True])
def test_reschedule_mode_ends_at_the_execution_deadline_with_a_task_timeout(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, soft_fail: bool
) -> None:
    # Poke mode is one process that Airflow stops at execution_timeout with a retryable AirflowTaskTimeout;
    # reschedule mode is one process per check, so it keeps that deadline itself, from the try's first start.
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)  # the gap Airflow 3 gets, pinned
    sensor = ScriptedSensor(
        task_id="task",
        clock=clock,
        poke_interval=2,
        mode="reschedule",
        timeout=40,
        execution_timeout=datetime.timedelta(seconds=8),
        soft_fail=soft_fail,
    )
    dates: list[datetime.datetime] = []
    with pytest.raises(compat.AirflowTaskTimeout, match="execution_timeout of 8s"):
        run_reschedule_mode(sensor, clock, monkeypatch, 50, dates)
    # No check after the execution deadline, even when Airflow's minimum reschedule gap brings the task
    # back later than the last check the schedule placed there.
    assert dates and all(at <= T0 + 8 for at in sensor.poke_times)
    assert len(sensor.poke_times) >= 3


def test_first_reschedule_anchor_predicts_the_row_airflow_writes() -> None:
    ti = FakeTI()
    ti.start_date = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)  # type: ignore[attr-defined]
    anchor = compat.first_reschedule_anchor({"ti": ti}, T0)
    # 3.x stamps the row when the reschedule is reported (now); 2.11 copies the TI's start_date.
    assert anchor == (T0 if compat.AIRFLOW_V_3_0_PLUS else ti.start_date.timestamp())  # type: ignore[attr-defined]


def test_reschedule_state_from_airflow_3_context() -> None:
    if not compat.AIRFLOW_V_3_0_PLUS:
        pytest.skip("3.x reads the runner's context; 2.11 reads TaskReschedule rows (integration tests)")
    first = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    class TI:
        def get_first_reschedule_date(self, context: Any) -> datetime.datetime:
            return first

    assert compat.sensor_reschedule_state({"ti": TI(), "task_reschedule_count": 0}) == (0, None)
    assert compat.sensor_reschedule_state({"ti": TI(), "task_reschedule_count": 4}) == (4, first)


# ------------------------------------------------------------------ deferrable (sensor side of Contract C)
class Deferred(Exception):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("deferred")
        self.kwargs = kwargs


def capture_defer(sensor: BackoffSensor, monkeypatch: pytest.MonkeyPatch) -> None:
    def defer(**kwargs: Any) -> None:
        raise Deferred(**kwargs)

    monkeypatch.setattr(sensor, "defer", defer)


def test_deferrable_pokes_once_then_defers_with_the_remaining_time(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = PathSensor(
        task_id="task", path="/data/{{ ds }}", min_size=3, deferrable=True, poke_interval=10, timeout=600
    )
    capture_defer(sensor, monkeypatch)
    sensor.path = "/data/2026-01-01"  # what Airflow's rendering does to a template field
    with pytest.raises(Deferred) as err:
        sensor.execute(make_context())
    deferral = err.value.kwargs
    assert deferral["method_name"] == "execute_complete"
    assert deferral["timeout"] == datetime.timedelta(seconds=600 + DEFERRAL_GRACE_SECONDS)
    classpath, trigger_kwargs = deferral["trigger"].serialize()
    assert classpath.endswith("BackoffTrigger")
    assert trigger_kwargs["policy"] == sensor.backoff_policy.to_dict()
    check = trigger_kwargs["check"]
    # The schedule belongs to the condition: its seed, anchored on the poke_interval grid (T0 is on it).
    assert trigger_kwargs["seed"] == condition_seed(sharing_key(check))
    assert trigger_kwargs["started_at"] == T0
    assert trigger_kwargs["deadline"] == T0 + 600
    assert trigger_kwargs["after"] == 0
    assert check["type"] == "sensor"
    assert check["classpath"] == "tests.unit.test_sensor_helpers.PathSensor"
    assert check["kwargs"] == {"path": "/data/2026-01-01", "min_size": 3}  # rendered, no framework args
    assert check["context"]["task_id"] == "task" and check["context"]["try_number"] == 1
    json.dumps(trigger_kwargs)  # everything travels as JSON


def deferred_trigger_kwargs(sensor: BackoffSensor, context: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(Deferred) as err:
        sensor.execute(context)
    return dict(err.value.kwargs["trigger"].serialize()[1])


def test_identical_deferrable_waits_get_one_schedule(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks waiting on one condition, started 7 s apart in one 10 s cell: same seed, same anchor."""
    kwargs: dict[str, Any] = {"path": "/p", "deferrable": True, "poke_interval": 10, "timeout": 600}
    first = PathSensor(task_id="a", **kwargs)
    second = PathSensor(task_id="b", **kwargs)
    other = PathSensor(task_id="c", **{**kwargs, "path": "/q"})
    for sensor in (first, second, other):
        capture_defer(sensor, monkeypatch)
    clock.now = T0 + 1
    a = deferred_trigger_kwargs(first, make_context(FakeTI(task_id="a")))
    clock.now = T0 + 8
    b = deferred_trigger_kwargs(second, make_context(FakeTI(dag_id="other_dag", task_id="b")))
    c = deferred_trigger_kwargs(other, make_context(FakeTI(task_id="c")))
    assert a["seed"] == b["seed"] != c["seed"]
    assert a["started_at"] == b["started_at"] == aligned_start(T0 + 8, 10) == T0
    assert (a["deadline"], b["deadline"]) == (T0 + 601, T0 + 608)  # deadlines stay the tasks' own
    policy = first.backoff_policy
    assert policy.next_check(a["seed"], a["started_at"], T0 + 8, None) == policy.next_check(
        b["seed"], b["started_at"], T0 + 8, None
    )


def test_aligned_slots_passed_before_deferring_are_not_counted_as_checks(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = PathSensor(
        task_id="task", path="/p", deferrable=True, poke_interval=10, jitter="none", splay=0, timeout=600
    )
    capture_defer(sensor, monkeypatch)
    clock.now = T0 + 9.5  # aligned slots: T0 + 0, 10, 30, 70, ...; #0 at T0 passed before the start
    kwargs = deferred_trigger_kwargs(sensor, make_context())
    assert (kwargs["started_at"], kwargs["after"]) == (T0, 0)  # next: #1 at T0 + 10
    clock.now = T0 + 12
    sensor2 = PathSensor(
        task_id="task", path="/p", deferrable=True, poke_interval=10, jitter="none", splay=0, timeout=600
    )
    capture_defer(sensor2, monkeypatch)
    kwargs = deferred_trigger_kwargs(sensor2, make_context())
    assert (kwargs["started_at"], kwargs["after"]) == (T0 + 10, 0)
    # Resuming: the worker's check plus the triggerer's checks #after+1..#index, nothing else.
    context = make_context()
    clock.now = T0 + 80
    sensor2.execute_complete(
        context, make_event("success", check_index=4, checks=2), started_at=T0 + 12, after=2, worker_pokes=1
    )
    assert context["ti"].xcoms[STATS_XCOM_KEY]["pokes"] == 3


def test_deferrable_cheap_positive_needs_no_deferral(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = ScriptedSensor(
        task_id="task", results=[True], clock=clock, deferrable=True, deferrable_fallback="reschedule"
    )
    # ScriptedSensor's `results`/`clock` are not JSON: it fell back to reschedule mode at construction.
    assert sensor.mode == "reschedule" and sensor.deferrable is False
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    monkeypatch.setattr(sensor, "poke", lambda context: True)
    capture_defer(sensor, monkeypatch)
    assert sensor.execute(make_context()) is None  # no Deferred raised


def test_redefer_never_resets_the_deadline(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    sensor = PathSensor(
        task_id="task", path="/p", deferrable=True, silent_fail=True, poke_interval=10, timeout=600
    )
    capture_defer(sensor, monkeypatch)
    clock.now = T0 + 250
    event = {
        "status": "error",
        "pokes": 3,
        "waited_seconds": 250,
        "xcom_value": None,
        "message": "db down",
        "check_index": 3,
    }
    seed = condition_seed("any")
    with pytest.raises(Deferred) as err:
        sensor.execute_complete(
            make_context(), event, started_at=T0, deadline=T0 + 600, seed=seed, worker_pokes=1, after=0
        )
    _, trigger_kwargs = err.value.kwargs["trigger"].serialize()
    # Same anchor and deadline; checks #4.. whose times passed while the task resumed are skipped.
    following = sensor.backoff_policy.next_check(seed, T0, T0 + 250, T0 + 600, after=3)
    assert following is not None and following.index > 4
    assert (trigger_kwargs["started_at"], trigger_kwargs["deadline"], trigger_kwargs["after"]) == (
        T0,
        T0 + 600,
        following.index - 1,
    )
    assert err.value.kwargs["timeout"] == datetime.timedelta(seconds=350 + DEFERRAL_GRACE_SECONDS)


def make_event(status: str, **extra: Any) -> dict[str, Any]:
    event = {
        "status": status,
        "checks": 4,
        "checks_complete": True,
        "waited_seconds": 12.0,
        "xcom_value": None,
        "message": "m",
        "check_index": 4,
    }
    event.update(extra)
    return event


def test_execute_complete_success_returns_the_xcom_value(clock: FakeClock) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    context = make_context()
    clock.now = T0 + 12
    assert sensor.execute_complete(context, make_event("success", xcom_value=[1, 2]), started_at=T0) == [1, 2]
    assert context["ti"].xcoms[STATS_XCOM_KEY] == {"pokes": 5, "waited_seconds": 12.0, "mode": "deferrable"}


@pytest.mark.parametrize(
    ("status", "sensor_kwargs", "expected"),
    [
        ("timeout", {}, compat.AirflowSensorTimeout),
        ("timeout", {"soft_fail": True}, compat.AirflowSkipException),
        ("failure", {}, compat.AirflowFailException),
        ("failure", {"soft_fail": True}, compat.AirflowSkipException),
        ("failure", {"never_fail": True}, compat.AirflowSkipException),
        ("failure", {"silent_fail": True}, compat.AirflowFailException),
        ("error", {}, compat.AirflowException),
        ("error", {"never_fail": True}, compat.AirflowSkipException),
        ("skip", {}, compat.AirflowSkipException),
        ("bogus", {}, compat.AirflowException),
    ],
)
def test_execute_complete_maps_outcomes_like_poke_mode(
    clock: FakeClock, status: str, sensor_kwargs: dict, expected: type
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, **sensor_kwargs)
    with pytest.raises(expected) as err:
        sensor.execute_complete(make_context(), make_event(status), started_at=T0, deadline=T0 + 100)
    if expected is compat.AirflowException:
        assert not isinstance(err.value, (compat.AirflowFailException, compat.AirflowSensorTimeout))


class VendorError(Exception):
    """A library's error a poke may raise (the worker has its module imported, as the DAG's sensor does)."""


class NeedsTwoArguments(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")


@pytest.mark.parametrize(
    ("raised", "expected_class", "expected_text"),
    [
        (VendorError("disk gone"), VendorError, "disk gone"),  # the check's own class, as poke mode raises it
        (NeedsTwoArguments(503, "busy"), compat.AirflowException, "NeedsTwoArguments: 503 busy"),
        (KeyError("k"), KeyError, "k"),
    ],
)
def test_a_check_error_from_the_triggerer_is_raised_with_its_own_class(
    clock: FakeClock, raised: Exception, expected_class: type, expected_text: str
) -> None:
    outcome = outcome_from_exception(raised)
    event = make_event("error", message=outcome.message, error_class=error_class_path(raised))
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    with pytest.raises(expected_class) as err:
        sensor.execute_complete(make_context(), event, started_at=T0, deadline=T0 + 100)
    assert type(err.value) is expected_class and expected_text in str(err.value)


@pytest.mark.parametrize(
    "class_path", [None, "no_such_module_imported:Error", "builtins:print", "builtins:SystemExit", "x"]
)
def test_an_error_class_not_safely_rebuildable_falls_back_to_airflow_exception(
    clock: FakeClock, class_path: Any
) -> None:
    event = make_event("error", message="Boom: text", error_class=class_path)
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    with pytest.raises(compat.AirflowException, match="Check failed in the triggerer: Boom: text"):
        sensor.execute_complete(make_context(), event, started_at=T0, deadline=T0 + 100)


@pytest.mark.parametrize(
    ("status", "sensor_kwargs", "expected"),
    [
        # poke mode fails (and retries) a raising poke even with soft_fail; Airflow's deferred-sensor
        # wrapper would skip it -- resume_execution must keep poke mode's mapping.
        ("error", {"soft_fail": True}, compat.AirflowException),
        ("timeout", {"soft_fail": True}, compat.AirflowSkipException),
        ("failure", {}, compat.AirflowFailException),
    ],
)
def test_resume_execution_maps_outcomes_like_poke_mode(
    clock: FakeClock, status: str, sensor_kwargs: dict, expected: type
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, **sensor_kwargs)
    next_kwargs = {"event": make_event(status), "started_at": T0, "deadline": T0 + 100}
    with pytest.raises(expected) as err:
        sensor.resume_execution("execute_complete", next_kwargs, make_context())
    if expected is compat.AirflowException:
        assert not isinstance(err.value, compat.AirflowSkipException)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({}, compat.AirflowSensorTimeout),
        ({"soft_fail": True}, compat.AirflowSkipException),
        # poke mode fails a timeout with never_fail; 3.x's own sensor wrapper would skip it
        ({"never_fail": True}, compat.AirflowSensorTimeout),
    ],
    ids=["plain", "soft_fail", "never_fail"],
)
def test_airflows_trigger_timeout_ends_as_poke_modes_timeout(flags: dict, expected: type) -> None:
    """Airflow's backstop (its trigger timeout; on this version's own ``__fail__`` signal) ends the wait as
    poke mode's timeout: never a retryable error, skipped with soft_fail only."""
    error = "Trigger timeout" if compat.AIRFLOW_V_3_0_PLUS else "Trigger/execution timeout"
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, **flags)
    with pytest.raises(compat.AirflowException) as raised:
        sensor.resume_execution("__fail__", {"error": error}, make_context())
    assert type(raised.value) is expected


# ------------------------------------------------------------------ shippability (DAG parse)
def test_unshippable_class_fails_at_construction_with_advice() -> None:
    class LocalSensor(BackoffSensor):
        def poke(self, context: Any) -> bool:
            return False

    with pytest.raises(ValueError, match="cannot be imported by name in the triggerer.*deferrable_fallback"):
        LocalSensor(task_id="s", deferrable=True)
    assert LocalSensor(task_id="s2", deferrable=False).deferrable is False


def test_unserializable_argument_fails_at_construction() -> None:
    with pytest.raises(
        ValueError, match="constructor argument 'path'=.* does not travel to the triggerer as JSON unchanged"
    ):
        PathSensor(task_id="s", path={1, 2}, deferrable=True)  # type: ignore[arg-type]


def test_fallback_to_reschedule_mode_when_asked() -> None:
    sensor = PathSensor(task_id="s", path={1, 2}, deferrable=True, deferrable_fallback="reschedule")  # type: ignore[arg-type]
    assert (sensor.deferrable, sensor.mode) == (False, "reschedule")
    assert "does not travel to the triggerer as JSON unchanged" in (sensor.deferrable_fallback_reason or "")


def test_default_deferrable_comes_from_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert PathSensor(task_id="s", path="/p").deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert PathSensor(task_id="s2", path="/p").deferrable is False


# ------------------------------------------------------------------ transient errors (issue 14, part 2)
def test_transient_errors_are_not_yet_in_poke_mode(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    counted: list[str] = []
    monkeypatch.setattr(compat.Stats, "incr", lambda name, *a, **k: counted.append(name))
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
    with pytest.raises(compat.AirflowSensorTimeout):
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


# ------------------------------------------------------------------ parse-time truth (issue 14, part 5)
class _LocalSensorFactory:
    @staticmethod
    def make() -> type[BackoffSensor]:
        class LocalSensor(BackoffSensor):  # defined in a function: not importable in the triggerer
            def poke(self, context: Any) -> bool:
                return False

        return LocalSensor


BAD_FOR_BOTH = [
    (
        {"deferrable": "yes"},
        "deferrable must be True or False, or None for [operators] default_deferrable; got 'yes'",
    ),
    ({"deferrable_fallback": "poke"}, "deferrable_fallback must be one of None, 'reschedule'; got 'poke'"),
    ({"transient_errors": ["no.such.Error"]}, "transient_errors: cannot import 'no.such.Error'"),
    ({"check_timeout": -5}, "check_timeout must be > 0 seconds"),
    ({"rate_limit": 0}, "rate_limit must be a number of checks per second > 0"),
    ({"timeout": 60, "splay": 1e308}, "splay (1e+308s) must be <= timeout"),
    ({"backoff_factor": 1e308}, "backoff_factor must be a finite number >= 1 and <= 10"),
    # arguments that would change on the way to the triggerer are refused, not silently altered
    ({"deferrable": True, "min_size": {1: "a"}}, "constructor argument 'min_size'={1: 'a'} does not travel"),
    ({"deferrable": True, "min_size": {1: "a", "b": 2}}, "constructor argument 'min_size'="),
    ({"deferrable": True, "min_size": (1, 2)}, "arrives as [1, 2]"),
    ({"start_from_trigger": "yes"}, "start_from_trigger must be None, True or False; got 'yes'"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_FOR_BOTH)
def test_mapped_and_unmapped_sensors_get_identical_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as unmapped:
        PathSensor(task_id="s", path="/p", **kwargs)
    with pytest.raises(ValueError) as mapped:
        PathSensor.partial(task_id="s", **kwargs)
    assert message in str(unmapped.value)
    assert str(mapped.value) == str(unmapped.value)


def test_mapped_unshippable_class_fails_at_parse_like_unmapped() -> None:
    local = _LocalSensorFactory.make()
    with pytest.raises(ValueError) as unmapped:
        local(task_id="s", deferrable=True)
    with pytest.raises(ValueError) as mapped:
        local.partial(task_id="s", deferrable=True)
    assert "cannot be imported by name in the triggerer" in str(mapped.value)
    assert str(mapped.value) == str(unmapped.value)
    local.partial(task_id="ok", deferrable=True, deferrable_fallback="reschedule")  # the fallback is allowed


@pytest.mark.parametrize(("kwargs", "message"), BAD_FOR_BOTH)
def test_literal_expand_values_get_the_constructors_validation(kwargs: dict, message: str) -> None:
    from airflow import DAG

    name, value = list(kwargs.items())[-1]
    fixed = {key: item for key, item in kwargs.items() if key != name}
    with pytest.raises(ValueError) as unmapped:
        PathSensor(task_id="s", path="/p", **kwargs)
    with DAG("mapped_literal", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        partial = PathSensor.partial(task_id="s", **fixed)
        with pytest.raises(ValueError) as mapped:
            partial.expand(**{name: [None if name != "min_size" else 1, value]})
        partial.expand(path=["/a"])  # Airflow would warn about a partial never expanded
    assert str(mapped.value) == f"Task 's', .expand({name}=...) item 1: {unmapped.value}"
    with DAG("mapped_literal_kwargs", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        partial = PathSensor.partial(task_id="s", **fixed)
        with pytest.raises(ValueError) as mapped_kwargs:
            partial.expand_kwargs([{"path": "/a"}, {"path": "/b", name: value}])
        partial.expand(path=["/a"])
    assert str(mapped_kwargs.value) == f"Task 's', .expand_kwargs(...) item 1: {unmapped.value}"


def test_values_from_an_upstream_xcom_are_checked_when_the_task_runs() -> None:
    from airflow import DAG

    from airflow_smart_ext.compat import task

    with DAG("mapped_json", schedule=None, start_date=datetime.datetime(2026, 1, 1)):

        @task
        def paths() -> list[str]:
            return ["/a", "/b"]

        PathSensor.partial(task_id="mapped", deferrable=True).expand(path=["/a", "/b"])
        PathSensor.partial(task_id="from_xcom", deferrable=True).expand(path=paths())


def test_default_cap_bounds_detection_latency_after_a_base_class_swap() -> None:
    # Airflow's defaults after swapping the base class: poke_interval=60, no max_wait, 7-day timeout.
    sensor = PathSensor(task_id="s", path="/p", poke_interval=60, timeout=7 * 86400, jitter="none", splay=0)
    policy = sensor.backoff_policy
    assert policy.cap_seconds == 600  # 10 x poke_interval
    day2 = [policy.offset("x", k) for k in range(140, 150)]
    assert all(b - a <= 600 for a, b in zip(day2, day2[1:], strict=False))
    # Large intervals: never below poke_interval, never above an hour unless poke_interval is.
    assert sensor_parameters.default_max_wait(600) == 3600
    assert sensor_parameters.default_max_wait(7200) == 7200
    assert sensor_parameters.default_max_wait(5) == 50
    # An explicit max_wait still wins.
    assert PathSensor(task_id="s2", path="/p", poke_interval=60, max_wait=86400).backoff_policy.cap == 86400


def test_decorrelated_range_is_narrowed_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="supports at most 20,000 checks"):
        PathSensor(task_id="s", path="/p", jitter="decorrelated", poke_interval=1, timeout=86400)
    # The default timeout at Airflow's default poke_interval stays accepted.
    PathSensor(task_id="s2", path="/p", jitter="decorrelated", poke_interval=60, timeout=7 * 86400)


def test_rate_limited_deferrable_sensor_leaves_check_0_to_the_triggerer(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, rate_limit=1.0, poke_interval=10)
    pokes: list[Any] = []
    monkeypatch.setattr(sensor, "poke", lambda context: pokes.append(context) or True)
    capture_defer(sensor, monkeypatch)
    with pytest.raises(Deferred) as err:
        sensor.execute(make_context())
    assert pokes == []  # no worker check: the triggerer paces it with the connection's other checks
    _, kwargs = err.value.kwargs["trigger"].serialize()
    assert kwargs["after"] == -1 and kwargs["rate_limit"] == 1.0
    event = {"status": "success", "check_index": 0, "xcom_value": None, "message": "ok", "pokes": 1}
    sensor.execute_complete(make_context(), event, **err.value.kwargs["kwargs"])


def test_transient_error_types_must_be_importable_by_the_triggerer() -> None:
    class LocalError(Exception):  # defined in a function, like a class in a DAG file
        pass

    with pytest.raises(ValueError, match="transient_errors: .*LocalError cannot be imported by name"):
        PathSensor(task_id="s", path="/p", deferrable=True, transient_errors=[LocalError])
    with pytest.raises(ValueError, match="transient_errors: .*LocalError cannot be imported by name"):
        PathSensor.partial(task_id="s", deferrable=True, transient_errors=[LocalError])
    PathSensor(task_id="s2", path="/p", transient_errors=[LocalError])  # poke mode: fine, no shipping


def test_a_template_field_not_named_after_its_constructor_argument_cannot_defer() -> None:
    # The triggerer re-creates the sensor from its constructor arguments: 'filepath' would stay unrendered.
    with pytest.raises(ValueError, match=r"template field\(s\) \['filepath'\] are not constructor arguments"):
        RenamedFieldSensor(task_id="s", path="/data/{{ ds }}/done", deferrable=True)
    fallback = RenamedFieldSensor(
        task_id="f", path="/data/{{ ds }}/done", deferrable=True, deferrable_fallback="reschedule"
    )
    assert fallback.mode == "reschedule" and "unrendered" in str(fallback.deferrable_fallback_reason)
    # Nothing to render: nothing is lost.
    assert RenamedFieldSensor(task_id="ok", path="/data/fixed", deferrable=True).deferrable is True


# ------------------------------------------------------------------ counts are checks made (issue 23)
@pytest.mark.parametrize(
    ("worker_pokes", "after", "check_index", "checks", "expected"),
    [
        (1, 0, 4, 4, 5),  # no slot skipped: the same either way
        (1, 0, 31, 11, 12),  # slots skipped while the triggerer was down: not counted (was 32)
        (1, 20, 25, 4, 5),  # slots skipped before the deferral: not counted (was 6)
        (0, -1, 9, 7, 7),  # zero-worker resume: every check ran in the triggerer (was 10)
        (3, 5, 9, 2, 5),  # a re-deferral (silent_fail) carries the checks made so far
    ],
)
def test_deferrable_pokes_count_checks_made_not_schedule_slots(
    clock: FakeClock, worker_pokes: int, after: int, check_index: int, checks: int, expected: int
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    context = make_context()
    clock.now = T0 + 12
    event = make_event("success", check_index=check_index, checks=checks)
    sensor.execute_complete(context, event, started_at=T0, after=after, worker_pokes=worker_pokes)
    assert context["ti"].xcoms[STATS_XCOM_KEY]["pokes"] == expected


def test_timeout_message_counts_checks_made(clock: FakeClock) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    clock.now = T0 + 12
    with pytest.raises(compat.AirflowSensorTimeout, match=r"after 12 poke\(s\)"):
        sensor.execute_complete(
            make_context(),
            make_event("timeout", check_index=31, checks=11),
            started_at=T0,
            after=0,
            worker_pokes=1,
        )


def test_a_rebuilt_triggers_count_is_logged_as_a_lower_bound(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    lines: list[str] = []
    monkeypatch.setattr(sensor.log, "info", lambda message, *args: lines.append(message % args))
    event = make_event("success", checks=2, checks_complete=False)
    sensor.execute_complete(make_context(), event, started_at=T0, after=0, worker_pokes=1)
    assert any("3 poke(s) is a lower bound" in line for line in lines)


def test_reschedule_mode_pokes_count_runs_that_poked(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow's reschedule count is the number of earlier runs of the try, each one poke (no splay wait)."""
    monkeypatch.setattr(compat, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    sensor = ScriptedSensor(task_id="task", results=[True], clock=clock, mode="reschedule", splay=0)
    first = datetime.datetime.fromtimestamp(T0, tz=datetime.timezone.utc)
    monkeypatch.setattr(compat, "sensor_reschedule_state", lambda context: (6, first))
    clock.now = T0 + 10_000  # late: many schedule slots passed, none of them a check
    context = make_context()
    sensor.execute(context)
    assert context["ti"].xcoms[STATS_XCOM_KEY]["pokes"] == 7


# ------------------------------------------------------------------ execution_timeout as in poke mode (issue 23)
def _exec_sensor(**kwargs: Any) -> PathSensor:
    arguments: dict[str, Any] = {
        "task_id": "task",
        "path": "/p",
        "deferrable": True,
        "poke_interval": 2,
        "timeout": 40,
        "execution_timeout": datetime.timedelta(seconds=8),
        "start_from_trigger": False,
        **kwargs,
    }
    return PathSensor(**arguments)


def test_worker_first_deferral_ends_at_the_execution_deadline(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = _exec_sensor()
    monkeypatch.setattr(sensor, "poke", lambda context: False)
    capture_defer(sensor, monkeypatch)
    with pytest.raises(Deferred) as err:
        sensor.execute(make_context())
    _, trigger_kwargs = err.value.kwargs["trigger"].serialize()
    assert trigger_kwargs["deadline"] == T0 + 8  # the execution deadline, not the timeout (T0 + 40)
    assert err.value.kwargs["kwargs"]["deadline"] == T0 + 40  # the sensor's own deadline is kept
    assert err.value.kwargs["timeout"] == datetime.timedelta(seconds=8 + DEFERRAL_GRACE_SECONDS)


@pytest.mark.parametrize("soft_fail", [False, True])
def test_a_timeout_at_the_execution_deadline_resumes_into_a_task_timeout(
    clock: FakeClock, soft_fail: bool
) -> None:
    sensor = _exec_sensor(soft_fail=soft_fail)
    clock.now = T0 + 8
    event = make_event("timeout", checks=3, deadline_reached=True)
    with pytest.raises(
        compat.AirflowTaskTimeout, match="execution_timeout of 8s"
    ):  # retryable, as in poke mode
        sensor.execute_complete(
            make_context(), event, started_at=T0, deadline=T0 + 40, worker_pokes=1, after=0
        )


def test_zero_worker_timeout_event_at_the_execution_deadline_is_a_task_timeout(clock: FakeClock) -> None:
    sensor = _exec_sensor(start_from_trigger=None)
    event = make_event(
        "timeout", checks=4, started_at=T0, deadline=T0 + 40, execution_deadline=T0 + 8, deadline_reached=True
    )
    with pytest.raises(compat.AirflowTaskTimeout):
        sensor.execute_complete(make_context(), event, worker_pokes=0, after=-1)


def test_a_check_that_raised_a_sensor_timeout_stays_one_before_the_execution_deadline(
    clock: FakeClock,
) -> None:
    """A poke that raises AirflowSensorTimeout ends the wait as in poke mode (never retried), even with an
    execution_timeout shorter than the timeout: only the trigger's own deadline event is a task timeout."""
    sensor = _exec_sensor()
    clock.now = T0 + 3
    event = make_event("timeout", checks=2, message="AirflowSensorTimeout: the poke said so")
    with pytest.raises(compat.AirflowSensorTimeout):
        sensor.execute_complete(
            make_context(), event, started_at=T0, deadline=T0 + 40, worker_pokes=1, after=0
        )


def test_a_timeout_at_the_sensor_deadline_stays_a_sensor_timeout(clock: FakeClock) -> None:
    sensor = _exec_sensor(execution_timeout=datetime.timedelta(seconds=100))
    event = make_event("timeout", checks=3)
    with pytest.raises(compat.AirflowSensorTimeout):
        sensor.execute_complete(
            make_context(), event, started_at=T0, deadline=T0 + 40, worker_pokes=1, after=0
        )


@pytest.mark.parametrize(
    ("execution_seconds", "expected"), [(8, "AirflowTaskTimeout"), (100, "AirflowSensorTimeout")]
)
def test_airflows_trigger_timeout_maps_by_which_deadline_it_backs_up(
    execution_seconds: int, expected: str
) -> None:
    """Airflow's own trigger timeout (the backstop; on 3.x capped at the execution deadline for a zero-worker
    start) ends the task as poke mode would at that deadline, on this Airflow version's signal."""
    sensor = _exec_sensor(execution_timeout=datetime.timedelta(seconds=execution_seconds))
    error = "Trigger timeout" if compat.AIRFLOW_V_3_0_PLUS else "Trigger/execution timeout"
    with pytest.raises(getattr(compat, expected)):
        sensor.resume_execution("__fail__", {"error": error}, make_context())


def test_the_start_plan_ships_the_execution_timeout() -> None:
    sensor = _exec_sensor(start_from_trigger=None)
    if sensor.start_trigger_args is None:
        pytest.skip(f"no zero-worker start on this Airflow: {sensor.worker_first_reason}")
    assert sensor.start_trigger_args.trigger_kwargs["start"]["execution_timeout"] == 8


def test_a_skip_in_the_triggerer_keeps_the_pokes_own_text() -> None:
    # The worker raises the skip again from this message: as in poke mode, the log shows the poke's text,
    # not "AirflowSkipException: ..." (the differential matrix reads the exception classes a log names).
    from airflow_smart_ext.conditions.outcomes import outcome_from_exception

    outcome = outcome_from_exception(compat.AirflowSkipException("scripted skip"))
    assert (outcome.status, outcome.message) == ("skip", "scripted skip")
