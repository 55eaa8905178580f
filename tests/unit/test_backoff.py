"""Unit tests of the pure backoff module (no Airflow needed)."""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_smart_ext import backoff
from airflow_smart_ext.backoff import (
    DEFAULT_CAP_SECONDS,
    JITTER_STRATEGIES,
    BackoffPolicy,
    ScheduledCheck,
    replay,
    seeded_uniform,
    task_seed,
)

SEED = task_seed("example_dag", "wait_for_file", "manual__2024-01-01T00:00:00+00:00")
SLOTTED = ("none", "full", "equal")


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


# ---- an independent, naive reference: loops and hashlib, no closed forms --------------------------------
def reference_offsets(policy: BackoffPolicy, seed: str, count: int) -> list[float]:
    def uniform(k: int, purpose: str) -> float:
        digest = hashlib.blake2b(f"{seed}|{purpose}|{k}".encode(), digest_size=8).digest()
        return (int.from_bytes(digest, "big") >> 11) / 2**53

    cap = policy.cap_seconds
    base = [min(cap, policy.initial * policy.factor**j) for j in range(count)]
    start = policy.splay * uniform(0, "splay")
    if policy.jitter == "decorrelated":
        offsets, sleep = [start], policy.initial
        for j in range(count - 1):
            sleep = min(cap, policy.initial + uniform(j, "decorrelated") * (3 * sleep - policy.initial))
            offsets.append(offsets[-1] + sleep)
        return offsets
    mean = {"none": 1.0, "full": 0.5, "equal": 0.75}[policy.jitter]
    width = {"none": 0.0, "full": 0.5, "equal": 0.25}[policy.jitter]
    ends = [start]
    for j in range(count - 1):
        ends.append(ends[-1] + mean * base[j])
    return [ends[0]] + [ends[k] - width * base[k - 1] * uniform(k, "jitter") for k in range(1, count)]


# ---- exact values ---------------------------------------------------------------------------------
def test_none_exact_values_by_hand():
    policy = BackoffPolicy(initial=60, factor=2, cap=1800, jitter="none")
    # 60, 120, 240, 480, 960 then capped at 1800 -> cumulative sums
    expected = [0, 60, 180, 420, 900, 1860, 3660, 5460, 7260, 9060]
    assert [policy.offset(SEED, k) for k in range(10)] == expected


def test_none_with_splay_shifts_everything_by_the_seeded_splay():
    policy = BackoffPolicy(initial=60, factor=2, cap=1800, jitter="none", splay=60)
    first = policy.offset(SEED, 0)
    assert first == 60 * seeded_uniform(SEED, 0, "splay")
    assert 0 <= first < 60
    assert [policy.offset(SEED, k) - first for k in range(7)] == [0, 60, 180, 420, 900, 1860, 3660]


def test_fixed_interval_factor_one():
    policy = BackoffPolicy(initial=30, factor=1, jitter="none")
    assert [policy.offset(SEED, k) for k in range(5)] == [0, 30, 60, 90, 120]
    assert policy.offset(SEED, 10**12) == 30 * 10**12


# Frozen from this module for SEED (task_seed("example_dag", "wait_for_file", "manual__2024-01-01...")),
# initial=60, factor=2, cap=1800, splay=0; cross-checked against reference_offsets() above. A change here
# means every deployed schedule changes: only update deliberately.
FROZEN = {
    "full": [0.0, 21.8167, 86.0477, 200.5011, 434.128, 718.4887],
    "equal": [0.0, 40.9083, 133.0238, 310.2505, 667.064, 1289.2444],
    "decorrelated": [0.0, 144.7165, 326.3724, 541.0664, 1038.4028, 1260.6044],
}


@pytest.mark.parametrize("jitter", sorted(FROZEN))
def test_jittered_frozen_values(jitter):
    policy = BackoffPolicy(initial=60, factor=2, cap=1800, jitter=jitter)
    got = [round(policy.offset(SEED, k), 4) for k in range(6)]
    assert got == FROZEN[jitter]


