"""The Waits view and the trigger agree on a wait's next check, checks made and deadline, to the millisecond.

Generated from a table: for each path (worker-first, zero-worker) x policy row (every jitter, splay, a fixed
interval) x moment (before check #0, after a few checks, near the deadline, past it) x execution_timeout
(unset, set and earlier than the timeout) x trigger start (at once, late within one interval, late beyond
it), the trigger is driven through its own ``_next`` (the method its ``run`` loop calls) on a virtual clock
from the moment it began to ``now`` — each check made at its time — and the view's report row for the same
trigger row at ``now`` must show the same next check, the same count and the same deadline.
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pendulum
import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy, condition_seed
from airflow_smart_ext.conditions import sharing_key
from airflow_smart_ext.conditions.sensor_poke import run_dates
from airflow_smart_ext.triggers.worker_first import CLASSPATH as WORKER_FIRST
from airflow_smart_ext.triggers.worker_first import BackoffTrigger
from airflow_smart_ext.triggers.zero_worker import CLASSPATH as ZERO_WORKER
from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger, _ScheduleFromStart
from airflow_smart_ext.ui.trigger_rows import Conditions, LiveWait
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from airflow_smart_ext.wait_model import timeline
from tests.unit.clock import FakeClock
from tests.unit.helpers import sql_check

TRY_START = 1_790_000_017.25  # off the grid: the anchor moves back onto it
LOGICAL = pendulum.datetime(2026, 9, 20, tz="UTC")
CHECK = sql_check()
POLICIES: dict[str, dict[str, Any]] = {
    "full": {"initial": 60.0, "factor": 2.0, "cap": 600.0, "jitter": "full", "splay": 0.0},
    "full+splay": {"initial": 60.0, "factor": 2.0, "cap": 600.0, "jitter": "full", "splay": 60.0},
    "equal+long splay": {"initial": 30.0, "factor": 3.0, "cap": 900.0, "jitter": "equal", "splay": 300.0},
    "none": {"initial": 45.0, "factor": 2.0, "cap": 360.0, "jitter": "none", "splay": 20.0},
    "fixed": {"initial": 60.0, "factor": 1.0, "cap": 60.0, "jitter": "none", "splay": 0.0},
    "decorrelated": {"initial": 20.0, "factor": 2.0, "cap": 400.0, "jitter": "decorrelated", "splay": 10.0},
}
#: seconds after the start of the try at which the view looks
MOMENTS = {"at the start": 0.5, "before check #0": 9.0, "after a few checks": 700.0, "near the end": 3550.0}
#: seconds after the start of the try at which the trigger began
TRIGGER_STARTS = {"at once": 0.2, "late within one interval": 8.0, "late": 95.0}
EXECUTION_TIMEOUTS = {"no execution_timeout": None, "execution_timeout first": 1800.0}
TIMEOUT = 3600.0


def _rendered_by_the_trigger(start: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The check a ``BackoffStartTrigger`` runs once Airflow rendered its fields (3.3+: the triggerer does)."""
    trigger = BackoffStartTrigger(start, **fields)
    trigger.template_fields = tuple(fields)
    trigger.render_template_fields(
        {"ds": LOGICAL.strftime("%Y-%m-%d"), "logical_date": LOGICAL, "run_id": "r"}
    )
    return trigger._check_spec({"dag_id": "d", "task_id": "t", "run_id": "r"})


def _zero_worker_trigger(
    policy: dict[str, Any], execution_timeout: float | None, check: dict[str, Any]
) -> BackoffTrigger:
    """What ``BackoffStartTrigger.run`` builds for this try (its anchor, deadline and seed)."""
    ends = timeline.deadlines(TRY_START, TIMEOUT, execution_timeout)
    trigger = _ScheduleFromStart(
        check=check,
        policy=policy,
        seed=condition_seed(sharing_key(check)),
        started_at=timeline.anchor(TRY_START, BackoffPolicy.from_dict(policy)),
        deadline=ends.schedule,
        after=-1,
    )
    trigger.try_started_at = TRY_START
    return trigger


def _worker_first_kwargs(policy: dict[str, Any], execution_timeout: float | None) -> dict[str, Any]:
    ends = timeline.deadlines(TRY_START, TIMEOUT, execution_timeout)
    return {
        "check": dict(CHECK),
        "policy": policy,
        "seed": condition_seed(sharing_key(CHECK)),
        "started_at": timeline.anchor(TRY_START, BackoffPolicy.from_dict(policy)),
        "deadline": ends.schedule,
        "after": 0,  # the worker made check #0
        "share": True,
    }


