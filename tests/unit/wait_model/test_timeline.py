"""wait_model/timeline.py, the one timeline of a try: the answers every driver asks for (first check, interval before
check k, how a wait that ran out of checks ends, Airflow's backstop, the offsets memo). The next check and the
checks made are proven against the triggers and the view in test_timeline_agreement.py."""

from __future__ import annotations

import pytest

from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck
from airflow_smart_ext.wait_model import timeline

POLICY = BackoffPolicy(initial=10, factor=2, cap=80, jitter="none", splay=0)
START = 1_000_000.0


def test_first_check_is_the_splayed_start_never_after_the_deadline() -> None:
    splayed = BackoffPolicy(initial=10, factor=2, cap=80, jitter="none", splay=30)
    line = timeline.Timeline(splayed, "seed", START, START + 1000)
    splay = splayed.offset("seed", 0)
    assert 0 < splay < 30 and line.splay() == splay
    assert line.first_check_at() == START + splay
    assert timeline.Timeline(splayed, "seed", START, START + splay / 2).first_check_at() == START + splay / 2
    assert timeline.Timeline(splayed, "seed", START, None).first_check_at() == START + splay


def test_interval_before_check_k_is_the_gap_to_check_k_minus_1_and_one_poke_interval_for_check_0() -> None:
    line = timeline.Timeline(POLICY, "seed", START, None)
    checks = [line.next_check(START, k - 1) for k in range(5)]
    assert [c.at - START for c in checks if c] == [0, 10, 30, 70, 150]
    assert [line.interval_before(c) for c in checks if c] == [10, 10, 20, 40, 80]
    # A final check placed at the deadline: the gap from the check before it.
    final = timeline.Timeline(POLICY, "seed", START, START + 50).next_check(START + 31, 2)
    assert final == ScheduledCheck(3, START + 50, True)
    assert line.interval_before(final) == 20
    # The watcher's schedule answers with the same rule.
    poll = timeline.PollSchedule(POLICY, "seed", START)
    first = poll.next_check(START)
    assert poll.interval_before(first) == 10


@pytest.mark.parametrize(
    ("timeout", "execution", "ends_by", "schedule"),
    [(100, None, "timeout", 100), (100, 40, "execution_timeout", 40), (100, 100, "timeout", 100)],
)
def test_the_earlier_deadline_ends_the_schedule_and_says_how_the_wait_ends(
    timeout: float, execution: float | None, ends_by: str, schedule: float
) -> None:
    ends = timeline.deadlines(START, timeout, execution)
    assert (ends.ends_by, ends.schedule) == (ends_by, START + schedule)


def test_the_backstop_is_the_time_left_plus_the_grace_capped_where_the_scheduler_caps_it() -> None:
    grace = timeline.DEFERRAL_GRACE_SECONDS
    no_execution = timeline.deadlines(START, 100, None)
    assert no_execution.backstop(START + 30) == 70 + grace
    assert no_execution.backstop(START + 30, capped_by_execution=True) == 70 + grace
    assert no_execution.backstop(START + 500) == grace  # past the deadline: the grace alone
    execution_first = timeline.deadlines(START, 100, 40)
    assert execution_first.backstop(START) == 40 + grace  # a worker's deferral keeps its grace
    assert execution_first.backstop(START, capped_by_execution=True) == 40  # the scheduler's cap
    execution_later = timeline.deadlines(START, 100, 120)
    assert execution_later.backstop(START, capped_by_execution=True) == 120  # 100 + grace, capped at 120


def test_a_sensor_try_runs_to_its_earlier_deadline_from_its_start_or_its_grid_slot() -> None:
    policy = BackoffPolicy(initial=60, factor=2, cap=480, jitter="none", splay=0)
    started_at = 6_000_045.0  # 45 s into a 60 s cell of the grid
    ends = timeline.deadlines(started_at, 600, 300)
    own = timeline.SensorTry.from_start(policy, "seed", started_at, ends)
    on_grid = timeline.SensorTry.from_start(policy, "seed", started_at, ends, on_grid=True)
    assert (own.line.anchor, on_grid.line.anchor) == (started_at, started_at - 45)
    for one_try in (own, on_grid):
        assert one_try.deadlines is ends
        assert (one_try.line.deadline, one_try.line.ends_by) == (started_at + 300, timeline.EXECUTION_TIMEOUT)
        assert (one_try.line.policy, one_try.line.seed) == (policy, "seed")


def test_offsets_are_the_policys_and_a_bounded_memo_forgets() -> None:
    jittered = BackoffPolicy(initial=10, factor=2, cap=80, jitter="full", splay=5)
    offsets = timeline.Offsets(jittered, "seed", keep=2)
    assert [offsets(k) for k in range(6)] == [jittered.offset("seed", k) for k in range(6)]
    assert len(offsets._memo) <= 3
    unbounded = timeline.Offsets(jittered, "seed")
    for k in range(50):
        unbounded(k)
    assert len(unbounded._memo) == 50


# ------------------------------------------------------------------ which check says the wait is late
def made_checks(line: timeline.Timeline, lateness: float = 0.0) -> list[tuple[int, float]]:
    """(index, time made) of every check a try makes when each runs ``lateness`` s after it is due (a late
    check skips those due meanwhile, as every mode does)."""
    made, scheduled = [], line.next_check(line.anchor, -1)
    while scheduled is not None:
        now = scheduled.at + lateness
        made.append((scheduled.index, now))
        scheduled = line.next_check(now, scheduled.index)
    return made


def tellers(
    line: timeline.Timeline, due_at: float, lateness: float = 0.0, *, retry: bool = False
) -> list[int]:
    made = made_checks(line, lateness)
    return [
        index
        for position, (index, now) in enumerate(made)
        if line.tells_late(index, made[position - 1][0] if position else None, due_at, now, retry=retry)
    ]


@pytest.mark.parametrize("lateness", [0.0, 3.0, 25.0, 100.0])
@pytest.mark.parametrize("due_offset", [-5.0, 0.0, 0.1, 9.9, 10.0, 29.0, 69.0, 70.0, 333.0, 999.0, 1000.0])
def test_one_check_of_a_try_says_it_is_late_the_first_one_due_at_or_after_the_due_time(
    lateness: float, due_offset: float
) -> None:
    line = timeline.Timeline(POLICY, "seed", START, START + 1000)
    due_at = START + due_offset
    told = tellers(line, due_at, lateness)
    made = dict(made_checks(line, lateness))
    if not any(line.scheduled_at(i) >= due_at for i in made):  # checks so late the try ran out before it
        assert told == [] and lateness > 0
        return
    assert len(told) == 1, told
    index = told[0]
    assert made[index] >= due_at and line.scheduled_at(index) >= min(due_at, START + 1000) - 1e-9
    earlier = [i for i in made if i < index]
    assert all(line.scheduled_at(i) < due_at for i in earlier)  # none due at or after it came before


def test_a_wait_that_ends_before_its_due_time_never_says_it_is_late() -> None:
    line = timeline.Timeline(POLICY, "seed", START, START + 1000)
    assert tellers(line, START + 1000.5) == []


def test_a_retry_that_starts_after_the_due_time_does_not_say_it_again() -> None:
    line = timeline.Timeline(POLICY, "seed", START, START + 1000)
    assert tellers(line, START - 60, retry=False) == [
        0
    ]  # the first try started late: its first check says it
    assert tellers(line, START - 60, retry=True) == []  # a retry: the try before it was late already
    assert tellers(line, START + 15, retry=True) == [2]  # a retry the due time falls in says it, once