@pytest.mark.parametrize("jitter", JITTER_STRATEGIES)
@pytest.mark.parametrize(
    ("initial", "factor", "cap", "splay"),
    [(60, 2, 1800, 0), (5, 1.5, 300, 17.5), (0.25, 3, 1000, 2), (10, 1.01, 20, 0), (1, 2, 1, 5)],
)
def test_matches_naive_reference(jitter, initial, factor, cap, splay):
    policy = BackoffPolicy(initial=initial, factor=factor, cap=cap, jitter=jitter, splay=splay)
    expected = reference_offsets(policy, SEED, 200)
    got = [policy.offset(SEED, k) for k in range(200)]
    assert all(close(a, b) for a, b in zip(got, expected, strict=True)), (got[:5], expected[:5])


# ---- gap bounds and ordering (property tests) -----------------------------------------------------
policies = st.builds(
    BackoffPolicy,
    initial=st.floats(1e-3, 1e4),
    factor=st.floats(1.0, 10.0),
    cap=st.none() | st.floats(1e4, 1e6),
    jitter=st.sampled_from(SLOTTED),
    splay=st.floats(0, 1e3),
)


@settings(max_examples=300, deadline=None)
@given(policy=policies, seed=st.text(max_size=20), k=st.integers(1, 10**12))
def test_gap_bounds_and_slot_end(policy, seed, k):
    gap = policy.offset(seed, k) - policy.offset(seed, k - 1)
    base = policy.base_interval(k - 1)
    slack = 1e-9 * max(1.0, policy.offset(seed, k))
    low = {"none": base, "full": 0.0, "equal": base / 2}[policy.jitter]
    assert low - slack <= gap <= base + slack
    assert base <= policy.cap_seconds
    # jitter only ever moves a check earlier than the un-jittered slot end E_k
    assert policy.offset(seed, k) <= policy._slot_end(seed, k)


@settings(max_examples=100, deadline=None)
@given(
    initial=st.floats(1e-2, 100),
    cap_ratio=st.floats(1, 100),
    seed=st.text(max_size=10),
    splay=st.floats(0, 100),
)
def test_decorrelated_gap_bounds(initial, cap_ratio, seed, splay):
    policy = BackoffPolicy(
        initial=initial, factor=2, cap=initial * cap_ratio, jitter="decorrelated", splay=splay
    )
    offsets = [policy.offset(seed, k) for k in range(60)]
    assert 0 <= offsets[0] <= splay
    previous = initial
    for k in range(1, 60):
        gap = offsets[k] - offsets[k - 1]
        slack = 1e-9 * max(1.0, offsets[k])
        assert initial - slack <= gap <= min(policy.cap_seconds, 3 * previous) + slack
        previous = gap


@pytest.mark.parametrize(("jitter", "share"), [("full", 0.5), ("equal", 0.75)])
def test_mean_gap_at_the_cap_is_the_aws_mean(jitter, share):
    policy = BackoffPolicy(initial=1, factor=2, cap=100, jitter=jitter)
    start = 1000  # far beyond the growth phase (k_cap = 7)
    gaps = [policy.offset(SEED, k) - policy.offset(SEED, k - 1) for k in range(start, start + 20000)]
    assert abs(sum(gaps) / len(gaps) - share * 100) < 1.0
    assert min(gaps) >= (0 if jitter == "full" else 50) and max(gaps) <= 100


@settings(max_examples=200, deadline=None)
@given(policy=policies, seed=st.text(max_size=10), k=st.integers(0, 10**9))
def test_offsets_never_decrease(policy, seed, k):
    assert policy.offset(seed, k) <= policy.offset(seed, k + 1)


# ---- next_check ----------------------------------------------------------------------------------
NONE_60 = BackoffPolicy(initial=60, factor=2, cap=1800, jitter="none")
T0 = 1_700_000_000.0