async def _drive(
    trigger: BackoffTrigger, began: float, now: float, after: int, clock: FakeClock
) -> tuple[Any, int]:
    """(the next check, the checks made) of ``trigger`` run from ``began`` to ``now`` through its own ``_next``."""
    clock.now = began
    made = 0
    scheduled = await trigger._next(after)
    while scheduled is not None and scheduled.at < now:
        made += 1  # the check at scheduled.at
        if scheduled.final:
            return None, made
        clock.now = scheduled.at
        scheduled = await trigger._next(scheduled.index)
    return scheduled, made


#: the condition: as written, or a template field the trigger renders (zero-worker only: a worker-first wait's
#: worker ships the rendered check)
CONDITIONS = {"literal": None, "templated": "SELECT ok FROM t WHERE day = '{{ ds }}'"}
CASES = [
    case
    for case in itertools.product(
        ("zero-worker", "worker-first"), POLICIES, MOMENTS, TRIGGER_STARTS, EXECUTION_TIMEOUTS, CONDITIONS
    )
    if case[0] == "zero-worker" or case[-1] == "literal"
]


@pytest.mark.parametrize(("path", "policy", "moment", "began", "execution_timeout", "condition"), CASES)
async def test_the_view_shows_what_the_trigger_does(
    clock: FakeClock,
    path: str,
    policy: str,
    moment: str,
    began: str,
    execution_timeout: str,
    condition: str,
) -> None:
    clock.now = TRY_START
    data, limit = POLICIES[policy], EXECUTION_TIMEOUTS[execution_timeout]
    now, began_at = TRY_START + MOMENTS[moment], TRY_START + TRIGGER_STARTS[began]
    if now < began_at:
        began_at = now
    if path == "zero-worker":
        after = -1
        start = {"check": dict(CHECK), "fields": {}, "policy": data, "timeout": TIMEOUT}
        start.update(execution_timeout=limit, backstop_seconds=TIMEOUT + 60, share=True)
        fields: dict[str, Any] = {}
        check = dict(CHECK)
        if CONDITIONS[condition] is not None:
            if compat.start_in_triggerer.trigger_template_env(False) is None:
                pytest.skip(
                    "Airflow 2.11 renders no template in the triggerer: such a sensor starts on a worker"
                )
            start["check"] = {**CHECK, "sql": None}
            start["fields"], fields = {"sql": ["sql"]}, {"sql": CONDITIONS[condition]}
            check = _rendered_by_the_trigger(start, fields)
        trigger = _zero_worker_trigger(data, limit, check)
        dates = run_dates(LOGICAL, LOGICAL, LOGICAL + datetime.timedelta(days=1))
        kwargs = {"start": start, **fields}
        wait = LiveWait("d", "r", "t", -1, 1, ZERO_WORKER, kwargs, TRY_START, began_at, run_dates=dates)
        worker_checks = 0
    else:
        kwargs = _worker_first_kwargs(data, limit)
        trigger = BackoffTrigger(**kwargs)
        after = kwargs["after"]
        wait = LiveWait("d", "r", "t", -1, 1, WORKER_FIRST, kwargs, TRY_START, began_at)
        worker_checks = after + 1
    expected_next, made = await _drive(trigger, began_at, now, after, clock)

    row = build_report([wait], WaitsQuery(), now)["waits"][0]
    assert Conditions().of(wait, path).key == sharing_key(trigger.check)  # the group the trigger joins
    assert row["condition"].startswith("SQL") or row["check_type"] == "sql"
    assert row["checks_made"] == made + worker_checks
    if expected_next is None:
        assert row["next_check_in"] is None
    else:
        assert row["next_check_in"] == pytest.approx(expected_next.at - now, abs=1e-3)
    assert row["deadline_in"] == pytest.approx(trigger.deadline - now, abs=1e-3)


