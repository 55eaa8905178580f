"""BackoffSensor's side of deferral (the check spec it ships): defer, resume, counts, the execution deadline."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import aligned_start, condition_seed
from airflow_smart_ext.conditions import outcome_from_exception, sharing_key
from airflow_smart_ext.conditions.outcomes import STATS_XCOM_KEY, error_class_path
from airflow_smart_ext.sensors.base import BackoffSensor
from airflow_smart_ext.wait_model.timeline import DEFERRAL_GRACE_SECONDS
from tests.unit.clock import START, FakeClock
from tests.unit.sensors.helpers import (
    Deferred,
    FakeTI,
    PathSensor,
    ScriptedSensor,
    capture_defer,
    make_context,
)


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
    # The schedule belongs to the condition: its seed, anchored on the poke_interval grid (START is on it).
    assert trigger_kwargs["seed"] == condition_seed(sharing_key(check))
    assert trigger_kwargs["started_at"] == START
    assert trigger_kwargs["deadline"] == START + 600
    assert trigger_kwargs["after"] == 0
    assert check["type"] == "sensor"
    assert check["classpath"] == "tests.unit.sensors.helpers.PathSensor"
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
    clock.now = START + 1
    a = deferred_trigger_kwargs(first, make_context(FakeTI(task_id="a")))
    clock.now = START + 8
    b = deferred_trigger_kwargs(second, make_context(FakeTI(dag_id="other_dag", task_id="b")))
    c = deferred_trigger_kwargs(other, make_context(FakeTI(task_id="c")))
    assert a["seed"] == b["seed"] != c["seed"]
    assert a["started_at"] == b["started_at"] == aligned_start(START + 8, 10) == START
    assert (a["deadline"], b["deadline"]) == (START + 601, START + 608)  # deadlines stay the tasks' own
    policy = first.backoff_policy
    assert policy.next_check(a["seed"], a["started_at"], START + 8, None) == policy.next_check(
        b["seed"], b["started_at"], START + 8, None
    )


def test_aligned_slots_passed_before_deferring_are_not_counted_as_checks(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = PathSensor(
        task_id="task", path="/p", deferrable=True, poke_interval=10, jitter="none", splay=0, timeout=600
    )
    capture_defer(sensor, monkeypatch)
    clock.now = START + 9.5  # aligned slots: START + 0, 10, 30, 70, ...; #0 at START passed before the start
    kwargs = deferred_trigger_kwargs(sensor, make_context())
    assert (kwargs["started_at"], kwargs["after"]) == (START, 0)  # next: #1 at START + 10
    clock.now = START + 12
    sensor2 = PathSensor(
        task_id="task", path="/p", deferrable=True, poke_interval=10, jitter="none", splay=0, timeout=600
    )
    capture_defer(sensor2, monkeypatch)
    kwargs = deferred_trigger_kwargs(sensor2, make_context())
    assert (kwargs["started_at"], kwargs["after"]) == (START + 10, 0)
    # Resuming: the worker's check plus the triggerer's checks #after+1..#index, nothing else.
    context = make_context()
    clock.now = START + 80
    sensor2.execute_complete(
        context,
        make_event("success", check_index=4, checks=2),
        started_at=START + 12,
        after=2,
        worker_pokes=1,
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
    clock.now = START + 250
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
            make_context(), event, started_at=START, deadline=START + 600, seed=seed, worker_pokes=1, after=0
        )
    _, trigger_kwargs = err.value.kwargs["trigger"].serialize()
    # Same anchor and deadline; checks #4.. whose times passed while the task resumed are skipped.
    following = sensor.backoff_policy.next_check(seed, START, START + 250, START + 600, after=3)
    assert following is not None and following.index > 4
    assert (trigger_kwargs["started_at"], trigger_kwargs["deadline"], trigger_kwargs["after"]) == (
        START,
        START + 600,
        following.index - 1,
    )
    assert err.value.kwargs["timeout"] == datetime.timedelta(seconds=350 + DEFERRAL_GRACE_SECONDS)
    # A wait that joined an older wait's schedule reports the group's check number: its own schedule still
    # goes on from now to its own deadline (not ended as if that number were its own).
    with pytest.raises(Deferred) as joined:
        sensor.execute_complete(
            make_context(),
            {**event, "check_index": 57},
            started_at=START,
            deadline=START + 600,
            seed=seed,
            worker_pokes=1,
            after=0,
        )
    assert joined.value.kwargs["trigger"].serialize()[1]["after"] == following.index - 1


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
    clock.now = START + 12
    assert sensor.execute_complete(context, make_event("success", xcom_value=[1, 2]), started_at=START) == [
        1,
        2,
    ]
    assert context["ti"].xcoms[STATS_XCOM_KEY] == {"pokes": 5, "waited_seconds": 12.0, "mode": "deferrable"}


@pytest.mark.parametrize(
    ("status", "sensor_kwargs", "expected"),
    [
        ("timeout", {}, compat.locations.AirflowSensorTimeout),
        ("timeout", {"soft_fail": True}, compat.locations.AirflowSkipException),
        ("failure", {}, compat.locations.AirflowFailException),
        ("failure", {"soft_fail": True}, compat.locations.AirflowSkipException),
        ("failure", {"never_fail": True}, compat.locations.AirflowSkipException),
        ("failure", {"silent_fail": True}, compat.locations.AirflowFailException),
        ("error", {}, compat.locations.AirflowException),
        ("error", {"never_fail": True}, compat.locations.AirflowSkipException),
        ("skip", {}, compat.locations.AirflowSkipException),
        ("bogus", {}, compat.locations.AirflowException),
    ],
)
def test_execute_complete_maps_outcomes_like_poke_mode(
    clock: FakeClock, status: str, sensor_kwargs: dict, expected: type
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, **sensor_kwargs)
    with pytest.raises(expected) as err:
        sensor.execute_complete(make_context(), make_event(status), started_at=START, deadline=START + 100)
    if expected is compat.locations.AirflowException:
        assert not isinstance(
            err.value, (compat.locations.AirflowFailException, compat.locations.AirflowSensorTimeout)
        )


class VendorError(Exception):
    """A library's error a poke may raise (the worker has its module imported, as the DAG's sensor does)."""


class NeedsTwoArguments(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")


@pytest.mark.parametrize(
    ("raised", "expected_class", "expected_text"),
    [
        (VendorError("disk gone"), VendorError, "disk gone"),  # the check's own class, as poke mode raises it
        (NeedsTwoArguments(503, "busy"), compat.locations.AirflowException, "NeedsTwoArguments: 503 busy"),
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
        sensor.execute_complete(make_context(), event, started_at=START, deadline=START + 100)
    assert type(err.value) is expected_class and expected_text in str(err.value)


@pytest.mark.parametrize(
    "class_path", [None, "no_such_module_imported:Error", "builtins:print", "builtins:SystemExit", "x"]
)
def test_an_error_class_not_safely_rebuildable_falls_back_to_airflow_exception(
    clock: FakeClock, class_path: Any
) -> None:
    event = make_event("error", message="Boom: text", error_class=class_path)
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    with pytest.raises(compat.locations.AirflowException, match="Check failed in the triggerer: Boom: text"):
        sensor.execute_complete(make_context(), event, started_at=START, deadline=START + 100)


@pytest.mark.parametrize(
    ("status", "sensor_kwargs", "expected"),
    [
        # poke mode fails (and retries) a raising poke even with soft_fail; Airflow's deferred-sensor
        # wrapper would skip it -- resume_execution must keep poke mode's mapping.
        ("error", {"soft_fail": True}, compat.locations.AirflowException),
        ("timeout", {"soft_fail": True}, compat.locations.AirflowSkipException),
        ("failure", {}, compat.locations.AirflowFailException),
    ],
)
def test_resume_execution_maps_outcomes_like_poke_mode(
    clock: FakeClock, status: str, sensor_kwargs: dict, expected: type
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, **sensor_kwargs)
    next_kwargs = {"event": make_event(status), "started_at": START, "deadline": START + 100}
    with pytest.raises(expected) as err:
        sensor.resume_execution("execute_complete", next_kwargs, make_context())
    if expected is compat.locations.AirflowException:
        assert not isinstance(err.value, compat.locations.AirflowSkipException)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({}, compat.locations.AirflowSensorTimeout),
        ({"soft_fail": True}, compat.locations.AirflowSkipException),
        # as Airflow's base: 3.1+'s sensor wrapper skips a resumed timeout with never_fail, 2.11's and 3.0's not
        (
            {"never_fail": True},
            compat.locations.AirflowSkipException
            if compat.versions.AIRFLOW_V_3_1_PLUS
            else compat.locations.AirflowSensorTimeout,
        ),
    ],
    ids=["plain", "soft_fail", "never_fail"],
)
def test_airflows_trigger_timeout_ends_as_a_sensor_timeout(flags: dict, expected: type) -> None:
    """Airflow's backstop (its trigger timeout; on this version's own ``__fail__`` signal) ends the wait as a
    sensor timeout: never a retryable error, skipped as Airflow's base skips a resumed deferral's timeout."""
    error = "Trigger timeout" if compat.versions.AIRFLOW_V_3_0_PLUS else "Trigger/execution timeout"
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, **flags)
    with pytest.raises(compat.locations.AirflowException) as raised:
        sensor.resume_execution("__fail__", {"error": error}, make_context())
    assert type(raised.value) is expected


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
    clock.now = START + 12
    event = make_event("success", check_index=check_index, checks=checks)
    sensor.execute_complete(context, event, started_at=START, after=after, worker_pokes=worker_pokes)
    assert context["ti"].xcoms[STATS_XCOM_KEY]["pokes"] == expected


def test_timeout_message_counts_checks_made(clock: FakeClock) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True)
    clock.now = START + 12
    with pytest.raises(compat.locations.AirflowSensorTimeout, match=r"after 12 poke\(s\)"):
        sensor.execute_complete(
            make_context(),
            make_event("timeout", check_index=31, checks=11),
            started_at=START,
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
    sensor.execute_complete(make_context(), event, started_at=START, after=0, worker_pokes=1)
    assert any("3 poke(s) is a lower bound" in line for line in lines)


def test_reschedule_mode_pokes_count_runs_that_poked(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow's reschedule count is the number of earlier runs of the try, each one poke (no splay wait)."""
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    sensor = ScriptedSensor(task_id="task", results=[True], clock=clock, mode="reschedule", splay=0)
    first = datetime.datetime.fromtimestamp(START, tz=datetime.timezone.utc)
    monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda context: (6, first))
    clock.now = START + 10_000  # late: many schedule slots passed, none of them a check
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
    assert trigger_kwargs["deadline"] == START + 8  # the execution deadline, not the timeout (START + 40)
    assert err.value.kwargs["kwargs"]["deadline"] == START + 40  # the sensor's own deadline is kept
    assert err.value.kwargs["timeout"] == datetime.timedelta(seconds=8 + DEFERRAL_GRACE_SECONDS)