def test_next_check_from_start_and_missed_checks_are_skipped():
    assert NONE_60.next_check(SEED, T0, T0, None) == ScheduledCheck(0, T0, False)
    assert NONE_60.next_check(SEED, T0, T0 + 1, None) == ScheduledCheck(1, T0 + 60, False)
    # 1000 s late: checks 1..4 (60, 180, 420, 900) are skipped, not burst
    assert NONE_60.next_check(SEED, T0, T0 + 1000, None, after=0) == ScheduledCheck(5, T0 + 1860, False)
    # a check exactly at now is still due
    assert NONE_60.next_check(SEED, T0, T0 + 420, None, after=2) == ScheduledCheck(3, T0 + 420, False)


def test_after_moves_forward_even_when_now_is_early():
    assert NONE_60.next_check(SEED, T0, T0, None, after=3) == ScheduledCheck(4, T0 + 900, False)
    assert NONE_60.next_check(SEED, T0, T0 - 50, None) == ScheduledCheck(0, T0, False)


def test_deadline_clips_final_check_and_nothing_after():
    deadline = T0 + 1000
    assert NONE_60.next_check(SEED, T0, T0 + 901, deadline, after=4) == ScheduledCheck(5, deadline, True)
    assert NONE_60.next_check(SEED, T0, T0 + 500, deadline, after=3) == ScheduledCheck(4, T0 + 900, False)
    # the final check was done: nothing else, even though now is still before the deadline
    assert NONE_60.next_check(SEED, T0, T0 + 990, deadline, after=5) is None
    assert NONE_60.next_check(SEED, T0, deadline, deadline, after=4) == ScheduledCheck(5, deadline, True)
    assert NONE_60.next_check(SEED, T0, deadline + 0.001, deadline) is None


def test_check_exactly_at_deadline_is_the_final_one():
    deadline = T0 + 900  # check #4 lands exactly on it
    assert NONE_60.next_check(SEED, T0, T0 + 500, deadline) == ScheduledCheck(4, deadline, True)
    assert NONE_60.next_check(SEED, T0, T0 + 500, deadline, after=4) is None


def test_replay_lists_the_schedule_with_the_final_check():
    checks = replay(NONE_60, SEED, T0, T0 + 10**6, T0 + 1000)
    assert [(c.index, c.at - T0, c.final) for c in checks] == [
        (0, 0, False), (1, 60, False), (2, 180, False), (3, 420, False), (4, 900, False), (5, 1000, True)
    ]  # fmt: skip
    assert [c.index for c in replay(NONE_60, SEED, T0, T0 + 400, None)] == [0, 1, 2]


@settings(max_examples=300, deadline=None)
@given(
    policy=policies | st.builds(BackoffPolicy, initial=st.floats(1, 100), jitter=st.just("decorrelated")),
    seed=st.text(max_size=10),
    elapsed=st.floats(0, 1e7),
    after=st.none() | st.integers(-1, 3000),
    deadline_after=st.none() | st.floats(0, 1e7),
)
def test_next_check_is_the_earliest_due_check(policy, seed, elapsed, after, deadline_after):
    now = T0 + elapsed
    deadline = None if deadline_after is None else T0 + deadline_after
    check = policy.next_check(seed, T0, now, deadline, after=after)
    first = 0 if after is None else max(0, after + 1)
    if deadline is not None and now > deadline:
        assert check is None
        return
    final_index = None
    if deadline is not None:
        final_index = next(  # found by walking offsets only from an index known to be before the deadline
            k for k in _walk_from(policy, seed, T0, deadline) if T0 + policy.offset(seed, k) >= deadline
        )
    if check is None:
        assert final_index is not None and first > final_index
        return
    assert check.index >= first
    assert check.at >= now
    if check.index > first:  # the previous index was missed: it lies before now
        assert T0 + policy.offset(seed, check.index - 1) < now
    if final_index is None:
        assert check.at == T0 + policy.offset(seed, check.index) and not check.final
    else:
        assert check.index <= final_index
        assert check.final == (check.index == final_index)
        assert check.at == (deadline if check.final else T0 + policy.offset(seed, check.index))
        assert check.at <= deadline


