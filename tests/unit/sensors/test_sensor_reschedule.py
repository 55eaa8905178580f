"""BackoffSensor in reschedule mode: one schedule across reschedules, the minimum gap, deadlines."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import task_seed
from tests.unit.clock import START, FakeClock
from tests.unit.sensors.helpers import FakeTI, ScriptedSensor, make_context


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
        monkeypatch.setattr(
            compat.rescheduling, "sensor_reschedule_state", lambda context, c=count, f=first: (c, f)
        )
        started = clock.now  # a TaskReschedule row's start_date is the execution's start (as on 2.11)
        monkeypatch.setattr(compat.rescheduling, "first_reschedule_anchor", lambda context, now, s=started: s)
        try:
            return sensor.execute(make_context()), dates
        except compat.locations.AirflowRescheduleException as reschedule:
            history.append(started)
            dates.append(reschedule.reschedule_date)
            clock.now = reschedule.reschedule_date.timestamp()
    return None, dates


def test_reschedule_mode_continues_the_same_schedule_across_reschedules(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the schedule itself (floor: below)
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    poke_sensor = ScriptedSensor(task_id="task", results=[False] * 6 + [True], clock=clock, poke_interval=10)
    poke_sensor.execute(make_context())
    clock.now = START
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
    # the schedule itself (floor: below)
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    params = {"task_id": "task", "clock": clock, "poke_interval": 10, "splay": 300}
    poke_sensor = ScriptedSensor(results=[False] * 4 + [True], **params)
    poke_sensor.execute(make_context())
    splay_offset = poke_sensor.backoff_policy.offset(task_seed("dag", "task", "run", -1, 1), 0)
    assert splay_offset >= 1.0  # precondition: long enough to be worth a reschedule
    assert poke_sensor.poke_times[0] == pytest.approx(START + splay_offset)
    clock.now = START
    sensor = ScriptedSensor(results=[False] * 4 + [True], mode="reschedule", **params)
    result, dates = run_reschedule_mode(sensor, clock, monkeypatch, 10)
    assert result is None
    # First execution: no poke, rescheduled to the splayed check #0; then the very same pokes as poke mode.
    assert dates[0].timestamp() == pytest.approx(START + splay_offset)
    assert sensor.poke_times == pytest.approx(poke_sensor.poke_times, abs=1e-6)


def test_reschedule_never_sooner_than_the_minimum_gap(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3's executor race: a check due within the minimum gap runs at the gap, same index."""
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)
    sensor = ScriptedSensor(
        task_id="task", clock=clock, poke_interval=1, mode="reschedule", jitter="none", splay=0
    )
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (0, None))
    with pytest.raises(compat.locations.AirflowRescheduleException) as err:
        sensor.execute(make_context())  # check #0 at START; #1 is due at START + 1
    assert err.value.reschedule_date.timestamp() == START + 3
    first = datetime.datetime.fromtimestamp(START, tz=datetime.timezone.utc)
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (1, first))
    clock.now = START + 3
    with pytest.raises(compat.locations.AirflowRescheduleException) as err:
        sensor.execute(make_context())  # check #1 (late); #2 is due at START + 3, i.e. now
    assert err.value.reschedule_date.timestamp() == START + 6
    assert sensor.poke_times == [START, START + 3]


@pytest.mark.parametrize(("setting", "gap"), [(None, 3.0), ("12", 12.0), ("0", 0.0)])
def test_the_minimum_gap_is_a_setting(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, setting: str | None, gap: float
) -> None:
    """``[smart_ext] reschedule_min_gap_seconds`` overrides the version's default (for a scheduler that
    stalls longer than it); unset, the default holds."""
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)
    if setting is None:
        monkeypatch.delenv("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", setting)
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (0, None))
    sensor = ScriptedSensor(
        task_id="task", clock=clock, poke_interval=1, mode="reschedule", jitter="none", splay=0
    )
    with pytest.raises(compat.locations.AirflowRescheduleException) as err:
        sensor.execute(make_context())  # check #0 at START; #1 is due at START + 1
    assert err.value.reschedule_date.timestamp() == START + max(1.0, gap)


def test_a_bad_minimum_gap_setting_names_the_option(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", "soon")
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (0, None))
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=1, mode="reschedule", splay=0)
    with pytest.raises(ValueError, match=r"\[smart_ext\] reschedule_min_gap_seconds must be a number >= 0"):
        sensor.execute(make_context())