@pytest.mark.parametrize("soft_fail", [False, True])
def test_a_timeout_at_the_execution_deadline_resumes_into_a_task_timeout(
    clock: FakeClock, soft_fail: bool
) -> None:
    sensor = _exec_sensor(soft_fail=soft_fail)
    clock.now = START + 8
    event = make_event("timeout", checks=3, deadline_reached=True)
    with pytest.raises(
        compat.locations.AirflowTaskTimeout, match="execution_timeout of 8s"
    ):  # retryable, as in poke mode
        sensor.execute_complete(
            make_context(), event, started_at=START, deadline=START + 40, worker_pokes=1, after=0
        )


def test_zero_worker_timeout_event_at_the_execution_deadline_is_a_task_timeout(clock: FakeClock) -> None:
    sensor = _exec_sensor(start_from_trigger=None)
    event = make_event(
        "timeout",
        checks=4,
        started_at=START,
        deadline=START + 40,
        execution_deadline=START + 8,
        deadline_reached=True,
    )
    with pytest.raises(compat.locations.AirflowTaskTimeout):
        sensor.execute_complete(make_context(), event, worker_pokes=0, after=-1)


def test_a_check_that_raised_a_sensor_timeout_stays_one_before_the_execution_deadline(
    clock: FakeClock,
) -> None:
    """A poke that raises AirflowSensorTimeout ends the wait as in poke mode (never retried), even with an
    execution_timeout shorter than the timeout: only the trigger's own deadline event is a task timeout."""
    sensor = _exec_sensor()
    clock.now = START + 3
    event = make_event("timeout", checks=2, message="AirflowSensorTimeout: the poke said so")
    with pytest.raises(compat.locations.AirflowSensorTimeout):
        sensor.execute_complete(
            make_context(), event, started_at=START, deadline=START + 40, worker_pokes=1, after=0
        )


def test_a_timeout_at_the_sensor_deadline_stays_a_sensor_timeout(clock: FakeClock) -> None:
    sensor = _exec_sensor(execution_timeout=datetime.timedelta(seconds=100))
    event = make_event("timeout", checks=3)
    with pytest.raises(compat.locations.AirflowSensorTimeout):
        sensor.execute_complete(
            make_context(), event, started_at=START, deadline=START + 40, worker_pokes=1, after=0
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
    error = "Trigger timeout" if compat.versions.AIRFLOW_V_3_0_PLUS else "Trigger/execution timeout"
    with pytest.raises(getattr(compat.locations, expected)):
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

    outcome = outcome_from_exception(compat.locations.AirflowSkipException("scripted skip"))
    assert (outcome.status, outcome.message) == ("skip", "scripted skip")
