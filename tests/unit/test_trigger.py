"""Unit tests for BackoffTrigger: schedule, restart, sharing, cancellation, errors, loop lag, SQL."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import sqlite3
import threading
import time
from collections import defaultdict
from typing import Any
from urllib.parse import quote

import pytest

from airflow_smart_ext import compat, conditions
from airflow_smart_ext.backoff import BackoffPolicy, aligned_start, condition_seed, replay
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.conditions import sensor as sensor_checks
from airflow_smart_ext.conditions import sql as sql_checks
from airflow_smart_ext.triggers import BackoffTrigger, gc_tuning, log_lines, sharing

START = 1_700_000_000.0

# --- test sensors (importable by classpath: the trigger re-creates them) ------------------------------

POKES: dict[str, list[float]] = defaultdict(list)
READY_AT: dict[str, float] = {}
RAISE: dict[str, str] = {}
BLOCK_SECONDS: dict[str, float] = {}
THREADS: dict[str, set[str]] = defaultdict(set)


class FlagSensor(compat.BaseSensorOperator):
    """Done once the virtual clock reaches READY_AT[name]; records every poke."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> Any:
        POKES[self.name].append(sharing.now())
        THREADS[self.name].add(threading.current_thread().name)
        if self.name in BLOCK_SECONDS:
            time.sleep(BLOCK_SECONDS[self.name])
        if self.name in RAISE:
            raise RuntimeError(RAISE[self.name])
        ready = READY_AT.get(self.name)
        if ready is not None and sharing.now() >= ready:
            return compat.PokeReturnValue(is_done=True, xcom_value={"name": self.name, "ds": context["ds"]})
        return False


class FailingSensor(compat.BaseSensorOperator):
    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(sharing.now())
        raise compat.AirflowFailException("bad partition")


class SkippingSensor(compat.BaseSensorOperator):
    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(sharing.now())
        raise compat.AirflowSkipException("nothing to wait for today")


class TimingOutSensor(SkippingSensor):
    def poke(self, context: Any) -> bool:
        POKES[self.name].append(sharing.now())
        raise compat.AirflowTaskTimeout("poke took too long")


class AsyncFlagSensor(FlagSensor):
    async def apoke(self, context: Any) -> bool:
        POKES[self.name].append(sharing.now())
        THREADS[self.name].add(threading.current_thread().name)
        return sharing.now() >= READY_AT.get(self.name, float("inf"))


def value_is_ready(value: Any) -> bool:
    return value == "ready"


def value_is_broken(value: Any) -> bool:
    return value == "broken"


@pytest.fixture(autouse=True)
def _reset_state() -> Any:
    for registry in (POKES, READY_AT, RAISE, BLOCK_SECONDS, THREADS):
        registry.clear()
    yield


def sensor_check(name: str, cls: str = "FlagSensor", task_id: str = "wait") -> dict[str, Any]:
    return {
        "type": "sensor",
        "classpath": f"{__name__}.{cls}",
        "kwargs": {"name": name},
        "context": {
            "dag_id": "d",
            "task_id": task_id,
            "run_id": "r",
            "map_index": -1,
            "try_number": 1,
            "ds": "2026-01-02",
            "ts": "2026-01-02T00:00:00+00:00",
            "logical_date": "2026-01-02T00:00:00+00:00",
            "data_interval_start": "2026-01-02T00:00:00+00:00",
            "data_interval_end": "2026-01-03T00:00:00+00:00",
        },
    }


def make_trigger(check: dict[str, Any], policy: BackoffPolicy, **overrides: Any) -> BackoffTrigger:
    kwargs: dict[str, Any] = {
        "check": check,
        "policy": policy.to_dict(),
        "seed": "seed-1",
        "started_at": START,
        "deadline": START + 3600,
        "after": 0,
        "share": True,
    }
    kwargs.update(overrides)
    return BackoffTrigger(**kwargs)


async def first_event(trigger: BackoffTrigger) -> dict[str, Any]:
    agen = trigger.run()
    try:
        event = await agen.__anext__()
    finally:
        await agen.aclose()
    payload: dict[str, Any] = event.payload
    return payload


# --- a virtual clock: time only moves when every task is waiting on it ------------------------------


class VirtualClock:
    def __init__(self, start: float) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._threads_busy = 0
        self._lock = threading.Lock()

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> asyncio.Future[None]:
        # Not a coroutine: the wake time is fixed at the call, even when the caller wraps the sleep in a
        # task that only starts after the driver has moved time on.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._seq), future))
        return future

    def call_later(self, seconds: float, callback: Any) -> asyncio.Future[None]:
        future = self.sleep(seconds)
        future.add_done_callback(lambda done: None if done.cancelled() else callback())
        return future  # .cancel() disarms it, like a TimerHandle

    async def run_blocking(self, func: Any, *args: Any, key: str | None = None) -> Any:
        if key is not None:  # the key's slots, as the real run_blocking takes them
            async with runtime.connection_slot(key):
                return await self.run_blocking(func, *args)
        with self.busy():
            return await asyncio.to_thread(func, *args)

    @contextlib.contextmanager
    def busy(self) -> Any:
        """Real work outside the loop (a thread, the supervisor): virtual time stands still meanwhile."""
        with self._lock:
            self._threads_busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._threads_busy -= 1

    async def drive(self) -> None:
        while True:
            # Settle: let every runnable task (and every worker-thread check) finish before moving time. Three
            # quiet rounds in a row, each ending with a short real sleep: on a loaded machine a thread's result
            # can reach the loop a moment after the thread count drops, and moving time then is a false timeout.
            quiet = 0
            while quiet < 3:
                for _ in range(50):
                    await asyncio.sleep(0)
                if self._threads_busy:
                    quiet = 0
                    while self._threads_busy:
                        await asyncio.sleep(0.001)
                else:
                    quiet += 1
                    await asyncio.sleep(0.0005)
            while self._sleepers and self._sleepers[0][2].done():
                heapq.heappop(self._sleepers)
            if not self._sleepers:
                await asyncio.sleep(0.001)
                continue
            wake, _, future = heapq.heappop(self._sleepers)
            self.now = max(self.now, wake)
            future.set_result(None)