def test_templated_cases_are_rendered_not_copied() -> None:
    """The templated rows differ from the literal ones: the rendered day is in the trigger's check."""
    start = {"check": {**CHECK, "sql": None}, "fields": {"sql": ["sql"]}, "policy": POLICIES["full"]}
    start["timeout"] = TIMEOUT
    if compat.start_in_triggerer.trigger_template_env(False) is None:
        pytest.skip("Airflow 2.11 renders no template in the triggerer")
    rendered = _rendered_by_the_trigger(start, {"sql": CONDITIONS["templated"]})
    assert rendered["sql"] == f"SELECT ok FROM t WHERE day = '{LOGICAL.strftime('%Y-%m-%d')}'"


def test_a_fresh_zero_worker_wait_shows_check_0_at_its_splayed_slot_and_no_check_made() -> None:
    """The case the view got wrong: before check #0's splayed slot, nothing is made and #0 is next."""
    data = POLICIES["equal+long splay"]
    line = timeline.Timeline(
        BackoffPolicy.from_dict(data),
        condition_seed(sharing_key(CHECK)),
        timeline.anchor(TRY_START, BackoffPolicy.from_dict(data)),
        TRY_START + TIMEOUT,
        TRY_START,
    )
    start = {"check": dict(CHECK), "fields": {}, "policy": data, "timeout": TIMEOUT}
    start.update(execution_timeout=None, backstop_seconds=TIMEOUT + 60, share=True)
    wait = LiveWait("d", "r", "t", -1, 1, ZERO_WORKER, {"start": start}, TRY_START, TRY_START + 0.2)
    first = line.next_check(TRY_START + 0.2, -1)
    assert first is not None and first.index == 0 and first.at > TRY_START + 1  # the splay puts it later
    row = build_report([wait], WaitsQuery(), TRY_START + 1)["waits"][0]
    assert row["checks_made"] == 0
    assert row["next_check_in"] == pytest.approx(first.at - (TRY_START + 1), abs=1e-3)


@pytest.mark.parametrize("execution_timeout", EXECUTION_TIMEOUTS)
@pytest.mark.parametrize("policy", POLICIES)
async def test_the_start_trigger_builds_the_schedule_this_table_drives(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, policy: str, execution_timeout: str
) -> None:
    """``BackoffStartTrigger.run`` itself — the try's start from what Airflow recorded, its deadlines, anchor
    and seed — builds the schedule the table above builds by hand (``_zero_worker_trigger``)."""
    from types import SimpleNamespace

    from airflow_smart_ext.triggers import zero_worker

    if not compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED:
        pytest.skip("Airflow 3.0-3.2 start no sensor in the triggerer")
    if not compat.versions.AIRFLOW_V_3_0_PLUS:
        request.getfixturevalue("airflow_db")  # 2.11 reads the run's dates from the metadata DB
    built: list[Any] = []

    class Recorded(_ScheduleFromStart):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            built.append(self)

        async def run(self) -> Any:  # the schedule is what is compared; no check is made
            return
            yield

        async def cleanup(self) -> None:
            return None

    monkeypatch.setattr(zero_worker, "_ScheduleFromStart", Recorded)
    data, limit = POLICIES[policy], EXECUTION_TIMEOUTS[execution_timeout]
    start = {"check": dict(CHECK), "fields": {}, "policy": data, "timeout": TIMEOUT}
    start.update(execution_timeout=limit, backstop_seconds=TIMEOUT + 60, share=True)
    trigger = BackoffStartTrigger(start)
    started = datetime.datetime.fromtimestamp(TRY_START, datetime.timezone.utc)
    task = SimpleNamespace(
        task_id="t", template_fields=(), template_ext=(), render_template_as_native_obj=None
    )
    trigger.task_instance = SimpleNamespace(
        dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=1, start_date=started, task=task
    )
    trigger.timeout_after = started + datetime.timedelta(seconds=TIMEOUT + 60)  # what the scheduler sets
    if (
        compat.start_in_triggerer.START_FROM_TRIGGER_RENDERS_TEMPLATES
    ):  # 3.3+: the triggerer renders before run()
        dag_run = SimpleNamespace(
            logical_date=LOGICAL, data_interval_start=LOGICAL, data_interval_end=LOGICAL
        )
        trigger.render_template_fields({"dag_run": dag_run})
    assert [event async for event in trigger.run()] == []
    [schedule] = built
    expected = _zero_worker_trigger(data, limit, dict(CHECK))
    assert schedule.try_started_at == pytest.approx(TRY_START, abs=1e-6)
    assert (schedule.started_at, schedule.seed) == (expected.started_at, expected.seed)
    assert schedule.deadline == pytest.approx(expected.deadline, abs=1e-6)


