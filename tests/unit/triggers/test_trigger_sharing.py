"""BackoffTrigger sharing: identical waits share one schedule; a due subscriber never waits for an older round."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import conditions
from airflow_smart_ext.backoff import BackoffPolicy, aligned_start, condition_seed
from airflow_smart_ext.triggers import BackoffTrigger, check_groups
from tests.unit.clock import START, FakeClock
from tests.unit.triggers.helpers import (
    BLOCK_SECONDS,
    DELAY,
    POKES,
    READY_AT,
    _event_with_time,
    first_event,
    make_trigger,
    poked,
    sensor_check,
)

# --- sharing ------------------------------------------------------------------------------------------------


async def test_twenty_identical_subscribers_cost_one_check_per_cycle(clock: FakeClock) -> None:
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
    assert check_groups.registry().groups == {}


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


async def test_sensor_deferred_waits_share_every_check_with_default_jitter(clock: FakeClock) -> None:
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
    clock: FakeClock,
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
async def test_identical_waits_follow_one_schedule_whatever_their_start(clock: FakeClock, case: str) -> None:
    policy, offsets, ready = ONE_SCHEDULE_CASES[case]
    line = aligned_start(START, policy.initial) + policy.initial
    triggers = as_deferred_by_sensors("one", policy, [line + offset for offset in offsets])
    for trigger in triggers:
        trigger.deadline = line + 10_000
    READY_AT["one"] = line + ready

    async def started_later(trigger: BackoffTrigger, at: float) -> dict[str, Any]:
        await seam.asleep(at - seam.now())
        return await first_event(trigger)

    events = await asyncio.gather(
        *(started_later(t, line + o) for t, o in zip(triggers, offsets, strict=True))
    )
    assert {e["status"] for e in events} == {"success"}
    first = triggers[0]
    slots = {first.started_at + policy.offset(first.seed, k) for k in range(200)}
    assert set(POKES["one"]) <= slots  # every check on the first wait's schedule: no second timeline
    assert len(POKES["one"]) == len(set(POKES["one"]))  # and one check per slot, however many wait


async def test_a_joined_wait_keeps_its_own_deadline(clock: FakeClock) -> None:
    """A wait joining a group whose checks are 10 minutes apart still ends at its own deadline."""
    policy = BackoffPolicy(initial=30, factor=2, cap=600, jitter="none")
    old, new = as_deferred_by_sensors("late", policy, [START, START + 3600])
    old.deadline, new.deadline = START + 10_000, START + 3600 + 50

    async def started_later(trigger: BackoffTrigger, at: float) -> dict[str, Any]:
        await seam.asleep(at - seam.now())
        return await first_event(trigger)

    old_run = asyncio.ensure_future(first_event(old))
    new_event = await started_later(new, START + 3600)
    assert new_event["status"] == "timeout"
    # its final check at its own deadline, not at the group's next slot; nothing on its own schedule (+3610)
    assert clock.now == pytest.approx(START + 3650)
    assert [at for at in POKES["late"] if at > START + 3600] == [START + 3650]
    old_run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await old_run


async def test_a_wait_without_check_zero_checks_at_once_when_it_joins(clock: FakeClock) -> None:
    """A deferral that left check #0 to the triggerer (``after=-1``: rate-limited) joining a group whose
    checks are 10 minutes apart is checked at once, not at the group's next slot."""
    policy = BackoffPolicy(initial=30, factor=2, cap=600, jitter="none")
    old, new = as_deferred_by_sensors("fresh", policy, [START, START + 3600])
    old.deadline, new.deadline, new.after = START + 10_000, START + 10_000, -1
    READY_AT["fresh"] = START + 3601
    old_run = asyncio.ensure_future(first_event(old))
    await seam.asleep(3605)
    event = await first_event(new)
    assert event["status"] == "success"
    assert [at for at in POKES["fresh"] if at > START + 3600] == [START + 3605]  # check #0 now, not +3910
    await old_run


async def test_different_conditions_do_not_share(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=30, factor=1, jitter="none")
    READY_AT["x"] = READY_AT["y"] = START + 65
    await asyncio.gather(
        first_event(make_trigger(sensor_check("x"), policy)),
        first_event(make_trigger(sensor_check("y"), policy)),
    )
    assert len(POKES["x"]) == len(POKES["y"]) == 3


