"""A sensor with ``due=`` says once that its wait is late — the first check scheduled at or after the due time
that finds the condition not met — in poke and reschedule mode, and waits on; bad due-time arguments fail at
DAG parse (mapped tasks too), naming the parameter."""

from __future__ import annotations

import datetime
import json
import logging
import re
from typing import Any

import pytest

from airflow_smart_ext import compat, units
from airflow_smart_ext.timetables import DueTime
from tests.unit.clock import START, FakeClock
from tests.unit.sensors.helpers import (
    Deferred,
    FakeTI,
    PathSensor,
    ScriptedSensor,
    capture_defer,
    make_context,
)

REFERENCE = datetime.datetime.fromtimestamp(START, tz=datetime.timezone.utc)
LOGGER = logging.getLogger("test_sensor_late")


def late_context(ti: FakeTI | None = None) -> dict[str, Any]:
    return {**make_context(ti), "data_interval_end": REFERENCE}


class Alerts:
    """An on_late callback that keeps what it was told."""

    def __init__(self) -> None:
        self.told: list[dict[str, Any]] = []

    def __call__(self, context: Any) -> None:
        self.told.append(dict(context["late"]))


def run_rescheduled(sensor: ScriptedSensor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Reschedule mode as Airflow drives it: each run sees its try's reschedule count and first date."""
    started: list[float] = []
    for _ in range(50):
        first = datetime.datetime.fromtimestamp(started[0], tz=datetime.timezone.utc) if started else None
        count = len(started)
        monkeypatch.setattr(
            compat.rescheduling, "sensor_reschedule_state", lambda c, n=count, f=first: (n, f)
        )
        now = clock.now
        monkeypatch.setattr(compat.rescheduling, "first_reschedule_anchor", lambda c, _now, s=now: s)
        try:
            return sensor.execute(late_context())
        except compat.locations.AirflowRescheduleException as reschedule:
            started.append(now)
            clock.now = reschedule.reschedule_date.timestamp()
    raise AssertionError("the sensor never ended")


def sensor(clock: FakeClock, alerts: Alerts, due_seconds: float, results: list[Any], **kwargs: Any) -> Any:
    return ScriptedSensor(
        task_id="task",
        results=results,
        clock=clock,
        poke_interval=10,
        max_wait=80,
        jitter="none",
        splay=0,
        timeout=1000,
        due=DueTime(after=datetime.timedelta(seconds=due_seconds)),
        on_late=[alerts],
        **kwargs,
    )


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_a_late_wait_says_so_once_at_the_first_check_due_after_its_due_time_then_waits_on(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    alerts = Alerts()
    waiting = sensor(clock, alerts, 45, [False] * 6 + [True], mode=mode)  # checks at 0 10 30 70 150 230 310
    monkeypatch.setattr(ScriptedSensor, "log", property(lambda _self: LOGGER))  # as caplog sees it
    with caplog.at_level(logging.WARNING):
        result = (
            waiting.execute(late_context())
            if mode == "poke"
            else run_rescheduled(waiting, clock, monkeypatch)
        )
    assert result is None  # it went on and succeeded at its 7th check
    assert [t - START for t in waiting.poke_times] == [0, 10, 30, 70, 150, 230, 310]
    (late,) = alerts.told
    assert late["check"] == 3 and late["late_by_seconds"] == 25.0 and late["late_by"] == "25s"
    assert late["wait"] == "dag.task" and late["last_outcome"] == "condition not met"
    assert late["due"] == units.iso(START + 45)
    # a poke or reschedule wait is not a Waits row: its link is the task instance's own page
    assert late["link"].endswith(compat.web_urls.task_page_url("", "dag", late["run_id"], "task", -1)), late
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("Late:")] == [
        f"Late: dag.task was due at {late['due']} (45s after data_interval_end) and is 25s late; check #3: "
        "condition not met. Waiting on to the timeout."
    ]


def test_a_wait_met_before_its_due_time_never_says_it_is_late(clock: FakeClock) -> None:
    alerts = Alerts()
    assert sensor(clock, alerts, 45, [False, False, True]).execute(late_context()) is None
    assert alerts.told == []


def test_a_late_wait_times_out_at_its_own_timeout(clock: FakeClock) -> None:
    alerts = Alerts()
    with pytest.raises(compat.locations.AirflowSensorTimeout):
        sensor(clock, alerts, 0, [False]).execute(late_context())
    assert [a["check"] for a in alerts.told] == [0]


def test_a_retry_that_starts_after_the_due_time_says_nothing_again(clock: FakeClock) -> None:
    alerts = Alerts()
    clock.now = START + 100
    sensor(clock, alerts, 45, [False, True]).execute(late_context(FakeTI(try_number=2)))
    assert alerts.told == []
    sensor(clock, alerts, 45, [False, True]).execute(late_context(FakeTI(try_number=1)))
    assert [a["check"] for a in alerts.told] == [0]


@pytest.mark.parametrize("seconds_after_the_end", [-1, 0, 1])
def test_an_at_due_time_is_the_first_at_at_or_after_the_runs_data_interval_end(
    clock: FakeClock, seconds_after_the_end: int
) -> None:
    # ``at`` is the time of day (UTC) the run's data interval ends: due then, when check #0 runs and tells. A
    # second later: due after check #0, and check #1 finds the condition met. A second earlier: that time has
    # passed on the interval's last day, so it is due the next day (the business calendars themselves:
    # tests/unit/timetables/test_due_time.py)
    alerts = Alerts()
    due_at = REFERENCE + datetime.timedelta(seconds=seconds_after_the_end)
    due = DueTime(due_at.time(), timezone="UTC")  # every day counts
    waiting = ScriptedSensor(
        task_id="task", results=[False, True], clock=clock, poke_interval=10, splay=0, due=due, on_late=alerts
    )
    waiting.execute(late_context())
    told = [REFERENCE.isoformat(timespec="milliseconds")] if seconds_after_the_end == 0 else []
    assert [a["due"].replace("Z", "+00:00") for a in alerts.told] == told, alerts.told


def test_a_failing_alert_does_not_fail_the_wait(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(context: Any) -> None:
        raise RuntimeError("slack is down")

    alerts = Alerts()
    waiting = sensor(clock, alerts, 0, [False, True])
    waiting.on_late = [broken, alerts]
    monkeypatch.setattr(ScriptedSensor, "log", property(lambda _self: LOGGER))
    with caplog.at_level(logging.ERROR):
        assert waiting.execute(late_context()) is None
    assert len(alerts.told) == 1 and "on_late callback" in caplog.text and "slack is down" in caplog.text


def test_an_airflow_notifier_is_an_on_late_callback(clock: FakeClock) -> None:
    try:
        from airflow.sdk import BaseNotifier as notifier_base
    except ImportError:  # 2.11
        from airflow.notifications.basenotifier import BaseNotifier as notifier_base
    sent: list[str] = []

    class Notifier(notifier_base):  # type: ignore[misc,valid-type]
        template_fields = ("text",)

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

        def notify(self, context: Any) -> None:
            sent.append(self.text)

    waiting = ScriptedSensor(
        task_id="task",
        results=[False, True],
        clock=clock,
        poke_interval=10,
        splay=0,
        due=DueTime(after=0),
        on_late=Notifier("{{ late.wait }} is {{ late.late_by }} late"),
    )
    from airflow import DAG

    waiting.execute({**late_context(), "dag": DAG("late_notifier", schedule=None)})  # as Airflow's context
    assert sent == ["dag.task is 0s late"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"due": "09:30"}, "due must be an airflow_smart_ext.timetables.DueTime, its dict form"),
        ({"due": {"at": "9:30"}}, "due.at: expected a time of day"),
        (
            {"due": {"at": "09:30", "calendar": {"type": "business", "market": "NOPE"}}},
            "due.market: unknown financial market 'NOPE'",
        ),
        ({"on_late": "slack"}, "on_late must be a callable taking the task's context"),
        ({"on_late": [print, 3]}, "on_late must be a callable"),
    ],
)
def test_bad_due_time_arguments_fail_at_parse_naming_the_parameter_mapped_too(
    kwargs: dict, message: str
) -> None:
    from airflow import DAG

    with pytest.raises(ValueError, match=None) as unmapped:
        PathSensor(task_id="s", path="/p", **kwargs)
    assert message in str(unmapped.value)
    with DAG("late_mapped", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        with pytest.raises(ValueError) as partial:
            PathSensor.partial(task_id="s", **kwargs)
        assert message in str(partial.value)
        name, value = next(iter(kwargs.items()))
        if name == "due":
            with pytest.raises(ValueError) as mapped:
                PathSensor.partial(task_id="m").expand(path=["/a"], due=[None, value])
            assert message in str(mapped.value) and "item 1" in str(mapped.value)


def test_on_late_without_a_due_time_fails_at_parse_mapped_too() -> None:
    from airflow import DAG

    never = "on_late needs due= (when the data is due"
    with pytest.raises(ValueError, match=re.escape(never)):
        PathSensor(task_id="s", path="/p", due=None, on_late=[print])
    PathSensor(task_id="s", path="/p", on_late=[])  # no callback: nothing to call
    due = DueTime("09:30", market="NYSE", timezone="America/New_York").to_dict()
    with DAG("late_mapped_rule", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        partial = PathSensor.partial(task_id="m", on_late=print)  # due= may still come from .expand()
        with pytest.raises(ValueError) as mapped:
            partial.expand(path=["/a", "/b"], due=[due, None])
        assert never in str(mapped.value) and "item 1" in str(mapped.value)
        PathSensor.partial(task_id="ok", on_late=print).expand(path=["/a"], due=[due])


def test_a_dags_on_late_in_default_args_serves_its_sensors_with_a_due_time_and_burdens_no_other() -> None:
    from airflow import DAG

    due = DueTime("09:30", market="NYSE", timezone="America/New_York")
    start = datetime.datetime(2026, 1, 1)
    with DAG("late_default_on_late", schedule=None, start_date=start, default_args={"on_late": [print]}):
        with_due = PathSensor(task_id="with_due", path="/p", due=due)
        without = PathSensor(task_id="without", path="/p")  # the DAG's callback: no due time, nothing to call
        PathSensor.partial(task_id="mapped").expand(path=["/a"], due=[due.to_dict(), None])
    assert with_due.on_late == [print] and without.due is None
    bad = DAG("late_default_bad", schedule=None, start_date=start, default_args={"on_late": "slack"})
    with bad, pytest.raises(ValueError, match="on_late must be a callable"):  # still checked
        PathSensor(task_id="s", path="/p")
    # the DAG's due time reaches a mapped task when Airflow unmaps it: its own on_late needs nothing more
    with DAG("late_default_due", schedule=None, start_date=start, default_args={"due": due.to_dict()}):
        PathSensor.partial(task_id="m", on_late=print).expand(path=["/a", "/b"])


def test_a_due_time_from_an_upstream_task_is_left_to_run_time() -> None:
    from airflow import DAG
    from airflow.models.xcom_arg import XComArg

    with DAG("late_xcom_due", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        upstream = PathSensor(task_id="upstream", path="/p")
        mapped = PathSensor.partial(task_id="m", due=XComArg(upstream)).expand(path=["/a"])
    assert isinstance(mapped.partial_kwargs["due"], XComArg)


def test_a_mapped_sensor_takes_due_times_in_their_dict_form() -> None:
    from airflow import DAG

    due = DueTime("09:30", market="NYSE", timezone="America/New_York")
    with DAG("late_mapped_ok", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        PathSensor.partial(task_id="m", mode="reschedule").expand(
            path=["/a", "/b"], due=[due.to_dict(), None]
        )
    assert PathSensor(task_id="s", path="/p", due=due.to_dict()).due == due


# ------------------------------------------------------------------ deferrable: the trigger finds it, a worker says it
def deferred_wait(alerts: Alerts, due_seconds: float, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Any:
    waiting = PathSensor(
        task_id="task",
        path="/p",
        deferrable=True,
        start_from_trigger=False,
        poke_interval=10,
        max_wait=80,
        jitter="none",
        splay=0,
        due=DueTime(after=datetime.timedelta(seconds=due_seconds)),
        on_late=alerts,
        **{"timeout": 1000, **kwargs},
    )
    capture_defer(waiting, monkeypatch)
    return waiting


def deferral_of(call: Any) -> dict[str, Any]:
    """What a call deferred with: the trigger's kwargs and the resume kwargs."""
    with pytest.raises(Deferred) as err:
        call()
    trigger_kwargs = dict(err.value.kwargs["trigger"].serialize()[1])
    return {"trigger": trigger_kwargs, "resume": dict(err.value.kwargs["kwargs"])}


def late_event(index: int, checked_at: float, due_at: float, checks: int) -> dict[str, Any]:
    """A ``late`` event as ``BackoffTrigger`` yields it (tests/unit/triggers/test_trigger_late.py)."""
    return {
        "status": "late",
        "checks": checks,
        "checks_complete": True,
        "waited_seconds": checked_at - START,
        "xcom_value": None,
        "message": "condition not met",
        "check_index": index,
        "error_class": None,
        "due_at": due_at,
        "checked_at": checked_at,
    }


def test_a_deferred_wait_is_told_late_once_by_its_triggers_late_event_then_defers_on(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    alerts = Alerts()
    waiting = deferred_wait(alerts, 45, monkeypatch)
    context = late_context()
    first = deferral_of(lambda: waiting.execute(context))  # check #0 on the worker, at START: not late
    assert first["trigger"]["due_at"] == START + 45 and first["trigger"]["late_told"] is False
    assert first["resume"]["late_told"] is False and alerts.told == []
    # The trigger's check #3 (+70 s) is the first at or after the due time: its late event resumes the task.
    clock.now = START + 76
    again = deferral_of(
        lambda: waiting.execute_complete(context, late_event(3, START + 70, START + 45, 3), **first["resume"])
    )
    (late,) = alerts.told
    assert late["check"] == 3 and late["late_by"] == "25s" and late["due"] == units.iso(START + 45)
    assert late["wait"] == "dag.task" and late["last_outcome"] == "condition not met"
    assert late["link"].endswith("/smart-ext/waits?dag_id=dag&late=true"), late  # its DAG's late Waits rows
    assert again["trigger"]["late_told"] is True and again["resume"]["late_told"] is True
    # Same schedule, same deadline: the trigger continues after check #3.
    assert again["trigger"]["after"] == 3 and again["trigger"]["deadline"] == first["trigger"]["deadline"]
    assert again["trigger"]["started_at"] == first["trigger"]["started_at"]
    assert again["resume"]["worker_pokes"] == 4
    clock.now = START + 160
    success = {**late_event(5, START + 150, START + 45, 2), "status": "success", "message": "condition met"}
    assert waiting.execute_complete(context, success, **again["resume"]) is None
    assert len(alerts.told) == 1


def test_a_deferred_wait_late_at_check_zero_is_told_on_the_worker_and_its_trigger_says_nothing(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    alerts = Alerts()
    waiting = deferred_wait(alerts, 0, monkeypatch)
    deferral = deferral_of(lambda: waiting.execute(late_context()))
    assert [a["check"] for a in alerts.told] == [0]
    assert deferral["trigger"]["late_told"] is True and deferral["resume"]["late_told"] is True


def test_a_deferred_retry_that_starts_after_the_due_time_says_nothing_again(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    alerts = Alerts()
    clock.now = START + 100
    retry = deferral_of(
        lambda: deferred_wait(alerts, 45, monkeypatch).execute(late_context(FakeTI(try_number=2)))
    )
    assert alerts.told == [] and retry["trigger"]["late_told"] is True
    first = deferral_of(
        lambda: deferred_wait(alerts, 45, monkeypatch).execute(late_context(FakeTI(try_number=1)))
    )
    assert [a["check"] for a in alerts.told] == [0] and first["trigger"]["late_told"] is True
    # A retry that starts 1 s after the due time: its schedule's grid-aligned anchor (+40 s) is before it,
    # but the try itself started after it: nothing to say.
    clock.now = START + 46
    later = deferred_wait(alerts, 45, monkeypatch)
    retry = deferral_of(lambda: later.execute(late_context(FakeTI(try_number=2))))
    assert len(alerts.told) == 1 and retry["trigger"]["late_told"] is True
    assert retry["trigger"]["started_at"] == START + 40


# ---- Airflow 3.3's task state store: what a retry's earlier tries said --------------------------------------


class FakeTaskStateStore:
    """``context["task_state_store"]`` as Airflow 3.3 gives it: JSON values its retries share."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.values = dict(values or {})

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self.values[key] = json.loads(json.dumps(value))


@pytest.fixture
def state_store(monkeypatch: pytest.MonkeyPatch) -> FakeTaskStateStore:
    """3.3's store, on every Airflow this test runs on (the sensor reads it through ``compat.task_state``)."""
    monkeypatch.setattr(compat.task_state, "TASK_STATE_STORE_SUPPORTED", True)
    return FakeTaskStateStore()


def stored_context(store: FakeTaskStateStore, try_number: int) -> dict[str, Any]:
    return {**late_context(FakeTI(try_number=try_number)), "task_state_store": store}


def test_with_the_task_state_store_a_retry_after_an_early_first_try_says_it_once(
    clock: FakeClock, state_store: FakeTaskStateStore
) -> None:
    """Try 1 ended before the due time (no record): try 2, after it, says it at its first check; try 3 reads
    try 2's record and says nothing."""
    alerts = Alerts()
    clock.now = START + 100
    sensor(clock, alerts, 45, [False, True]).execute(stored_context(state_store, 2))
    assert [(a["check"], a["resent"]) for a in alerts.told] == [(0, False)]
    assert state_store.values == {
        "smart_ext_late": {"due": units.iso(START + 45), "telling": False, "try": 2}
    }
    clock.now = START + 200
    sensor(clock, alerts, 45, [False, True]).execute(stored_context(state_store, 3))
    assert len(alerts.told) == 1


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_an_alert_cut_short_is_said_again_at_the_next_check_past_due_marked_resent(
    clock: FakeClock, state_store: FakeTaskStateStore, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """An earlier try's record still "telling" (its worker died between the record and the alert): said again,
    once."""
    monkeypatch.setattr(compat.rescheduling, "RESCHEDULE_MIN_GAP_SECONDS", 0.0)
    state_store.values["smart_ext_late"] = {"due": units.iso(START + 45), "telling": True, "try": 1}
    alerts = Alerts()
    clock.now = START + 100
    waiting = sensor(clock, alerts, 45, [False, False, True], mode=mode)
    if mode == "poke":
        waiting.execute(stored_context(state_store, 2))
    else:
        monkeypatch.setattr(compat.rescheduling, "sensor_reschedule_state", lambda c: (0, None))
        with pytest.raises(compat.locations.AirflowRescheduleException):
            waiting.execute(stored_context(state_store, 2))
    assert [(a["check"], a["resent"]) for a in alerts.told] == [(0, True)]
    assert state_store.values["smart_ext_late"] == {"due": units.iso(START + 45), "telling": False, "try": 2}


def test_the_record_is_begun_before_the_alert_and_a_told_that_cannot_be_written_repeats_nothing(
    clock: FakeClock, state_store: FakeTaskStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The callback sees the record "telling" (written first); when "told" cannot be written, this try's own
    "telling" record is said: its later checks say nothing again (only an earlier try's was cut short)."""
    seen: list[Any] = []
    alerts = Alerts()
    writes = state_store.set

    def refuse_told(key: str, value: Any, *, retention: Any = None) -> None:
        if not value["telling"]:
            raise RuntimeError("the API server is away")
        writes(key, value, retention=retention)

    state_store.set = refuse_told  # type: ignore[method-assign]
    waiting = sensor(clock, alerts, 45, [False] * 5 + [True])
    waiting.on_late = [lambda context: seen.append(dict(state_store.values["smart_ext_late"])), alerts]
    with caplog.at_level(logging.WARNING):
        waiting.execute(stored_context(state_store, 1))
    assert seen == [{"due": units.iso(START + 45), "telling": True, "try": 1}]
    assert [a["check"] for a in alerts.told] == [3]  # once, though later checks read "telling"
    assert "Could not write the late-alert record" in caplog.text


def test_a_record_of_another_due_time_is_not_this_ones(
    clock: FakeClock, state_store: FakeTaskStateStore
) -> None:
    state_store.values["smart_ext_late"] = {"due": units.iso(START - 86400), "telling": False, "try": 1}
    alerts = Alerts()
    clock.now = START + 100
    sensor(clock, alerts, 45, [False, True]).execute(stored_context(state_store, 2))
    assert [a["check"] for a in alerts.told] == [0]


def test_a_store_that_cannot_be_read_leaves_the_rule_without_one(
    clock: FakeClock, state_store: FakeTaskStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(key: str, default: Any = None) -> Any:
        raise RuntimeError("the API server is away")

    state_store.get = refuse  # type: ignore[method-assign]
    alerts = Alerts()
    clock.now = START + 100
    with caplog.at_level(logging.WARNING):
        sensor(clock, alerts, 45, [False, True]).execute(stored_context(state_store, 2))
    assert alerts.told == []  # a retry after the due time: taken as said, as before 3.3
    assert "Could not read the late-alert record" in caplog.text


def test_a_deferred_retry_reads_its_earlier_tries_record(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, state_store: FakeTaskStateStore
) -> None:
    """Worker-first: a retry after the due time with no record says it at its check #0 on the worker; one with
    a record defers with ``late_told``; a late event for a due time already told says nothing again."""
    alerts = Alerts()
    clock.now = START + 100
    retry = deferral_of(
        lambda: deferred_wait(alerts, 45, monkeypatch).execute(stored_context(state_store, 2))
    )
    assert [a["check"] for a in alerts.told] == [0] and retry["trigger"]["late_told"] is True
    third = deferred_wait(alerts, 45, monkeypatch)
    context = stored_context(state_store, 3)
    again = deferral_of(lambda: third.execute(context))
    assert len(alerts.told) == 1 and again["trigger"]["late_told"] is True
    clock.now = START + 176
    event = late_event(3, START + 170, START + 45, 3)
    deferral_of(lambda: third.execute_complete(context, event, **again["resume"]))
    assert len(alerts.told) == 1
    # A late event after an earlier try's alert was cut short: said, marked resent.
    state_store.values["smart_ext_late"] = {"due": units.iso(START + 45), "telling": True, "try": 2}
    deferral_of(lambda: third.execute_complete(context, event, **again["resume"]))
    assert [a["resent"] for a in alerts.told] == [False, True]


def test_a_late_event_of_a_retry_whose_store_cannot_be_read_says_it_as_the_rule_without_one(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, state_store: FakeTaskStateStore
) -> None:
    """A zero-worker retry's late event (its trigger takes nothing as said on 3.3; it carries the try's start)
    resumed while the store cannot be read: the rule without a store decides, as at a deferral: a retry that
    started after the due time says nothing. A worker-first trigger's late event (no ``started_at``: one its
    deferral found owed) is said."""

    def refuse(key: str, default: Any = None) -> Any:
        raise RuntimeError("the API server is away")

    state_store.get = refuse  # type: ignore[method-assign]
    alerts = Alerts()
    waiting = deferred_wait(alerts, 45, monkeypatch)
    context = stored_context(state_store, 2)
    first = deferral_of(lambda: waiting.execute(context))  # try 2 started at START, before the due time
    clock.now = START + 76
    event = late_event(3, START + 72, START + 45, 3)
    deferral_of(lambda: waiting.execute_complete(context, event, **first["resume"]))
    assert len(alerts.told) == 1  # started before the due time: nothing says an earlier try told
    after_due = {**event, "started_at": START + 50}  # a zero-worker retry's event carries its try's start
    deferral_of(lambda: waiting.execute_complete(context, after_due, **first["resume"]))
    assert len(alerts.told) == 1  # started after it: taken as said, as before 3.3


@pytest.mark.parametrize("never_fail", [False, True])
def test_a_timeout_after_a_last_check_that_was_late_says_late_then_times_out_as_a_resumed_timeout(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, never_fail: bool
) -> None:
    alerts = Alerts()
    waiting = deferred_wait(alerts, 45, monkeypatch, timeout=60, never_fail=never_fail)
    first = deferral_of(lambda: waiting.execute(late_context()))
    clock.now = START + 61
    timeout = {**late_event(3, START + 60, START + 45, 3), "status": "timeout", "deadline_reached": True}
    expected = (
        compat.locations.AirflowSkipException
        if never_fail and compat.sensor_timeouts.NEVER_FAIL_SKIPS_A_RESUMED_TIMEOUT
        else compat.locations.AirflowSensorTimeout
    )
    with pytest.raises(expected):
        waiting.execute_complete(late_context(), timeout, **first["resume"])
    assert [(a["check"], a["last_outcome"]) for a in alerts.told] == [(3, "condition not met")]


def test_after_a_late_event_the_wait_goes_on_on_its_own_schedule_whatever_its_groups_numbering(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wait that joined an older wait's schedule reports the group's check numbers (here #57): its own
    # schedule (checks at +0 +10 +30 +70 +150 ...) goes on from now, to its own deadline.
    alerts = Alerts()
    waiting = deferred_wait(alerts, 45, monkeypatch)
    first = deferral_of(lambda: waiting.execute(late_context()))
    clock.now = START + 76
    event = late_event(57, START + 72, START + 45, 3)
    again = deferral_of(lambda: waiting.execute_complete(late_context(), event, **first["resume"]))
    assert again["trigger"]["after"] == 3 and again["trigger"]["deadline"] == first["trigger"]["deadline"]
    assert len(alerts.told) == 1


def test_a_wait_without_a_due_time_defers_with_the_resume_kwargs_of_earlier_releases(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = PathSensor(task_id="task", path="/p", deferrable=True, start_from_trigger=False)
    capture_defer(waiting, monkeypatch)
    deferral = deferral_of(lambda: waiting.execute(late_context()))
    assert set(deferral["resume"]) == {"started_at", "deadline", "seed", "worker_pokes", "after"}
    assert "due_at" not in deferral["trigger"]


def test_a_zero_worker_late_event_resumes_says_late_and_defers_worker_first(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_smart_ext.triggers.zero_worker import RESUME_KWARGS

    alerts = Alerts()
    waiting = deferred_wait(alerts, 45, monkeypatch)
    clock.now = START + 76
    event = {
        **late_event(3, START + 70, START + 45, 4),
        "started_at": START,
        "deadline": START + 1000,
        "seed": "s",
    }
    again = deferral_of(lambda: waiting.execute_complete(late_context(), event, **RESUME_KWARGS))
    assert [a["check"] for a in alerts.told] == [3]
    assert again["trigger"]["started_at"] == START and again["trigger"]["deadline"] == START + 1000
    assert again["trigger"]["seed"] == "s" and again["trigger"]["late_told"] is True
    assert again["resume"]["worker_pokes"] == 4 and again["resume"]["late_told"] is True


def test_a_zero_worker_wait_ships_its_due_time_in_the_start_plan() -> None:
    due = DueTime("09:30", market="NYSE", timezone="America/New_York")
    waiting = PathSensor(task_id="task", path="/p", deferrable=True, due=due)
    if not waiting.start_from_trigger:
        pytest.skip("this Airflow starts every task on a worker")
    assert waiting.start_trigger_args.trigger_kwargs["start"]["due"] == due.to_dict()
    assert (
        "due"
        not in PathSensor(task_id="t2", path="/p", deferrable=True).start_trigger_args.trigger_kwargs["start"]
    )


def test_a_sensor_that_defers_on_its_own_cannot_have_a_due_time_at_parse() -> None:
    from airflow import DAG

    from airflow_smart_ext.sensors.base import BackoffSensor

    class OwnDeferralSensor(BackoffSensor):  # the TimeSensor pattern: its own trigger, its own deferrable
        def __init__(self, *, target_time: datetime.time, deferrable: bool = False, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.target_time = target_time
            self.deferrable = deferrable

        def execute(self, context: Any) -> Any:
            if self.deferrable:
                self.defer(trigger=None, method_name="execute_complete")
            return super().execute(context)

    own = OwnDeferralSensor
    message = "due= needs BackoffSensor's own deferral, and this sensor defers on its own"
    with pytest.raises(ValueError, match=message):
        own(task_id="t", target_time=datetime.time(10), deferrable=True, due=DueTime(after=60))
    with DAG("late_own_deferral", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        with pytest.raises(ValueError, match=message):
            own.partial(task_id="m", deferrable=True, due=DueTime(after=60))
        own(task_id="ok", target_time=datetime.time(10), due=DueTime(after=60))  # poke mode: fine


def test_the_due_time_travels_in_the_serialized_dag_and_airflow_reads_it_back() -> None:
    """The Calendars view reads a sensor's due time from its serialized DAG: the field Airflow keeps
    (``get_serialized_fields``), which its own deserialization (scheduler, API server) still reads."""
    from airflow import DAG

    try:
        from airflow.serialization.serialized_objects import DagSerialization as Serialization
    except ImportError:  # Airflow < 3.2
        from airflow.serialization.serialized_objects import SerializedDAG as Serialization

    from airflow_smart_ext.timetables.due import SERIALIZED_KEY

    due = DueTime("09:30", market="NYSE", timezone="America/New_York")
    with DAG("late_serialized", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
        PathSensor(task_id="plain", path="/p", due=due)
        PathSensor(task_id="none", path="/p")
        PathSensor.partial(task_id="mapped", due=due).expand(path=["/a"])
    stored = json.loads(json.dumps(Serialization.to_dict(dag)))  # as the metadata DB keeps it
    tasks = {task.get("__var", task)["task_id"]: task.get("__var", task) for task in stored["dag"]["tasks"]}
    assert DueTime.from_dict(json.loads(tasks["plain"][SERIALIZED_KEY])) == due
    assert SERIALIZED_KEY not in tasks["none"]
    read = Serialization.from_dict(stored)  # Airflow's own reading of it
    assert json.loads(getattr(read.get_task("plain"), SERIALIZED_KEY)) == due.to_dict()
    assert read.get_task("mapped").partial_kwargs["due"] == due.to_dict()  # .partial() keeps the dict form


def test_a_mapped_sensor_s_due_times_from_default_args_and_mapped_values_are_readable_where_stored() -> None:
    """Airflow keeps an unknown object in ``default_args`` or a mapped value as its repr: the due times a
    mapped sensor takes from there are stored in their dict form (the constructor takes it alike), so the
    Calendars and Waits views read each from the serialized DAG, by the map index it is for."""
    from airflow import DAG

    try:
        from airflow.serialization.serialized_objects import DagSerialization as Serialization
    except ImportError:  # Airflow < 3.2
        from airflow.serialization.serialized_objects import SerializedDAG as Serialization

    from airflow_smart_ext.ui.calendar_due import due_rules

    inherited, one, two = DueTime(after=60), DueTime(after=1), DueTime("09:30", timezone="Europe/London")
    start = datetime.datetime(2026, 1, 1)
    with DAG("late_mapped", schedule=None, start_date=start, default_args={"due": inherited}) as dag:
        PathSensor.partial(task_id="inherits").expand(path=["/a", "/b"])
        PathSensor.partial(task_id="own").expand(due=[one, two], path=["/a"])  # a product: item, not index
        PathSensor.partial(task_id="alone", path="/p").expand(due=[one, two])
        PathSensor.partial(task_id="kwargs").expand_kwargs([{"path": "/a", "due": two}, {"path": "/b"}])
        PathSensor.partial(task_id="given", due=two).expand(path=["/a"])
        upstream = PathSensor(task_id="up", path="/u")
        PathSensor.partial(task_id="later").expand(due=upstream.output)  # known when it runs
    stored = json.loads(json.dumps(Serialization.to_dict(dag)))  # as the metadata DB keeps it
    rules = {rule.label: rule for rule in due_rules(stored["dag"])}
    assert {label: rule.due for label, rule in rules.items()} == {
        "inherits": inherited,
        "own (.expand due item 0)": one,
        "own (.expand due item 1)": two,
        "alone[0]": one,
        "alone[1]": two,
        "kwargs[0]": two,
        "kwargs[1]": inherited,  # the default Airflow applies to the item that gives none
        "given": two,
        "up": inherited,
    }
    assert rules["alone[1]"].for_instance(1) and not rules["alone[1]"].for_instance(0)
    assert rules["inherits"].for_instance(5) and not rules["own (.expand due item 0)"].for_instance(0)
    read = Serialization.from_dict(stored)  # Airflow's own reading of it
    assert read.get_task("inherits").partial_kwargs["due"] == inherited.to_dict()
    assert "due" not in read.get_task("later").partial_kwargs  # the mapped output gives it
    try:
        from airflow.sdk import TaskGroup
    except ImportError:  # Airflow 2.11
        from airflow.utils.task_group import TaskGroup  # type: ignore[no-redef]
    with DAG("late_mapped_groups", schedule=None, start_date=start) as grouped:
        # a partial's own default_args: Airflow keeps only BaseOperator's arguments of them: refused at parse
        for own in ({"due": one}, {"on_late": print, "retries": 1}):
            with pytest.raises(
                ValueError, match=r"'own_defaults': .* in .partial\(default_args=...\) would be dro"
            ):
                PathSensor.partial(task_id="own_defaults", default_args=own)
        with TaskGroup("g", default_args={"due": two}):
            PathSensor.partial(task_id="in_group").expand(path=["/a"])
    stored = json.loads(json.dumps(Serialization.to_dict(grouped)))
    assert {rule.label: rule.due for rule in due_rules(stored["dag"])} == {"g.in_group": two}