# ------------------------------------------------------------------ a wait that joined its group's schedule
#: seconds after the first wait's try at which the second (identical condition and policy) starts
JOIN_STARTS = {"next grid cell": 130.0, "much later": 1_010.0}
#: seconds after the second wait's trigger began at which the view looks
JOIN_MOMENTS = {"at once": 0.5, "a few checks on": 400.0, "far on": 2_000.0}
JOIN_POLICIES = ("full+splay", "none", "fixed", "decorrelated")
JOIN_CASES = list(
    itertools.product(
        ("zero-worker", "worker-first"),
        ("zero-worker", "worker-first"),
        JOIN_POLICIES,
        JOIN_STARTS,
        JOIN_MOMENTS,
    )
)


def _wait_and_trigger(
    path: str, data: dict[str, Any], try_start: float, began: float, row: str
) -> tuple[Any, Any]:
    """(the trigger row as the view reads it, the trigger its triggerer builds) for a try starting at
    ``try_start`` whose trigger began at ``began``."""
    policy = BackoffPolicy.from_dict(data)
    ends = timeline.deadlines(try_start, TIMEOUT, None)
    seed = condition_seed(sharing_key(CHECK))
    if path == "zero-worker":
        start = {"check": dict(CHECK), "fields": {}, "policy": data, "timeout": TIMEOUT}
        start.update(execution_timeout=None, backstop_seconds=TIMEOUT + 60, share=True)
        trigger = _ScheduleFromStart(
            check=dict(CHECK),
            policy=data,
            seed=seed,
            started_at=timeline.anchor(try_start, policy),
            deadline=ends.schedule,
            after=-1,
        )
        trigger.try_started_at = try_start
        kwargs: dict[str, Any] = {"start": start}
        classpath = ZERO_WORKER
    else:
        kwargs = {
            "check": dict(CHECK),
            "policy": data,
            "seed": seed,
            "started_at": timeline.anchor(try_start, policy),
            "deadline": ends.schedule,
            "after": 0,
            "share": True,
        }
        trigger = BackoffTrigger(**kwargs)
        classpath = WORKER_FIRST
    wait = LiveWait(
        "d", row, "t", -1, 1, classpath, kwargs, try_start, began, trigger_id=int(began), triggerer_id=7
    )
    return wait, trigger


async def _drive_joined(
    trigger: BackoffTrigger, group: Any, began: float, now: float, clock: FakeClock
) -> tuple[Any, int]:
    """What ``BackoffTrigger.run`` does from ``began`` to ``now``: its own first check, the join, then each
    check at its time through ``_next``."""
    clock.now = began
    scheduled = await trigger._next(trigger.after)
    if trigger._schedule.join(group):
        scheduled = await trigger._first_on_group_schedule()
    made = 0
    while scheduled is not None and scheduled.at < now:
        made += 1
        if scheduled.final:
            return None, made
        clock.now = scheduled.at
        scheduled = await trigger._next(scheduled.index)
    return scheduled, made


@pytest.mark.parametrize(("first_path", "path", "policy", "start", "moment"), JOIN_CASES)
async def test_a_wait_that_joined_its_groups_schedule_shows_the_groups_checks(
    clock: FakeClock, first_path: str, path: str, policy: str, start: str, moment: str
) -> None:
    """Two identical waits in one triggerer process, the second starting later: the second follows the
    schedule the first set (``WaitSchedule.join``) and the view shows that schedule for it, not its own."""
    from airflow_smart_ext.triggers import check_groups

    clock.now = TRY_START
    data = POLICIES[policy]
    first_began = TRY_START + 0.2
    second_try = TRY_START + JOIN_STARTS[start]
    second_began = second_try + 0.2
    now = second_began + JOIN_MOMENTS[moment]
    first_wait, first = _wait_and_trigger(first_path, data, TRY_START, first_began, "r1")
    second_wait, second = _wait_and_trigger(path, data, second_try, second_began, "r2")
    group = check_groups.CheckGroup(sharing_key(CHECK), None, None)  # type: ignore[arg-type]
    assert not first._schedule.join(group)  # the first sets the group's schedule
    expected_next, made = await _drive_joined(second, group, second_began, now, clock)
    first_next, first_made = await _drive_joined(first, group, first_began, now, clock)

    report = build_report([second_wait, first_wait], WaitsQuery(), now)
    rows = {row["run_id"]: row for row in report["waits"]}
    for row, (nxt, count, worker) in (
        (rows["r2"], (expected_next, made, path == "worker-first")),
        (rows["r1"], (first_next, first_made, first_path == "worker-first")),
    ):
        assert row["checks_made"] == count + int(worker)
        if nxt is None:
            assert row["next_check_in"] is None
        else:
            assert row["next_check_in"] == pytest.approx(nxt.at - now, abs=1e-3)
    assert rows["r1"]["shared_with"] == rows["r2"]["shared_with"] == 2