async def test_same_sensor_for_different_dates_does_not_share_but_other_tasks_same_date_do(
    clock: FakeClock,
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


async def test_share_false_opts_out(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=30, factor=1, jitter="none")
    READY_AT["solo"] = START + 65
    await asyncio.gather(
        *(first_event(make_trigger(sensor_check("solo"), policy, share=False)) for _ in range(3))
    )
    assert len(POKES["solo"]) == 9


async def test_no_subscriber_is_checked_later_than_its_schedule(clock: FakeClock) -> None:
    """Jittered subscribers: each is served by a check started in [due - window, due]."""
    policy = BackoffPolicy(initial=20, factor=1.5, cap=100, jitter="full")
    seen: dict[str, list[tuple[float, float]]] = defaultdict(list)
    original_observe = check_groups.CheckGroup.observe

    async def spy(
        self: check_groups.CheckGroup, due_at: float, window: float, context: Any, *args: Any
    ) -> Any:
        observation, shared = await original_observe(self, due_at, window, context, *args)
        seen[context["task_id"]].append((due_at, observation.observed_at))
        return observation, shared

    check_groups.CheckGroup.observe = spy  # type: ignore[method-assign]
    try:
        triggers = [
            make_trigger(sensor_check("jit", task_id=f"t{i}"), policy, seed=f"s{i}", deadline=START + 600)
            for i in range(8)
        ]
        events = await asyncio.gather(*(first_event(t) for t in triggers))
    finally:
        check_groups.CheckGroup.observe = original_observe  # type: ignore[method-assign]
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

    group = check_groups.CheckGroup("k", Counting(), None)
    stale = check_groups.Observation(time.time() - 100, "stale")
    finished: asyncio.Future[check_groups.Observation] = asyncio.get_running_loop().create_future()
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

    monkeypatch.setattr(check_groups.asyncio, "shield", counting_shield)
    observation, shared = await group.observe(time.time(), 5.0, {})
    assert (observation.raw, shared, Counting.runs) == ("fresh", False, 1)


async def test_positive_result_completes_every_subscriber_immediately(clock: FakeClock) -> None:
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
    assert clock.now == START + 50
    assert events[1]["check_index"] == 1  # completed while waiting for its check #1 (due at +500)


async def test_cancelling_one_subscriber_does_not_affect_the_others(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    READY_AT["c"] = START + 45
    BLOCK_SECONDS["c"] = 0.05  # a round is in flight while we cancel its initiator
    tasks = [
        asyncio.ensure_future(first_event(make_trigger(sensor_check("c", task_id=f"t{i}"), policy)))
        for i in range(3)
    ]
    await poked("c")
    tasks[0].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert [r["status"] for r in results[1:]] == ["success", "success"]  # type: ignore[index]
    assert len(POKES["c"]) == 5  # +10 .. +40 not ready, +50 ready: one check per cycle for three
    assert check_groups.registry().groups == {}


async def test_last_subscriber_out_tears_the_group_down(clock: FakeClock) -> None:
    policy = BackoffPolicy(initial=10, factor=1, jitter="none")
    task = asyncio.ensure_future(first_event(make_trigger(sensor_check("gone"), policy)))
    await poked("gone")
    registry = check_groups.registry()
    assert registry.subscriber_count == 1 and len(registry.groups) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert registry.groups == {}


async def test_cleanup_and_on_kill_are_idempotent(clock: FakeClock) -> None:
    trigger = make_trigger(sensor_check("k"), BackoffPolicy(initial=10))
    agen = trigger.run()
    task = asyncio.ensure_future(agen.__anext__())
    await poked("k")
    await trigger.on_kill()
    await trigger.on_kill()
    await trigger.cleanup()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await trigger.cleanup()
    assert check_groups.registry().groups == {}


@pytest.mark.parametrize(
    ("ready_at", "b_event_at", "b_status_from"),
    [
        (START + 12, START + 21, "own round"),  # A's round (+10) is negative; B's own round (+13) positive
        (START + 5, START + 18, "A's round"),  # A's positive result (+18) completes B during its own round
    ],
)
async def test_due_subscriber_starts_its_own_round_while_an_older_round_is_in_flight(
    clock: FakeClock, ready_at: float, b_event_at: float, b_status_from: str
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
        _event_with_time(a, clock), _event_with_time(b, clock)
    )
    assert POKES["older"][:2] == [START + 10, START + 13], b_status_from
    assert b_event["status"] == "success" and b_event["check_index"] == 1
    assert b_at == b_event_at
    assert check_groups.registry().groups == {}


async def test_latest_stays_the_freshest_observation_and_rounds_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(seam, "now", lambda: clock[0])
    releases: list[asyncio.Future[Any]] = []

    class Controlled(conditions.SharedCheck):
        concurrency_key = "k"

        async def run(self, context: Any) -> Any:
            release: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            releases.append(release)
            return await release

    group = check_groups.CheckGroup("k", Controlled(), None)
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


async def test_a_late_check_serves_one_of_a_subscribers_checks_not_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy loop started check #0's round late, inside check #1's window: check #1 gets a check of its
    own (reusing #0's round would count one check, and its error, twice: CI, 5 pokes for 4 checks). Another
    subscriber may still share that round."""
    clock = [1009.6]  # check #0 was due at 1000; the loop ran its round 9.6 s late
    monkeypatch.setattr(seam, "now", lambda: clock[0])
    runs: list[float] = []

    class Counting(conditions.SharedCheck):
        concurrency_key = "k"

        async def run(self, context: Any) -> Any:
            runs.append(clock[0])
            return "no"

    group = check_groups.CheckGroup("k", Counting(), None)
    mine, other = group.subscribe(), group.subscribe()
    first = await group.wait(mine, 1000.0, 0.5, {}, lambda raw: conditions.Outcome("negative"))
    clock[0] = 1010.0  # check #1 due at 1010, window 0.5: the 1009.6 round lies inside it
    second = await group.wait(mine, 1010.0, 0.5, {}, lambda raw: conditions.Outcome("negative"))
    shared = await group.wait(other, 1010.0, 0.5, {}, lambda raw: conditions.Outcome("negative"))
    assert runs == [1009.6, 1010.0]
    assert (first.shared, second.shared, shared.shared) == (False, False, True)
    # The group's rule as a watcher calls it (no subscription: it passes the observation that served its
    # previous check); equal start times, as after a clock step, do not matter.
    clock[0] = 1020.0
    latest, _ = await group.observe(1020.0, 0.5, {})
    again, reused = await group.observe(1020.2, 0.5, {}, served=latest)
    assert (again is latest, reused, again.observed_at, len(runs)) == (False, False, 1020.0, 4)