@pytest.fixture
async def vclock(monkeypatch: pytest.MonkeyPatch) -> Any:
    clock = VirtualClock(START)
    monkeypatch.setattr(sharing, "_clock", clock.time)
    monkeypatch.setattr(sharing, "_sleep", clock.sleep)
    monkeypatch.setattr(sharing, "_call_later", clock.call_later, raising=False)
    monkeypatch.setattr(runtime, "run_blocking", clock.run_blocking)
    real_aget_connection = compat.aget_connection

    async def aget_connection(conn_id: str, within: float | None = None) -> Any:
        with clock.busy():  # a thread on 2.11, the supervisor on 3.x
            return await real_aget_connection(conn_id, within)

    monkeypatch.setattr(compat, "aget_connection", aget_connection)
    real_flushed = log_lines.flushed

    async def flushed() -> None:
        with clock.busy():  # the log writer thread
            await real_flushed()

    monkeypatch.setattr(log_lines, "flushed", flushed)
    driver = asyncio.ensure_future(clock.drive())
    yield clock
    driver.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driver


# --- serialization -------------------------------------------------------------------------------------


def test_serialize_returns_exactly_the_contract_kwargs() -> None:
    policy = BackoffPolicy(initial=10, factor=2, cap=60, jitter="full")
    trigger = make_trigger(sensor_check("a"), policy, after=2, share=False)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_smart_ext.triggers.backoff.BackoffTrigger"
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
            "check['conn_id']",
        ),
    ],
)
def test_bad_check_spec_is_rejected_with_the_key_named(check: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        make_trigger(check, BackoffPolicy(initial=10))


def test_bad_policy_is_rejected_naming_the_parameter() -> None:
    with pytest.raises(ValueError, match="factor"):
        BackoffTrigger(sensor_check("a"), {"initial": 10, "factor": 0.5}, "s", START, None)


async def test_serialize_rebuild_run_succeeds_with_xcom(vclock: VirtualClock) -> None:
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
    vclock: VirtualClock,
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


async def test_restart_mid_schedule_resumes_at_the_right_index(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1.5, cap=120, jitter="full")
    READY_AT["a"] = START + 1000
    _, kwargs = make_trigger(sensor_check("a"), policy, share=False).serialize()

    first = asyncio.ensure_future(first_event(BackoffTrigger(**kwargs)))
    while vclock.now < START + 300 and not first.done():
        await asyncio.sleep(0.001)
    assert not first.done(), first.result()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    before_restart = list(POKES["a"])
    assert before_restart, "the first incarnation should have checked"

    # The triggerer was down for a while; a rebuilt trigger (same kwargs) continues the same schedule.
    vclock.now = START + 450
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


async def test_deadline_passed_while_down_gives_timeout_without_checking(vclock: VirtualClock) -> None:
    vclock.now = START + 4000
    payload = await first_event(make_trigger(sensor_check("a"), BackoffPolicy(initial=10), after=3))
    assert payload["status"] == "timeout"
    assert (payload["checks"], payload["checks_complete"]) == (0, False)
    assert POKES["a"] == []


# --- outcomes ---------------------------------------------------------------------------------------------


async def test_failure_exception_gives_failure_event(vclock: VirtualClock) -> None:
    payload = await first_event(
        make_trigger(sensor_check("f", cls="FailingSensor"), BackoffPolicy(initial=10))
    )
    assert payload["status"] == "failure"
    assert "bad partition" in payload["message"]
    assert payload["check_index"] == 1


async def test_raising_check_gives_error_event_to_the_subscribers_of_that_round(vclock: VirtualClock) -> None:
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


async def test_async_apoke_is_awaited_on_the_loop(vclock: VirtualClock) -> None:
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


# --- sharing ------------------------------------------------------------------------------------------------


async def test_twenty_identical_subscribers_cost_one_check_per_cycle(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=30, factor=1, jitter="none")
    READY_AT["shared"] = START + 185
    triggers = [
        make_trigger(
            sensor_check("shared", task_id=f"t{i}"), policy, seed=f"seed-{i}", started_at=START + i * 0.1
        )
        for i in range(20)
    ]
    events = await asyncio.gather(*(first_event(t) for t in triggers))
    assert {e["status"] for e in events} == {"success"}
    # Checks at START+30, +60, ... +210 (positive); 7 cycles -> 7 checks, not 140.
    assert len(POKES["shared"]) == 7
    assert sharing.registry().groups == {}


def as_deferred_by_sensors(name: str, policy: BackoffPolicy, starts: list[float]) -> list[BackoffTrigger]:
    """Triggers as ``BackoffSensor(deferrable=True)`` defers them: the condition's seed, the aligned anchor."""
    triggers = []
    for i, started in enumerate(starts):
        check = sensor_check(name, task_id=f"t{i}")
        triggers.append(
            make_trigger(
                check,
                policy,
                seed=condition_seed(conditions.sharing_key(check)),
                started_at=aligned_start(started, policy.initial),
                deadline=started + 3600,
            )
        )
    return triggers


async def test_sensor_deferred_waits_share_every_check_with_default_jitter(vclock: VirtualClock) -> None:
    """Full jitter, x2 growth, splay (BackoffSensor's defaults): 20 waits started within one cell of the
    poke_interval grid follow one schedule, so every cycle costs one check and nobody is served late."""
    policy = BackoffPolicy(initial=30, factor=2, cap=600, jitter="full", splay=30)
    cell = aligned_start(START, 30) + 30
    triggers = as_deferred_by_sensors("herd", policy, [cell + i * 1.4 for i in range(20)])
    READY_AT["herd"] = cell + 2000
    events = await asyncio.gather(*(first_event(t) for t in triggers))
    assert {e["status"] for e in events} == {"success"}
    seed = triggers[0].seed
    schedule = [cell + policy.offset(seed, k) for k in range(1, 40)]
    expected = [at for at in schedule if at < READY_AT["herd"]]
    expected.append(next(at for at in schedule if at >= READY_AT["herd"]))
    assert POKES["herd"] == pytest.approx(expected)  # one check per slot of the one schedule, not 20
    assert {e["check_index"] for e in events} == {len(expected)}


async def test_sensor_deferred_waits_started_in_different_cells_align_without_jitter(
    vclock: VirtualClock,
) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    base = aligned_start(START, 10)
    triggers = as_deferred_by_sensors("grid", policy, [base + 3 + i * 1.7 for i in range(20)])  # 4 cells
    READY_AT["grid"] = base + 95
    events = await asyncio.gather(*(first_event(t) for t in triggers))
    assert {e["status"] for e in events} == {"success"}
    assert POKES["grid"] == [base + 10 * k for k in range(1, 11)]  # one lattice: +10 .. +100


# One condition, one schedule per process: identical waits (same policy) that start apart — either side of a
# grid line, cells apart, an hour apart — all follow the schedule of the group's first wait. Each row: the
# policy, when the waits start (seconds after a grid line), when the condition turns true.
ONE_SCHEDULE_CASES: dict[str, tuple[BackoffPolicy, list[float], float]] = {
    "4 ms apart across a grid line, fixed 3 s, full jitter": (
        BackoffPolicy(initial=3, factor=1, jitter="full"),
        [-0.002, 0.002],
        40,
    ),
    "20 waits over 4 cells, x2 growth, equal jitter, splay": (
        BackoffPolicy(initial=10, factor=2, cap=120, jitter="equal", splay=10),
        [i * 1.9 for i in range(20)],
        400,
    ),
    "a late wait joins an hour-old group": (
        BackoffPolicy(initial=30, factor=2, cap=600, jitter="full"),
        [0, 3600],
        4000,
    ),
}


@pytest.mark.parametrize("case", ONE_SCHEDULE_CASES)
async def test_identical_waits_follow_one_schedule_whatever_their_start(
    vclock: VirtualClock, case: str
) -> None:
    policy, offsets, ready = ONE_SCHEDULE_CASES[case]
    line = aligned_start(START, policy.initial) + policy.initial
    triggers = as_deferred_by_sensors("one", policy, [line + offset for offset in offsets])
    for trigger in triggers:
        trigger.deadline = line + 10_000
    READY_AT["one"] = line + ready

    async def started_later(trigger: BackoffTrigger, at: float) -> dict[str, Any]:
        await sharing.sleep(at - sharing.now())
        return await first_event(trigger)

    events = await asyncio.gather(
        *(started_later(t, line + o) for t, o in zip(triggers, offsets, strict=True))
    )
    assert {e["status"] for e in events} == {"success"}
    first = triggers[0]
    slots = {first.started_at + policy.offset(first.seed, k) for k in range(200)}
    assert set(POKES["one"]) <= slots  # every check on the first wait's schedule: no second timeline
    assert len(POKES["one"]) == len(set(POKES["one"]))  # and one check per slot, however many wait


async def test_a_joined_wait_keeps_its_own_deadline(vclock: VirtualClock) -> None:
    """A wait joining a group whose checks are 10 minutes apart still ends at its own deadline."""
    policy = BackoffPolicy(initial=30, factor=2, cap=600, jitter="none")
    old, new = as_deferred_by_sensors("late", policy, [START, START + 3600])
    old.deadline, new.deadline = START + 10_000, START + 3600 + 50

    async def started_later(trigger: BackoffTrigger, at: float) -> dict[str, Any]:
        await sharing.sleep(at - sharing.now())
        return await first_event(trigger)

    old_run = asyncio.ensure_future(first_event(old))
    new_event = await started_later(new, START + 3600)
    assert new_event["status"] == "timeout"
    # its final check at its own deadline, not at the group's next slot; nothing on its own schedule (+3610)
    assert vclock.now == pytest.approx(START + 3650)
    assert [at for at in POKES["late"] if at > START + 3600] == [START + 3650]
    old_run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await old_run


async def test_a_wait_without_check_zero_checks_at_once_when_it_joins(vclock: VirtualClock) -> None:
    """A deferral that left check #0 to the triggerer (``after=-1``: rate-limited) joining a group whose
    checks are 10 minutes apart is checked at once, not at the group's next slot."""
    policy = BackoffPolicy(initial=30, factor=2, cap=600, jitter="none")
    old, new = as_deferred_by_sensors("fresh", policy, [START, START + 3600])
    old.deadline, new.deadline, new.after = START + 10_000, START + 10_000, -1
    READY_AT["fresh"] = START + 3601
    old_run = asyncio.ensure_future(first_event(old))
    await sharing.sleep(3605)
    event = await first_event(new)
    assert event["status"] == "success"
    assert [at for at in POKES["fresh"] if at > START + 3600] == [START + 3605]  # check #0 now, not +3910
    await old_run


async def test_different_conditions_do_not_share(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=30, factor=1, jitter="none")
    READY_AT["x"] = READY_AT["y"] = START + 65
    await asyncio.gather(
        first_event(make_trigger(sensor_check("x"), policy)),
        first_event(make_trigger(sensor_check("y"), policy)),
    )
    assert len(POKES["x"]) == len(POKES["y"]) == 3


async def test_same_sensor_for_different_dates_does_not_share_but_other_tasks_same_date_do(
    vclock: VirtualClock,
) -> None:
    policy = BackoffPolicy(initial=30, factor=1, jitter="none")
    READY_AT["d"] = START + 65
    other_day = sensor_check("d")
    other_day["context"] = {**other_day["context"], "ds": "2026-01-03", "ts": "2026-01-03T00:00:00+00:00"}
    other_task = sensor_check("d", task_id="another_task")
    other_task["context"] = {**other_task["context"], "dag_id": "another_dag", "run_id": "r2"}
    assert conditions.sharing_key(sensor_check("d")) != conditions.sharing_key(other_day)
    assert conditions.sharing_key(sensor_check("d")) == conditions.sharing_key(other_task)
    await asyncio.gather(
        first_event(make_trigger(sensor_check("d"), policy)),
        first_event(make_trigger(other_task, policy)),
        first_event(make_trigger(other_day, policy)),
    )
    assert len(POKES["d"]) == 6  # two groups (two dates) x checks at 0, 30, 60 s — not 9


async def test_share_false_opts_out(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=30, factor=1, jitter="none")
    READY_AT["solo"] = START + 65
    await asyncio.gather(
        *(first_event(make_trigger(sensor_check("solo"), policy, share=False)) for _ in range(3))
    )
    assert len(POKES["solo"]) == 9


async def test_no_subscriber_is_checked_later_than_its_schedule(vclock: VirtualClock) -> None:
    """Jittered subscribers: each is served by a check started in [due - window, due]."""
    policy = BackoffPolicy(initial=20, factor=1.5, cap=100, jitter="full")
    seen: dict[str, list[tuple[float, float]]] = defaultdict(list)
    original_observe = sharing.CheckGroup.observe

    async def spy(self: sharing.CheckGroup, due_at: float, window: float, context: Any, *args: Any) -> Any:
        observation, shared = await original_observe(self, due_at, window, context, *args)
        seen[context["task_id"]].append((due_at, observation.observed_at))
        return observation, shared

    sharing.CheckGroup.observe = spy  # type: ignore[method-assign]
    try:
        triggers = [
            make_trigger(sensor_check("jit", task_id=f"t{i}"), policy, seed=f"s{i}", deadline=START + 600)
            for i in range(8)
        ]
        events = await asyncio.gather(*(first_event(t) for t in triggers))
    finally:
        sharing.CheckGroup.observe = original_observe  # type: ignore[method-assign]
    assert {e["status"] for e in events} == {"timeout"}
    total_due = sum(len(v) for v in seen.values())
    assert total_due > len(POKES["jit"])  # some checks were shared
    for task_id, pairs in seen.items():
        for due_at, observed_at in pairs:
            assert due_at - 5.0 <= observed_at <= due_at, (task_id, due_at, observed_at)


async def test_observe_does_not_spin_on_a_finished_round_whose_callback_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: awaiting a finished round never yields to the loop, so re-awaiting it forever froze the
    triggerer. A finished, too-old round must be forgotten and a new check started."""

    class Counting(conditions.SharedCheck):
        concurrency_key = "k"
        runs = 0

        async def run(self, context: Any) -> Any:
            Counting.runs += 1
            return "fresh"

    group = sharing.CheckGroup("k", Counting(), None)
    stale = sharing.Observation(time.time() - 100, "stale")
    finished: asyncio.Future[sharing.Observation] = asyncio.get_running_loop().create_future()
    finished.set_result(stale)
    group.latest = stale
    group._inflight = {finished: stale.observed_at}  # its done-callback never ran
    real_shield = asyncio.shield
    shields: list[Any] = []

    def counting_shield(awaitable: Any) -> Any:
        shields.append(awaitable)
        if len(shields) > 10:
            raise AssertionError("observe() keeps re-awaiting a finished round")
        return real_shield(awaitable)

    monkeypatch.setattr(sharing.asyncio, "shield", counting_shield)
    observation, shared = await group.observe(time.time(), 5.0, {})
    assert (observation.raw, shared, Counting.runs) == ("fresh", False, 1)


async def test_positive_result_completes_every_subscriber_immediately(vclock: VirtualClock) -> None:
    """A subscriber with a long interval finishes when a fast subscriber of the group sees the row."""
    READY_AT["row"] = START + 50
    fast = make_trigger(
        sensor_check("row", task_id="fast"), BackoffPolicy(initial=10, factor=1, jitter="none")
    )
    slow = make_trigger(
        sensor_check("row", task_id="slow"), BackoffPolicy(initial=500, factor=1, jitter="none")
    )
    events = await asyncio.gather(first_event(fast), first_event(slow))
    assert [e["status"] for e in events] == ["success", "success"]
    assert vclock.now == START + 50
    assert events[1]["check_index"] == 1  # completed while waiting for its check #1 (due at +500)


async def test_cancelling_one_subscriber_does_not_affect_the_others(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    READY_AT["c"] = START + 45
    BLOCK_SECONDS["c"] = 0.05  # a round is in flight while we cancel its initiator
    tasks = [
        asyncio.ensure_future(first_event(make_trigger(sensor_check("c", task_id=f"t{i}"), policy)))
        for i in range(3)
    ]
    while not POKES["c"]:
        await asyncio.sleep(0.001)
    tasks[0].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert [r["status"] for r in results[1:]] == ["success", "success"]  # type: ignore[index]
    assert len(POKES["c"]) == 5  # +10 .. +40 not ready, +50 ready: one check per cycle for three
    assert sharing.registry().groups == {}


async def test_last_subscriber_out_tears_the_group_down(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    task = asyncio.ensure_future(first_event(make_trigger(sensor_check("gone"), policy)))
    while not POKES["gone"]:
        await asyncio.sleep(0.001)
    registry = sharing.registry()
    assert registry.subscriber_count == 1 and len(registry.groups) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert registry.groups == {}


async def test_cleanup_and_on_kill_are_idempotent(vclock: VirtualClock) -> None:
    trigger = make_trigger(sensor_check("k"), BackoffPolicy(initial=10))
    agen = trigger.run()
    task = asyncio.ensure_future(agen.__anext__())
    while not POKES["k"]:
        await asyncio.sleep(0.001)
    await trigger.on_kill()
    await trigger.on_kill()
    await trigger.cleanup()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await trigger.cleanup()
    assert sharing.registry().groups == {}


# --- never blocking the loop (real time on purpose) --------------------------------------------------------------


async def test_a_blocking_poke_does_not_delay_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)  # real time: no 3.x event guard
    BLOCK_SECONDS["slow"] = 1.0
    READY_AT["slow"] = 0.0
    READY_AT["quick"] = 0.0
    now = time.time()
    policy = BackoffPolicy(initial=0.05, factor=1, jitter="none")
    lags: list[float] = []
    stop = asyncio.Event()

    async def watchdog() -> None:
        while not stop.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - before - 0.01)

    dog = asyncio.ensure_future(watchdog())
    slow = asyncio.ensure_future(
        first_event(make_trigger(sensor_check("slow"), policy, started_at=now, deadline=now + 60))
    )
    quick_done_at: list[float] = []

    async def quick() -> None:
        await first_event(make_trigger(sensor_check("quick"), policy, started_at=now, deadline=now + 60))
        quick_done_at.append(time.monotonic())

    started = time.monotonic()
    await asyncio.gather(quick(), slow)
    stop.set()
    await dog
    assert POKES["slow"] and "MainThread" not in THREADS["slow"]
    assert max(lags) < 0.5  # the 1 s sleep in poke ran in a worker thread
    assert quick_done_at[0] - started < 0.8  # the other trigger was not held up by the slow one


async def test_concurrency_is_bounded_per_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__MAX_CONCURRENT_CHECKS_PER_CONNECTION", "2")
    active = 0
    peak = 0

    async def probe() -> None:
        nonlocal active, peak
        async with runtime.connection_slot("conn_id:bounded"):
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.01)
            active -= 1

    await asyncio.gather(*(probe() for _ in range(10)))
    assert peak == 2


async def test_a_trigger_starts_the_opt_in_gc_schedule_of_its_loop(
    vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[asyncio.AbstractEventLoop] = []
    monkeypatch.setattr(gc_tuning, "start", lambda: started.append(asyncio.get_running_loop()))
    READY_AT["a"] = START
    payload = await first_event(make_trigger(sensor_check("a"), BackoffPolicy(initial=10, factor=2, cap=80)))
    assert payload["status"] == "success"
    assert started == [asyncio.get_running_loop()]


def test_bad_config_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__SHARING_WINDOW_SECONDS", "soon")
    from airflow_smart_ext.triggers.backoff import coalescing_window

    with pytest.raises(ValueError, match=r"\[smart_ext\] sharing_window_seconds"):
        coalescing_window(10)


# --- SQL against a real SQLite file ---------------------------------------------------------------------------------


@pytest.fixture
def sqlite_conn(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "events.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE partitions (name TEXT, state TEXT)")
    # The sqlite hook wants the file path URL-quoted as the host ("sqlite:////abs" fails: invalid uri authority).
    monkeypatch.setenv("AIRFLOW_CONN_SMART_EXT_UNIT_SQLITE", f"sqlite://{quote(str(path), safe='')}")
    return str(path)


def sql_check(**overrides: Any) -> dict[str, Any]:
    check: dict[str, Any] = {
        "type": "sql",
        "conn_id": "smart_ext_unit_sqlite",
        "sql": "SELECT state FROM partitions WHERE name = ?",
        "parameters": ["2026-01-02"],
        "hook_params": None,
        "selector": None,
        "success": f"{__name__}.value_is_ready",
        "failure": f"{__name__}.value_is_broken",
        "fail_on_empty": False,
    }
    check.update(overrides)
    return check


async def test_sql_check_waits_for_the_row_then_succeeds(vclock: VirtualClock, sqlite_conn: str) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    inserted_at: list[float] = []

    async def insert_row_at_35s() -> None:
        # On the virtual clock, so the row lands strictly between check #3 (30 s) and check #4 (40 s).
        await vclock.sleep(35)
        with sqlite3.connect(sqlite_conn) as db:
            db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'ready')")
        inserted_at.append(vclock.now)

    writer = asyncio.ensure_future(insert_row_at_35s())
    payload = await first_event(make_trigger(sql_check(), policy))
    await writer
    assert inserted_at == [START + 35]
    assert payload["status"] == "success"
    assert payload["check_index"] == 4
    assert payload["xcom_value"] is None


async def test_sql_failure_criterion_and_per_subscriber_criteria(
    vclock: VirtualClock, sqlite_conn: str
) -> None:
    with sqlite3.connect(sqlite_conn) as db:
        db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'broken')")
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    # Same query (one shared fetch), different criteria: one fails, the other has no failure criterion.
    failing = make_trigger(sql_check(), policy, deadline=START + 30)
    lenient = make_trigger(sql_check(failure=None), policy, deadline=START + 30)
    events = await asyncio.gather(first_event(failing), first_event(lenient))
    assert events[0]["status"] == "failure"
    assert "broken" in events[0]["message"]
    assert events[1]["status"] == "timeout"


async def test_sql_error_is_reported(vclock: VirtualClock, sqlite_conn: str) -> None:
    payload = await first_event(
        make_trigger(sql_check(sql="SELECT nope FROM partitions"), BackoffPolicy(initial=10))
    )
    # A permanent error (the statement is wrong) fails as before; a transient one is ridden out (below).
    assert payload["status"] == "error"
    assert "no such column: nope" in payload["message"]


async def test_sql_checks_of_identical_queries_are_shared(vclock: VirtualClock, sqlite_conn: str) -> None:
    calls: list[float] = []
    original = sql_checks.SqlSharedCheck.run

    async def counting(self: sql_checks.SqlSharedCheck, context: Any) -> Any:
        calls.append(vclock.now)
        return await original(self, context)

    sql_checks.SqlSharedCheck.run = counting  # type: ignore[method-assign]
    try:
        policy = BackoffPolicy(initial=10, factor=1, jitter="none")
        events = await asyncio.gather(
            *(
                first_event(make_trigger(sql_check(), policy, seed=f"s{i}", deadline=START + 40))
                for i in range(5)
            )
        )
    finally:
        sql_checks.SqlSharedCheck.run = original  # type: ignore[method-assign]
    assert {e["status"] for e in events} == {"timeout"}
    assert len(calls) == 4  # +10, +20, +30, +40 (final) -- for five subscribers


@pytest.mark.parametrize(("cls", "status"), [("SkippingSensor", "skip"), ("TimingOutSensor", "timeout")])
async def test_skip_and_task_timeout_in_a_poke_map_like_poke_mode(
    vclock: VirtualClock, cls: str, status: str
) -> None:
    payload = await first_event(make_trigger(sensor_check(cls.lower(), cls=cls), BackoffPolicy(initial=10)))
    assert payload["status"] == status
    assert len(POKES[cls.lower()]) == 1


# --- sharing: a due subscriber never waits for an older round -------------------------------------------------

DELAY: dict[str, float] = {}


class SlowAsyncSensor(compat.BaseSensorOperator):
    """Observes READY_AT at the start of its poke, then takes DELAY[name] virtual seconds to answer."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    async def apoke(self, context: Any) -> bool:
        POKES[self.name].append(sharing.now())
        ready = sharing.now() >= READY_AT.get(self.name, float("inf"))
        await sharing.sleep(DELAY.get(self.name, 0.0))
        return ready


class ConnSensor(SlowAsyncSensor):
    def __init__(self, *, name: str, conn_id: str, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.conn_id = conn_id


async def _event_with_time(trigger: BackoffTrigger, clock: VirtualClock) -> tuple[dict[str, Any], float]:
    payload = await first_event(trigger)
    return payload, clock.now


@pytest.mark.parametrize(
    ("ready_at", "b_event_at", "b_status_from"),
    [
        (START + 12, START + 21, "own round"),  # A's round (+10) is negative; B's own round (+13) positive
        (START + 5, START + 18, "A's round"),  # A's positive result (+18) completes B during its own round
    ],
)
async def test_due_subscriber_starts_its_own_round_while_an_older_round_is_in_flight(
    vclock: VirtualClock, ready_at: float, b_event_at: float, b_status_from: str
) -> None:
    """A is due at +10, B at +13 (window 1 s): A's 8-s round is too old for B. B must start its own round
    at +13 (not wait until +18 and then check), and still take A's positive result when it comes first.
    (B's policy differs from A's in its cap only, so it keeps its own schedule.)"""
    READY_AT["older"] = ready_at
    DELAY["older"] = 8.0
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    a = make_trigger(sensor_check("older", cls="SlowAsyncSensor", task_id="a"), policy)
    b_policy = BackoffPolicy(initial=10, factor=1, cap=20, jitter="none")
    b = make_trigger(
        sensor_check("older", cls="SlowAsyncSensor", task_id="b"), b_policy, started_at=START + 3
    )
    (a_event, a_at), (b_event, b_at) = await asyncio.gather(
        _event_with_time(a, vclock), _event_with_time(b, vclock)
    )
    assert POKES["older"][:2] == [START + 10, START + 13], b_status_from
    assert b_event["status"] == "success" and b_event["check_index"] == 1
    assert b_at == b_event_at
    assert sharing.registry().groups == {}


async def test_latest_stays_the_freshest_observation_and_rounds_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(sharing, "_clock", lambda: clock[0])
    releases: list[asyncio.Future[Any]] = []

    class Controlled(conditions.SharedCheck):
        concurrency_key = "k"

        async def run(self, context: Any) -> Any:
            release: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            releases.append(release)
            return await release

    group = sharing.CheckGroup("k", Controlled(), None)
    first = asyncio.ensure_future(group.observe(1000.0, 1.0, {}))
    await asyncio.sleep(0)
    clock[0] = 1003.0
    second = asyncio.ensure_future(group.observe(1003.0, 1.0, {}, None, lambda o: o.raw == "yes"))
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(releases) == 2  # the second subscriber did not wait for the older round
    releases[1].set_result("no")
    observation, shared = await second
    assert (observation.raw, observation.observed_at, shared) == ("no", 1003.0, False)
    releases[0].set_result("no")
    observation, shared = await first
    assert (observation.raw, shared) == ("no", False)
    assert group.latest is not None and group.latest.observed_at == 1003.0  # not the older, later answer

    # A terminal answer of an older round completes a subscriber whose own round is still in flight.
    clock[0] = 1010.0
    older = asyncio.ensure_future(group.observe(1010.0, 1.0, {}))
    await asyncio.sleep(0)
    clock[0] = 1013.0
    newer = asyncio.ensure_future(group.observe(1013.0, 1.0, {}, None, lambda o: o.raw == "yes"))
    for _ in range(3):
        await asyncio.sleep(0)
    releases[2].set_result("yes")
    observation, shared = await newer
    assert (observation.raw, observation.observed_at, shared) == ("yes", 1010.0, True)
    assert not releases[3].done()  # its own round keeps running for anyone else; latest will be fresher
    releases[3].set_result("no")
    await older
    for _ in range(3):
        await asyncio.sleep(0)
    assert group.latest is not None and group.latest.observed_at == 1013.0
    assert group._inflight == {}


# --- concurrency bound per connection ---------------------------------------------------------------------------


def test_concurrency_key_uses_a_conn_id_argument_of_a_sensor() -> None:
    base = sensor_check("x")
    assert conditions.concurrency_key(base) == f"sensor:{__name__}.FlagSensor"
    for name in ("conn_id", "aws_conn_id", "http_conn_id"):
        check = {**base, "kwargs": {"name": "x", name: "warehouse"}}
        assert conditions.concurrency_key(check) == "conn_id:warehouse"
        assert conditions.make_shared_check(check).concurrency_key == "conn_id:warehouse"
    assert conditions.concurrency_key({**base, "kwargs": {"conn_id": 3}}) == f"sensor:{__name__}.FlagSensor"
    assert (
        conditions.concurrency_key({**base, "kwargs": {"conn_ids": "a"}}) == f"sensor:{__name__}.FlagSensor"
    )


async def test_hung_pokes_on_one_connection_do_not_block_the_class_on_another(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")

    def conn_check(name: str, conn_id: str) -> dict[str, Any]:
        check = sensor_check(name, cls="ConnSensor")
        check["kwargs"] = {"name": name, "conn_id": conn_id}
        return check

    for i in range(4):  # the default bound (4) of the same class, all hung on conn "stuck"
        DELAY[f"hung{i}"] = 10_000.0
    hung = [
        asyncio.ensure_future(first_event(make_trigger(conn_check(f"hung{i}", "stuck"), policy)))
        for i in range(4)
    ]
    READY_AT["fine"] = START + 15
    payload = await first_event(make_trigger(conn_check("fine", "healthy"), policy, started_at=START + 1))
    assert payload["status"] == "success"
    assert POKES["fine"] == [START + 11, START + 21]  # on its own schedule, not after the hung pokes
    for task in hung:
        task.cancel()
    await asyncio.gather(*hung, return_exceptions=True)


# --- decorrelated schedules off the loop ---------------------------------------------------------------------------


@pytest.mark.parametrize(("jitter", "off_loop"), [("decorrelated", True), ("full", False)])
async def test_decorrelated_schedule_is_computed_off_the_event_loop(
    vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch, jitter: str, off_loop: bool
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
        for _ in range(4):  # one schedule asked again and again: answers from its memo must stay right
            deadline = rng.choice([None, START + rng.uniform(0, 900)])
            after = rng.randrange(0, 12)
            now = START + rng.uniform(-5, 1000)
            sharing._clock = lambda now=now: now  # type: ignore[misc]
            try:
                ours = asyncio.run(schedule.next(after, deadline))
            finally:
                sharing._clock = time.time
            assert ours == policy.next_check(seed, START, now, deadline, after=after)


# --- SQL: one connection lookup ------------------------------------------------------------------------------------


async def test_sql_check_does_not_look_the_connection_up_again_in_the_thread(
    vclock: VirtualClock, sqlite_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.sqlite.hooks.sqlite import SqliteHook

    lookups: list[str] = []

    def get_connection(cls: Any, conn_id: str) -> Any:
        lookups.append(conn_id)
        raise AssertionError("second connection lookup from the worker thread")

    monkeypatch.setattr(SqliteHook, "get_connection", classmethod(get_connection))
    with sqlite3.connect(sqlite_conn) as db:
        db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'ready')")
    payload = await first_event(make_trigger(sql_check(), BackoffPolicy(initial=10)))
    assert payload["status"] == "success", payload["message"]
    assert lookups == []


# --- Airflow 3.3.2 executor race guard --------------------------------------------------------------------------


@pytest.mark.parametrize("delay", [5.0, 0.0])
async def test_event_is_never_sooner_than_the_minimum_delay_after_start(
    vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    monkeypatch.setattr(compat, "TRIGGER_MIN_EVENT_DELAY_SECONDS", delay)
    READY_AT["soon"] = START
    policy = BackoffPolicy(initial=1, factor=1, jitter="none")
    payload, at = await _event_with_time(make_trigger(sensor_check("soon"), policy), vclock)
    assert POKES["soon"] == [START + 1]
    assert (payload["status"], payload["check_index"], payload["waited_seconds"]) == ("success", 1, 1.0)
    assert at == START + max(1.0, delay)
    # A trigger that starts after its deadline answers at once, but not before the guard either.
    vclock.now = START + 4000
    payload, at = await _event_with_time(make_trigger(sensor_check("late"), policy), vclock)
    assert payload["status"] == "timeout"
    assert at == START + 4000 + delay


def test_the_guard_is_five_seconds_on_airflow_3_only() -> None:
    assert (5.0 if compat.AIRFLOW_V_3_0_PLUS else 0.0) == compat.TRIGGER_MIN_EVENT_DELAY_SECONDS


# --- deterministic events -----------------------------------------------------------------------------------------


async def test_event_payload_does_not_depend_on_when_it_is_built(vclock: VirtualClock) -> None:
    policy = BackoffPolicy(initial=10)
    payloads = []
    for restart_at in (START + 4000, START + 5000):
        vclock.now = restart_at
        payloads.append(await first_event(make_trigger(sensor_check("det"), policy, after=3)))
    assert payloads[0] == payloads[1]
    assert payloads[0]["waited_seconds"] == 3600.0


async def test_early_completion_reports_the_observation_time(vclock: VirtualClock) -> None:
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


async def test_stats_counters_and_gauges(vclock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = RecordingStats()
    monkeypatch.setattr(compat, "Stats", stats, raising=False)
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    READY_AT["mx"] = READY_AT["my"] = START + 25
    await asyncio.gather(
        *(first_event(make_trigger(sensor_check("mx", task_id=f"t{i}"), policy)) for i in range(3)),
        first_event(make_trigger(sensor_check("my"), policy)),
    )
    # Checks at +10, +20, +30 for each of the two conditions. x's other two subscribers are due at the same
    # moments (one shared schedule, woken together) and join each of the three checks: 6 saved.
    assert stats.counters == {sharing.METRIC_CHECKS: 6, sharing.METRIC_CHECKS_SAVED: 6}
    assert stats.gauges[sharing.METRIC_GROUPS][:4] == [1, 1, 1, 2]
    assert stats.gauges[sharing.METRIC_SUBSCRIBERS][:4] == [1, 2, 3, 4]
    assert max(stats.gauges[sharing.METRIC_GROUPS]) == 2
    assert stats.gauges[sharing.METRIC_GROUPS][-1] == 0
    assert stats.gauges[sharing.METRIC_SUBSCRIBERS][-1] == 0


def test_subscriber_count_is_o1_with_many_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "Stats", RecordingStats(), raising=False)

    class NoScan(dict):  # type: ignore[type-arg]
        def values(self) -> Any:
            raise AssertionError("the registry scans every group")

    class Keyed(conditions.SharedCheck):
        concurrency_key = "k"

    registry = sharing.SharingRegistry()
    registry.groups = NoScan()
    groups = [registry.join(f"k{i}", Keyed) for i in range(2000)]
    groups.append(registry.join("k0", Keyed))
    assert registry.subscriber_count == 2001 and len(registry.groups) == 2000
    for group in groups:
        group.leave()
    assert registry.subscriber_count == 0 and registry.groups == {}


async def test_a_connections_rate_bucket_is_forgotten_once_idle(vclock: VirtualClock) -> None:
    """A long-running triggerer keeps no token bucket for a connection nobody checks any more."""

    class OnConn(conditions.SharedCheck):
        concurrency_key = "conn:slow_db"

        async def run(self, context: Any) -> Any:
            return None

    loop = asyncio.get_running_loop()
    bucket = sharing.rate_limiter(OnConn.concurrency_key, 0.5)
    assert bucket.reserve() == 0 and bucket.reserve() == pytest.approx(2.0)  # busy for 4 s from now
    sharing.CheckGroup("k", OnConn(), None).close()
    assert OnConn.concurrency_key in sharing._buckets[loop]  # still reserved: kept
    await sharing.sleep(4.5)
    assert loop not in sharing._buckets