def test_a_splay_shorter_than_the_minimum_gap_is_slept_not_rescheduled(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3's executor race also applies to the splayed first reschedule."""
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (0, None))
    for task_id in [f"task_{n}" for n in range(20)]:
        clock.now = START
        sensor = ScriptedSensor(task_id=task_id, clock=clock, poke_interval=10, splay=2.9, mode="reschedule")
        offset = sensor.backoff_policy.offset(task_seed("dag", task_id, "run", -1, 1), 0)
        with pytest.raises(compat.locations.AirflowRescheduleException) as err:
            sensor.execute(make_context(FakeTI(task_id=task_id)))
        # check #0 was poked on the worker after sleeping the splay; the reschedule is for check #1
        assert sensor.poke_times == [pytest.approx(START + offset)]
        assert err.value.reschedule_date.timestamp() >= sensor.poke_times[0] + 3.0 - 1e-6


@pytest.mark.parametrize("row_stamped_at", ["report", "start"])
def test_a_slow_first_poke_does_not_shift_the_reschedule_schedule(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, row_stamped_at: str
) -> None:
    """Every reschedule date is ``first reschedule date + offset(k)``, whichever time Airflow stamps on the
    first TaskReschedule row (3.x: when the reschedule is reported; 2.11: the run's start)."""
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    run_start = {"at": START}
    monkeypatch.setattr(
        compat.rescheduling,
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
        monkeypatch.setattr(
            compat.rescheduling, "sensor_reschedule_state", lambda context, c=count, f=first: (c, f)
        )
        with pytest.raises(compat.locations.AirflowRescheduleException) as err:
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
    first = datetime.datetime.fromtimestamp(START, tz=datetime.timezone.utc)
    # 2nd execution, but the scheduler ran it 1000 s late: the next check is the first one still ahead.
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (1, first))
    clock.now = START + 1000
    with pytest.raises(compat.locations.AirflowRescheduleException) as err:
        sensor.execute(make_context())
    # jitter none: checks at 0, 10, 30, 70, 150 s, then every 100 s (the default cap, 10 x poke_interval)
    offsets = [sensor.backoff_policy.offset("any", k) for k in range(20)]
    assert offsets[:6] == [0, 10, 30, 70, 150, 250]
    assert err.value.reschedule_date.timestamp() - START == min(o for o in offsets if o >= 1000)


def test_reschedule_mode_times_out_at_the_deadline_measured_from_the_first_reschedule(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = ScriptedSensor(task_id="task", clock=clock, poke_interval=10, mode="reschedule", timeout=200)
    dates: list[datetime.datetime] = []
    with pytest.raises(compat.locations.AirflowSensorTimeout):
        run_reschedule_mode(sensor, clock, monkeypatch, 50, dates)
    assert dates[-1].timestamp() == START + 200  # the final check is scheduled exactly at the deadline
    assert sensor.poke_times[-1] == START + 200 and len(sensor.poke_times) == len(dates) + 1


@pytest.mark.parametrize("soft_fail", [False, True])
def test_reschedule_mode_ends_at_the_execution_deadline_with_a_task_timeout(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, soft_fail: bool
) -> None:
    # Poke mode is one process that Airflow stops at execution_timeout with a retryable AirflowTaskTimeout;
    # reschedule mode is one process per check, so it keeps that deadline itself, from the try's first start.
    # the gap Airflow 3 gets, pinned
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 3.0)
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
    with pytest.raises(compat.locations.AirflowTaskTimeout, match="execution_timeout of 8s"):
        run_reschedule_mode(sensor, clock, monkeypatch, 50, dates)
    # No check after the execution deadline, even when Airflow's minimum reschedule gap brings the task
    # back later than the last check the schedule placed there.
    assert dates and all(at <= START + 8 for at in sensor.poke_times)
    assert len(sensor.poke_times) >= 3


def test_first_reschedule_anchor_predicts_the_row_airflow_writes() -> None:
    ti = FakeTI()
    ti.start_date = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)  # type: ignore[attr-defined]
    anchor = compat.rescheduling.first_reschedule_anchor({"ti": ti}, START)
    # 3.x stamps the row when the reschedule is reported (now); 2.11 copies the TI's start_date.
    assert anchor == (START if compat.versions.AIRFLOW_V_3_0_PLUS else ti.start_date.timestamp())  # type: ignore[attr-defined]


def test_reschedule_state_from_airflow_3_context() -> None:
    if not compat.versions.AIRFLOW_V_3_0_PLUS:
        pytest.skip("3.x reads the runner's context; 2.11 reads TaskReschedule rows (integration tests)")
    first = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    class TI:
        def get_first_reschedule_date(self, context: Any) -> datetime.datetime:
            return first

    assert compat.rescheduling.sensor_reschedule_state({"ti": TI(), "task_reschedule_count": 0}) == (0, None)
    assert compat.rescheduling.sensor_reschedule_state({"ti": TI(), "task_reschedule_count": 4}) == (4, first)
