"""Drop-in: what Airflow's own ``BaseSensorOperator`` accepts and does, ``BackoffSensor`` accepts and does (issue 42).

Each behaviour is checked against Airflow's base itself where the two must agree: the same subclass body on
both bases, the same call, the same outcome.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_smart_ext import compat
from airflow_smart_ext.sensors import BackoffSensor
from airflow_smart_ext.sensors.own_deferral import own_deferral_reason
from tests.unit.clock import FakeClock
from tests.unit.sensors.helpers import FakeTI, PathSensor, ScriptedSensor, make_context


class OwnTrigger(BaseTrigger):
    """A subclass's own trigger (never run here: deferring raises TaskDeferred)."""

    def __init__(self, moment: str = "") -> None:
        super().__init__()
        self.moment = moment

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{__name__}.OwnTrigger", {"moment": self.moment}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        yield TriggerEvent({"status": "success"})


class RecordingLog:
    """Stands in for a sensor's ``log``: the lines it was asked to write."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _record(self, level: str, message: str, *args: Any, **_: Any) -> None:
        self.lines.append((level, message % args if args else message))

    def info(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._record("info", message, *args, **kwargs)

    def warning(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._record("warning", message, *args, **kwargs)

    def debug(self, message: str, *args: Any, **kwargs: Any) -> None:
        self._record("debug", message, *args, **kwargs)

    error = exception = warning


def time_sensor_style(base: type) -> type:
    """The ``TimeSensor`` pattern on ``base``: a non-JSON argument, its own ``deferrable``, its own defer()."""

    class TimeStyleSensor(base):  # type: ignore[misc, valid-type]
        def __init__(self, *, target_time: datetime.time, deferrable: bool = False, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.target_time = target_time
            self.deferrable = deferrable

        def execute(self, context: Any) -> Any:
            if self.deferrable:
                self.defer(trigger=OwnTrigger(str(self.target_time)), method_name="execute_complete")
            return super().execute(context)

        def execute_complete(self, context: Any, event: Any = None) -> None:
            return None

        def poke(self, context: Any) -> bool:
            return True

    return TimeStyleSensor


def async_sensor_style(base: type) -> type:
    """The ``DateTimeSensorAsync`` pattern: its own ``start_trigger_args`` and an execute that always defers."""

    class AsyncStyleSensor(base):  # type: ignore[misc, valid-type]
        start_trigger_args = compat.locations.StartTriggerArgs(
            trigger_cls=f"{__name__}.OwnTrigger",
            trigger_kwargs={"moment": ""},
            next_method="execute_complete",
            next_kwargs=None,
            timeout=None,
        )
        start_from_trigger = False

        def __init__(self, *, target: str, start_from_trigger: bool = False, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.target = target
            self.start_from_trigger = start_from_trigger

        def execute(self, context: Any) -> Any:
            self.defer(trigger=OwnTrigger(self.target), method_name="execute_complete")

        def execute_complete(self, context: Any, event: Any = None) -> None:
            raise compat.locations.AirflowException("the subclass's own resume failed")

        def poke(self, context: Any) -> bool:
            return False

    return AsyncStyleSensor


def _outcome(call: Any) -> str:
    try:
        result = call()
    except BaseException as err:  # TaskDeferred is a BaseException on Airflow 3
        return type(err).__name__
    return f"returned {result!r}"


# ------------------------------------------------------------------ (a) execute() without a task instance
@pytest.mark.parametrize("context", [{}, None], ids=["empty dict", "None"])
@pytest.mark.parametrize(
    ("results", "expected"), [([True], "returned None"), ([False], "AirflowSensorTimeout")]
)
def test_execute_takes_any_context_airflows_base_takes(context: Any, results: list, expected: str) -> None:
    def sensor_on(base: type) -> Any:
        class Scripted(base):  # type: ignore[misc, valid-type]
            def poke(self, context: Any) -> bool:
                return results[0]

        return Scripted(task_id="t", poke_interval=0, timeout=0)

    stock = _outcome(lambda: sensor_on(compat.locations.BaseSensorOperator).execute(context))
    ours = _outcome(lambda: sensor_on(BackoffSensor).execute(context))
    assert stock == ours == expected


def test_execute_without_a_task_instance_returns_the_xcom_value(clock: FakeClock) -> None:
    sensor = ScriptedSensor(task_id="t", results=[compat.locations.PokeReturnValue(True, "v")], clock=clock)
    assert sensor.execute({}) == "v"
    assert sensor.execute(None) == "v"


def test_a_deferrable_sensor_defers_without_a_task_instance(clock: FakeClock) -> None:
    sensor = PathSensor(task_id="t", path="/p", deferrable=True, start_from_trigger=False)
    assert _outcome(lambda: sensor.execute({})) == "TaskDeferred"


# ------------------------------------------------------------------ (b) a subclass that defers on its own
def test_time_sensor_style_keeps_its_own_deferral_with_a_non_json_argument() -> None:
    sensor_class = time_sensor_style(BackoffSensor)
    # A datetime.time cannot travel to the triggerer as JSON: no matter, the subclass ships its own trigger.
    sensor = sensor_class(task_id="t", target_time=datetime.time(10), deferrable=True)
    assert sensor.own_deferral_reason == "TimeStyleSensor.execute calls self.defer(...) with its own trigger"
    assert not sensor.start_from_trigger  # no zero-worker start of ours
    with pytest.raises(BaseException) as raised:
        sensor.execute({})
    assert type(raised.value).__name__ == "TaskDeferred"
    assert isinstance(raised.value.trigger, OwnTrigger)  # type: ignore[attr-defined]
    assert raised.value.method_name == "execute_complete"  # type: ignore[attr-defined]


def test_time_sensor_style_with_json_arguments_is_not_rerouted_to_our_start_trigger() -> None:
    class JsonTimeSensor(time_sensor_style(BackoffSensor)):  # type: ignore[misc]
        def __init__(self, *, at: str = "10:00", **kwargs: Any) -> None:
            super().__init__(target_time=datetime.time.fromisoformat(at), **kwargs)

    sensor = JsonTimeSensor(task_id="t", at="10:00", deferrable=True)
    assert sensor.start_from_trigger is False
    assert sensor.start_trigger_args is None or "BackoffStartTrigger" not in str(sensor.start_trigger_args)
    assert _outcome(lambda: sensor.execute({})) == "TaskDeferred"


def test_time_sensor_style_not_deferrable_pokes_on_our_schedule() -> None:
    sensor = time_sensor_style(BackoffSensor)(task_id="t", target_time=datetime.time(10), poke_interval=0)
    assert sensor.execute({}) is None


def test_async_style_keeps_its_own_start_trigger_args() -> None:
    sensor = async_sensor_style(BackoffSensor)(
        task_id="t", target="x", start_from_trigger=True, deferrable=True
    )
    assert sensor.own_deferral_reason == "AsyncStyleSensor declares its own start_trigger_args"
    assert sensor.start_from_trigger is True
    assert sensor.start_trigger_args.trigger_cls == f"{__name__}.OwnTrigger"
    with pytest.raises(BaseException) as raised:
        sensor.execute({})
    assert isinstance(raised.value.trigger, OwnTrigger)  # type: ignore[attr-defined]


def test_the_decision_is_logged_at_parse() -> None:
    class Logged(time_sensor_style(BackoffSensor)):  # type: ignore[misc]
        log = RecordingLog()  # type: ignore[assignment]

    Logged(task_id="t", target_time=datetime.time(10), deferrable=True)
    assert any(
        level == "info" and "defers on its own (TimeStyleSensor.execute calls self.defer" in line
        for level, line in Logged.log.lines
    ), Logged.log.lines


def test_a_mapped_own_deferral_sensor_passes_partial_and_expand() -> None:
    sensor_class = time_sensor_style(BackoffSensor)
    times = [datetime.time(1), datetime.time(2)]
    mapped = sensor_class.partial(task_id="m", deferrable=True).expand(target_time=times)
    # The parse kept the non-JSON times: the class defers on its own, so nothing of ours is shipped.
    assert own_deferral_reason(sensor_class, BackoffSensor) is not None
    assert mapped.partial_kwargs["deferrable"] is True
    assert mapped.expand_input.value == {"target_time": times}


def test_a_sensor_deferred_by_us_is_still_checked_for_shipping() -> None:
    class Unshippable(BackoffSensor):  # defined in a function: not importable in the triggerer
        def poke(self, context: Any) -> bool:
            return False

    with pytest.raises(ValueError, match="cannot be shipped to the triggerer"):
        Unshippable(task_id="t", deferrable=True)


# ------------------------------------------------------------------ (c) Airflow's wrapper around the subclass's resume
@pytest.mark.parametrize(
    "flags", [{}, {"soft_fail": True}, {"never_fail": True}], ids=["plain", "soft", "never"]
)
def test_a_subclass_resume_is_wrapped_as_on_airflows_base(flags: dict) -> None:
    def resumed(base: type) -> str:
        sensor = async_sensor_style(base)(task_id="t", target="x", **flags)
        return _outcome(lambda: sensor.resume_execution("execute_complete", None, {}))

    assert resumed(BackoffSensor) == resumed(compat.locations.BaseSensorOperator)
    if flags.get("soft_fail"):
        assert resumed(BackoffSensor) == "AirflowSkipException"


@pytest.mark.parametrize(
    "flags", [{}, {"soft_fail": True}, {"never_fail": True}], ids=["plain", "soft", "never"]
)
def test_an_overridden_execute_complete_is_wrapped_as_on_airflows_base(flags: dict) -> None:
    def resumed(base: type) -> str:
        class OwnResume(base):  # type: ignore[misc, valid-type]
            def execute_complete(self, context: Any, event: Any = None) -> None:
                raise compat.locations.AirflowException("Should be skipped")

        return _outcome(
            lambda: OwnResume(task_id="t", **flags).resume_execution("execute_complete", None, {})
        )

    assert resumed(BackoffSensor) == resumed(compat.locations.BaseSensorOperator)


# ------------------------------------------------------------------ (d) poke_interval=0
def test_poke_interval_zero_is_accepted_and_the_schedule_starts_at_one_second() -> None:
    sensor = ScriptedSensor(task_id="t", poke_interval=0)
    assert sensor.poke_interval == 0  # as given, as on Airflow's base
    policy = sensor.backoff_policy
    assert (policy.initial, policy.cap, policy.splay) == (1.0, 10.0, 0.0)
    fixed = ScriptedSensor(task_id="f", poke_interval=0, exponential_backoff=False).backoff_policy
    assert (fixed.initial, fixed.factor, fixed.jitter) == (1.0, 1.0, "none")


def test_poke_interval_zero_polls_bounded(clock: FakeClock) -> None:
    sensor = ScriptedSensor(
        task_id="t", poke_interval=0, timeout=5, exponential_backoff=False, results=[False], clock=clock
    )
    with pytest.raises(compat.locations.AirflowSensorTimeout):
        sensor.execute(make_context())
    offsets = [round(at - sensor.poke_times[0], 6) for at in sensor.poke_times]
    assert offsets == [0, 1, 2, 3, 4, 5]  # at once, then every second up to the deadline: no busy loop


# ------------------------------------------------------------------ (e) never_fail and a timeout
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({}, compat.locations.AirflowSensorTimeout),
        ({"soft_fail": True}, compat.locations.AirflowSkipException),
    ]
    + [
        (
            {"never_fail": True},
            compat.locations.AirflowSkipException
            if compat.versions.AIRFLOW_V_3_1_PLUS
            else compat.locations.AirflowSensorTimeout,
        )
    ],
    ids=["plain", "soft_fail", "never_fail"],
)
def test_a_timeout_event_after_resuming_ends_as_on_airflows_base(
    clock: FakeClock, flags: dict, expected: type
) -> None:
    """Our own deferral's timeout ends as a resumed deferral's timeout on Airflow's base: skipped with
    soft_fail, and with never_fail on 3.1+ (whose sensor wrapper skips it; 2.11's and 3.0's do not). Poke
    mode's timeout is not skipped by never_fail (the next test): the differential matrix's timeout_never_fail
    row allows that difference."""
    sensor = PathSensor(task_id="t", path="/p", deferrable=True, **flags)
    event = {
        "status": "timeout",
        "checks": 3,
        "checks_complete": True,
        "message": "deadline",
        "check_index": 3,
    }
    kwargs = {"event": event, "started_at": clock.time(), "deadline": clock.time() + 60, "worker_pokes": 1}
    with pytest.raises(compat.locations.AirflowException) as raised:
        sensor.resume_execution("execute_complete", kwargs, make_context())
    assert type(raised.value) is expected


def test_poke_mode_timeout_is_not_skipped_by_never_fail_as_on_airflows_base() -> None:
    def ended(base: type) -> str:
        class Never(base):  # type: ignore[misc, valid-type]
            def poke(self, context: Any) -> bool:
                return False

        return _outcome(lambda: Never(task_id="t", poke_interval=0, timeout=0, never_fail=True).execute({}))

    assert ended(BackoffSensor) == ended(compat.locations.BaseSensorOperator) == "AirflowSensorTimeout"


# ------------------------------------------------------------------ (f) Airflow's own backoff knobs
def test_exponential_backoff_reads_as_given() -> None:
    assert ScriptedSensor(task_id="a", exponential_backoff=True).exponential_backoff is True
    assert ScriptedSensor(task_id="b", exponential_backoff=False).exponential_backoff is False


def test_get_next_poke_interval_tells_the_schedules_base_interval() -> None:
    sensor = ScriptedSensor(task_id="t", poke_interval=10, backoff_factor=2, max_wait=60, timeout=1000)
    intervals = [sensor._get_next_poke_interval(0.0, lambda: 0.0, count) for count in range(1, 6)]
    assert intervals == [10, 20, 40, 60, 60]
    assert sensor._get_next_poke_interval(0.0, lambda: 995.0, 3) == 5  # never past the timeout


def test_overriding_get_next_poke_interval_is_named_at_parse() -> None:
    class Custom(BackoffSensor):
        log = RecordingLog()  # type: ignore[assignment]

        def _get_next_poke_interval(self, started_at: Any, run_duration: Any, poke_count: int) -> float:
            return 1.0

        def poke(self, context: Any) -> bool:
            return True

    Custom(task_id="t")
    warnings = [line for level, line in Custom.log.lines if level == "warning"]
    assert any(
        "overrides _get_next_poke_interval, which BackoffSensor never calls" in line for line in warnings
    )


def test_exponential_backoff_with_a_fixed_factor_is_named_at_parse() -> None:
    class Fixed(ScriptedSensor):
        log = RecordingLog()  # type: ignore[assignment]

    Fixed(task_id="t", exponential_backoff=True, backoff_factor=1)
    assert any("exponential_backoff=True with backoff_factor=1" in line for _, line in Fixed.log.lines)


# ------------------------------------------------------------------ reschedule count without a first reschedule
@pytest.mark.skipif(
    not compat.versions.AIRFLOW_V_3_0_PLUS,
    reason="2.11: its reschedule state comes from TaskReschedule rows (a metadata DB), not the context; "
    "the Airflow 3 branch is the one fixed",
)
def test_a_reschedule_count_without_a_first_reschedule_date_is_a_first_run(clock: FakeClock) -> None:
    """Airflow's base anchors reschedule mode on the first reschedule's date alone: none on record (cleared) is
    a fresh start, whatever ``task_reschedule_count`` says (Airflow's own test_reschedule_and_retry_timeout)."""

    class NoFirstReschedule(FakeTI):
        def get_first_reschedule_date(self, context: Any) -> None:
            return None

    sensor = ScriptedSensor(task_id="t", mode="reschedule", poke_interval=5, timeout=10, splay=0, clock=clock)
    context = {**make_context(NoFirstReschedule()), "task_reschedule_count": 2}
    with pytest.raises(compat.locations.AirflowRescheduleException):
        sensor.execute(context)