def test_the_joined_cases_differ_from_the_waits_own_schedules() -> None:
    """The table above can fail: for most cases the joined wait's own schedule is a different timeline."""
    differ = 0
    for path, policy in itertools.product(("zero-worker", "worker-first"), JOIN_POLICIES):
        data = POLICIES[policy]
        for offset in JOIN_STARTS.values():
            for moment in JOIN_MOMENTS.values():
                began = TRY_START + offset + 0.2
                second_wait, _ = _wait_and_trigger(path, data, TRY_START + offset, began, "r2")
                first_wait, _ = _wait_and_trigger("zero-worker", data, TRY_START, TRY_START + 0.2, "r1")
                alone = build_report([second_wait], WaitsQuery(), began + moment)["waits"][0]
                joined = {
                    row["run_id"]: row
                    for row in build_report([second_wait, first_wait], WaitsQuery(), began + moment)["waits"]
                }["r2"]
                differ += (alone["next_check_in"], alone["checks_made"]) != (
                    joined["next_check_in"],
                    joined["checks_made"],
                )
    assert differ >= 30, differ


# ------------------------------------------------------------------ the run's dagrun_timeout
#: seconds after the start of the try at which the scheduler times the run out (None: no dagrun_timeout)
RUN_ENDS = {"no dagrun_timeout": None, "run ends first": 900.0, "run ends after the wait": 7_200.0}


@pytest.mark.parametrize("run_ends", RUN_ENDS)
@pytest.mark.parametrize("execution_timeout", EXECUTION_TIMEOUTS)
@pytest.mark.parametrize("path", ["zero-worker", "worker-first"])
def test_the_view_shows_what_ends_the_wait_first(path: str, execution_timeout: str, run_ends: str) -> None:
    """The deadline shown is the earliest of the timeout, the execution_timeout and the run's dagrun_timeout
    (the scheduler skips the task then), and says which; the next check stays the trigger's."""
    data, limit = POLICIES["full"], EXECUTION_TIMEOUTS[execution_timeout]
    ends = timeline.deadlines(TRY_START, TIMEOUT, limit)
    run_deadline = timeline.run_deadline(
        TRY_START - 5.0, None if RUN_ENDS[run_ends] is None else RUN_ENDS[run_ends] + 5.0
    )
    if path == "zero-worker":
        start = {"check": dict(CHECK), "fields": {}, "policy": data, "timeout": TIMEOUT}
        start.update(execution_timeout=limit, backstop_seconds=TIMEOUT + 60, share=True)
        kwargs: dict[str, Any] = {"start": start}
        classpath, own_by = ZERO_WORKER, "execution_timeout" if limit else "timeout"
    else:
        kwargs = _worker_first_kwargs(data, limit)
        classpath, own_by = WORKER_FIRST, "timeout or execution_timeout"
    now = TRY_START + 100.0
    wait = LiveWait(
        "d", "r", "t", -1, 1, classpath, kwargs, TRY_START, TRY_START + 0.2, run_deadline=run_deadline
    )
    alone = LiveWait("d", "r", "t", -1, 1, classpath, kwargs, TRY_START, TRY_START + 0.2)
    row = build_report([wait], WaitsQuery(), now)["waits"][0]
    expected_at, expected_by = ends.schedule, own_by
    if RUN_ENDS[run_ends] is not None and TRY_START + RUN_ENDS[run_ends] < ends.schedule:
        expected_at, expected_by = TRY_START + RUN_ENDS[run_ends], "dagrun_timeout"
    assert row["deadline_by"] == expected_by
    assert row["deadline_in"] == pytest.approx(expected_at - now, abs=1e-3)
    assert row["next_check_in"] == build_report([alone], WaitsQuery(), now)["waits"][0]["next_check_in"]