def _walk_from(policy, seed, started_at, target):
    """Indices starting a bit before target, found by bisection on offset() alone."""
    low, high = 0, 1
    while started_at + policy.offset(seed, high) < target:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if started_at + policy.offset(seed, middle) < target:
            low = middle
        else:
            high = middle
    yield from range(low, high + 1)


# ---- overflow / huge indices --------------------------------------------------------------------
def test_huge_indices_exact_for_none():
    policy = BackoffPolicy(initial=1, factor=2, cap=3600, jitter="none")
    # 2**12 = 4096 >= 3600 > 2**11: gaps 1..2048 sum to 4095, then 3600 each
    for k in (10**6, 10**9, 10**12):
        assert policy.offset(SEED, k) == 4095 + (k - 12) * 3600


@pytest.mark.parametrize("jitter", JITTER_STRATEGIES[:3])
@pytest.mark.parametrize(
    ("initial", "factor", "cap"),
    [(60, 2, 3600), (1e-3, 1.0000001, 1e6), (1e-3, 1000, 1e6), (5, 1, 5), (0.5, 1.5, None)],
)
@pytest.mark.parametrize("index", [1026, 10**6, 10**9, 10**12])
def test_huge_indices_round_trip(jitter, initial, factor, cap, index):
    policy = BackoffPolicy(initial=initial, factor=factor, cap=cap, jitter=jitter, splay=7)
    offset = policy.offset(SEED, index)
    assert math.isfinite(offset) and offset > 0
    check = policy.next_check(SEED, T0, T0 + offset, None)
    assert check is not None and check.at == T0 + offset and check.index <= index
    later = policy.next_check(SEED, T0, T0 + offset, None, after=index)
    assert later is not None and later.index == index + 1 and later.at >= check.at
    # with the deadline right there, the check at it is the final one
    final = policy.next_check(SEED, T0, T0 + offset, T0 + offset, after=index - 1)
    assert final is not None and final.final and final.at == T0 + offset and final.index <= index


def test_tiny_factor_growth_phase_matches_reference_sum():
    policy = BackoffPolicy(initial=1e-3, factor=1.0000001, cap=1e6, jitter="none")
    k = 10**6  # still growing: 1e-3 * 1.0000001**1e6 ~ 1.1e-3
    expected = 1e-3 * ((1.0000001**k) - 1) / (1.0000001 - 1)
    assert close(policy.offset(SEED, k), expected, rel=1e-6)
    assert policy.base_interval(10**12) == 1e6


def test_decorrelated_cold_replay_of_a_million_checks():
    policy = BackoffPolicy(initial=1, factor=2, cap=60, jitter="decorrelated")
    seed = "cold-replay-" + os.urandom(4).hex()  # not in the per-process memo yet
    offset = policy.offset(seed, 10**6)
    assert math.isfinite(offset)
    assert 10**6 * 1 <= offset <= 10**6 * 60
    run = backoff._DECORRELATED_MEMO[(policy, seed)]
    assert len(run.sums) == 10**6 + 1  # memoised: later answers for this schedule reuse it
    check = policy.next_check(seed, T0, T0 + offset, None, after=10**6 - 1)
    assert check == ScheduledCheck(10**6, T0 + offset, False)
    assert backoff._DECORRELATED_MEMO[(policy, seed)] is run


def test_decorrelated_refuses_absurdly_long_replays():
    policy = BackoffPolicy(initial=1, factor=2, cap=1, jitter="decorrelated")
    with pytest.raises(ValueError, match="decorrelated jitter is replayed"):
        policy.offset(SEED, backoff.MAX_DECORRELATED_CHECKS)


# ---- determinism, seeds, splay ------------------------------------------------------------------
def test_same_schedule_in_another_process():
    code = (
        "import json; from airflow_smart_ext.backoff import BackoffPolicy, task_seed, JITTER_STRATEGIES\n"
        "seed = task_seed('d', 't', 'r', 3, 2)\n"
        "out = {j: [BackoffPolicy(60, 2, 1800, j, 30).offset(seed, k) for k in (0, 1, 2, 50, 10**5)]\n"
        "       for j in JITTER_STRATEGIES}\n"
        "out['seed'] = seed\n"
        "print(json.dumps(out))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")  # a different str-hash salt must not matter
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    other = json.loads(result.stdout)
    seed = task_seed("d", "t", "r", 3, 2)
    assert other.pop("seed") == seed
    here = {
        j: [BackoffPolicy(60, 2, 1800, j, 30).offset(seed, k) for k in (0, 1, 2, 50, 10**5)] for j in other
    }
    assert other == here


def test_task_seed_depends_on_every_part_of_the_identity():
    base = task_seed("d", "t", "r", -1, 1)
    assert len(base) == 64 and int(base, 16) >= 0
    assert base == task_seed("d", "t", "r")
    variants = {
        task_seed("d2", "t", "r"),
        task_seed("d", "t2", "r"),
        task_seed("d", "t", "r2"),
        task_seed("d", "t", "r", 0),
        task_seed("d", "t", "r", -1, 2),
        task_seed("d|t", "", "r"),
    }
    assert base not in variants and len(variants) == 6


def test_seeded_uniform_range_and_independence_of_purpose():
    values = [seeded_uniform(SEED, k, "jitter") for k in range(1000)]
    assert all(0 <= v < 1 for v in values)
    assert seeded_uniform(SEED, 1, "jitter") != seeded_uniform(SEED, 1, "splay")


def test_splay_spreads_check_zero_uniformly():
    policy = BackoffPolicy(initial=60, splay=300)
    firsts = [policy.offset(task_seed("dag", f"sensor_{i}", "run"), 0) for i in range(1000)]
    assert all(0 <= f < 300 for f in firsts)
    bins = [0] * 10
    for f in firsts:
        bins[int(f // 30)] += 1
    # each tenth of the splay expects 100 of 1000 checks; a herd would pile into one bin
    assert all(60 <= b <= 140 for b in bins), bins
    chi_square = sum((b - 100) ** 2 / 100 for b in bins)
    assert chi_square < 27.9  # p = 0.001 for 9 degrees of freedom
    assert len({round(f, 6) for f in firsts}) == 1000


# ---- validation, conversion, serialisation --------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": 0}, r"breaks: initial > 0 s \(seconds: a number or a timedelta\)$"),
        ({"initial": -5}, r"breaks: initial > 0 s "),
        ({"initial": math.inf}, r"breaks: initial > 0 s "),
        ({"initial": math.nan}, r"breaks: initial > 0 s "),
        ({"initial": "60"}, r"^BackoffPolicy\(initial='60'.* breaks: initial > 0 s "),
        ({"initial": True}, r"breaks: initial > 0 s "),
        ({"initial": 60, "factor": 0.5}, r"breaks: factor >= 1 "),
        ({"initial": 60, "factor": math.inf}, r"breaks: factor >= 1 "),
        ({"initial": 60, "factor": "2"}, r"breaks: factor >= 1 "),
        ({"initial": 60, "cap": 30}, r"cap=30.* breaks: cap >= initial \(or None\) "),
        ({"initial": 60, "cap": 0}, r"breaks: cap >= initial "),
        ({"initial": 60, "cap": math.inf}, r"breaks: cap >= initial "),
        (
            {"initial": 60, "jitter": "random"},
            r"jitter='random'.* breaks: jitter in none, full, equal, decorrelated",
        ),
        ({"initial": 60, "jitter": "Full"}, r"breaks: jitter in "),
        ({"initial": 60, "splay": -1}, r"breaks: splay >= 0 s "),
        ({"initial": 60, "splay": math.nan}, r"breaks: splay >= 0 s "),
        (
            {"initial": 60, "factor": 1, "jitter": "decorrelated"},
            r"breaks: factor > 1 with jitter='decorrelated'",
        ),
        ({"initial": 1e-320, "cap": 1e10}, r"breaks: cap / initial <= 1e150"),
        ({"initial": 0, "factor": 0, "splay": -1}, r"breaks: initial > 0 s; factor >= 1; splay >= 0 s "),
    ],
)
def test_validation_names_every_invariant_broken(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BackoffPolicy(**kwargs)


def test_numbers_and_timedeltas_are_normalised_to_float_seconds():
    policy = BackoffPolicy(
        initial=datetime.timedelta(minutes=1), factor=3, cap=datetime.timedelta(hours=1),
        splay=datetime.timedelta(seconds=90),
    )  # fmt: skip
    assert (policy.initial, policy.factor, policy.cap, policy.splay) == (60.0, 3.0, 3600.0, 90.0)
    assert all(isinstance(v, float) for v in (policy.initial, policy.factor, policy.cap, policy.splay))
    assert policy == BackoffPolicy(60.0, 3.0, 3600.0, "full", 90.0)


def test_default_cap():
    assert BackoffPolicy(60).cap == DEFAULT_CAP_SECONDS
    assert BackoffPolicy(60) == BackoffPolicy(60, cap=DEFAULT_CAP_SECONDS)
    assert BackoffPolicy(2 * 86400).cap == 2 * 86400  # the default never undercuts the initial interval


@pytest.mark.parametrize("jitter", JITTER_STRATEGIES)
def test_dict_round_trip_through_json(jitter):
    policy = BackoffPolicy(
        initial=datetime.timedelta(seconds=45), factor=1.5, cap=600, jitter=jitter, splay=10
    )
    data = json.loads(json.dumps(policy.to_dict()))
    assert data == {"initial": 45.0, "factor": 1.5, "cap": 600.0, "jitter": jitter, "splay": 10.0}
    assert BackoffPolicy.from_dict(data) == policy
    assert hash(BackoffPolicy.from_dict(data)) == hash(policy)


def test_from_dict_rejects_unknown_keys_and_validates():
    with pytest.raises(
        ValueError, match=r"unknown backoff policy key\(s\) \['max_wait'\]; accepted keys: initial"
    ):
        BackoffPolicy.from_dict({"initial": 60, "max_wait": 600})
    with pytest.raises(ValueError, match="needs 'initial'"):
        BackoffPolicy.from_dict({"factor": 2})
    with pytest.raises(ValueError, match="breaks: jitter in none, full"):
        BackoffPolicy.from_dict({"initial": 60, "jitter": "nope"})


def test_offset_and_next_check_reject_bad_arguments():
    with pytest.raises(ValueError, match="index must be an int >= 0"):
        NONE_60.offset(SEED, -1)
    with pytest.raises(ValueError, match="index must be an int >= 0"):
        NONE_60.offset(SEED, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="started_at and now must be finite"):
        NONE_60.next_check(SEED, T0, math.nan, None)
    with pytest.raises(ValueError, match="deadline must be finite"):
        NONE_60.next_check(SEED, T0, T0, math.inf)


@pytest.mark.parametrize(
    ("policy", "text"),
    [
        (BackoffPolicy(60, 2, 1800, "full", 60), "1m x2 up to 30m, full jitter, splay 1m"),
        (BackoffPolicy(60, 2, 1800, "none"), "1m x2 up to 30m, no jitter"),
        (BackoffPolicy(30, 1, jitter="equal"), "every 30s, equal jitter"),
        (BackoffPolicy(0.5, 1.5, 90), "0.5s x1.5 up to 90s, full jitter"),
        (
            BackoffPolicy(5, jitter="decorrelated"),
            "5s decorrelated (AWS: up to 3x the previous sleep) up to 1d",
        ),
    ],
)
def test_describe(policy, text):
    assert policy.describe() == text
