"""Seeded, deadline-aware backoff schedules ("slotted jitter"). Pure Python: imports nothing from Airflow.

Poke mode, reschedule mode and the deferrable trigger all ask this one module *when the next check is
due*, as a pure function of ``(seed, started_at, now, deadline)``. Nothing is carried between calls, so a
rescheduled sensor, a restarted triggerer or another machine computes exactly the same schedule.

Slotted jitter: check ``k`` lives in a fixed slot that ends at ``E_k = splay offset + sum_{j<k} m_j``,
where ``b_j = min(cap, initial * factor**j)`` and ``m_j`` is the mean AWS sleep for the strategy (``none``
``b_j``, ``full`` ``b_j/2``, ``equal`` ``3*b_j/4``). Inside its slot the check is moved *earlier* by a
seeded uniform share of the slot width, so the gap to the previous check has AWS's range (``none``
exactly ``b``, ``full`` ``[0, b]``, ``equal`` ``[b/2, b]``) while any check is computed in O(1) (closed-form
geometric sum, no ``factor**k`` overflow) and is never later than its un-jittered slot end. ``decorrelated``
needs the previous sleep, so it is replayed from the seed (O(n) cold, O(1) amortised via a per-process
memo) -- the only strategy that is not O(1).
"""

from __future__ import annotations

import bisect
import datetime
import hashlib
import json
import math
import numbers
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_smart_ext import units

__all__ = [
    "DEFAULT_BACKOFF_FACTOR",
    "DEFAULT_CAP_SECONDS",
    "DEFAULT_JITTER",
    "DEFAULT_MAX_WAIT_CEILING",
    "DEFAULT_MAX_WAIT_FACTOR",
    "DEFAULT_POKE_INTERVAL",
    "JITTER_STRATEGIES",
    "MAX_DECORRELATED_CHECKS",
    "BackoffPolicy",
    "ScheduledCheck",
    "aligned_start",
    "condition_seed",
    "default_max_wait",
    "replay",
    "seeded_uniform",
    "task_seed",
]

JITTER_STRATEGIES = ("none", "full", "equal", "decorrelated")
DEFAULT_CAP_SECONDS = 86400.0  # used when cap is None, so factor > 1 never grows unbounded
# The defaults of a schedule given as sensor-style arguments (sensors and condition watchers; see
# docs/sensors.md "Defaults and why"). Change them here, in one place.
DEFAULT_POKE_INTERVAL = 60.0  # BaseSensorOperator's own default
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_JITTER = "full"
#: Without ``max_wait``, no interval exceeds ``DEFAULT_MAX_WAIT_FACTOR * poke_interval`` and never one hour
#: (docs/backoff.md "The default cap"): a swapped-in base class keeps detection latency bounded.
DEFAULT_MAX_WAIT_FACTOR = 10.0
DEFAULT_MAX_WAIT_CEILING = 3600.0
# A cold decorrelated replay is O(n); refuse schedules so long that one answer would take minutes.
MAX_DECORRELATED_CHECKS = 10_000_000

# Mean sleep as a share of the base interval b_k, and the slot width (how far a check may move earlier)
# as a share of b_{k-1}.  full: width = m_{k-1} = b/2; equal: width = b/4 (so gaps stay in [b/2, b]).
_MEAN_SHARE = {"none": 1.0, "full": 0.5, "equal": 0.75}
_WIDTH_SHARE = {"none": 0.0, "full": 0.5, "equal": 0.25}
_JITTER_LABEL = {"none": "no jitter", "full": "full jitter", "equal": "equal jitter"}
_POLICY_KEYS = ("initial", "factor", "cap", "jitter", "splay")


def _hash_prefix(seed: str, purpose: str) -> Any:
    return hashlib.blake2b(f"{seed}|{purpose}|".encode(), digest_size=8)


def _uniform_from(prefix: Any, index: int) -> float:
    digest = prefix.copy()
    digest.update(str(index).encode())
    return (int.from_bytes(digest.digest(), "big") >> 11) / 9007199254740992.0  # 53 bits -> [0, 1)


def seeded_uniform(seed: str, index: int, purpose: str) -> float:
    """U(seed, index, purpose) in [0, 1): blake2b-64 of ``f"{seed}|{purpose}|{index}"``, the same everywhere."""
    return _uniform_from(_hash_prefix(seed, purpose), index)


def task_seed(dag_id: str, task_id: str, run_id: str, map_index: int = -1, try_number: int = 1) -> str:
    """Seed from the task identity: every try of every mapped task instance gets its own schedule."""
    identity = json.dumps([dag_id, task_id, run_id, int(map_index), int(try_number)])
    return hashlib.sha256(identity.encode()).hexdigest()


def condition_seed(sharing_key: str) -> str:
    """Seed from *what* is waited for: every wait on one condition gets the same jitter and splay.

    Deferrable sensors use it instead of :func:`task_seed`, so identical waits follow one schedule and a
    shared check serves them all at once (the herd on one condition is a single check anyway).
    """
    return hashlib.sha256(f"condition|{sharing_key}".encode()).hexdigest()


def default_max_wait(poke_interval: float) -> float:
    """The cap on intervals when ``max_wait`` is not given: 10x ``poke_interval``, at most one hour (and
    never below ``poke_interval`` itself)."""
    return max(poke_interval, min(DEFAULT_MAX_WAIT_FACTOR * poke_interval, DEFAULT_MAX_WAIT_CEILING))


def aligned_start(started_at: float, grid: float) -> float:
    """``started_at`` moved back to the start of its ``grid``-second cell of the epoch.

    Waits on one condition that start a few seconds apart then anchor one schedule (no jitter: every cell
    lies on one lattice when ``grid`` is the initial interval). Each check of the schedule moves earlier by
    less than ``grid``; the deadline is not derived from it and does not move.
    """
    if grid <= 0 or not math.isfinite(grid):
        return started_at
    return math.floor(started_at / grid) * grid


def _as_seconds(value: Any) -> float:
    """Seconds from a number or a ``timedelta``; NaN for anything else (no invariant holds for it)."""
    if isinstance(value, datetime.timedelta):
        return units.seconds(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return math.nan
    return float(value)


@dataclass(frozen=True)
class ScheduledCheck:
    index: int  # 0-based check number
    at: float  # absolute epoch seconds
    final: bool  # the last check: at (or clipped to) the deadline; nothing follows it


@dataclass(frozen=True)
class BackoffPolicy:
    """When to check: ``initial`` seconds growing by ``factor`` up to ``cap``, jittered, first check splayed.

    ``initial``, ``cap`` and ``splay`` accept seconds (int/float) or ``datetime.timedelta`` and are stored
    as float seconds. ``cap=None`` means ``max(DEFAULT_CAP_SECONDS, initial)``.
    """

    initial: float
    factor: float = 2.0
    cap: float | None = None
    jitter: str = "full"
    splay: float = 0.0
    # first gap index whose base interval reaches the cap (derived in __post_init__, not a parameter)
    _k_cap: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        # The invariants a schedule cannot be built without, in one message. The parameters' words are
        # wait_model/parameters.py's table: every entry point (the sensor, the watcher, both triggers, the retry
        # policy) checks its arguments there first, named as the user wrote them.
        initial, cap, splay = _as_seconds(self.initial), _as_seconds(self.cap), _as_seconds(self.splay)
        factor = math.nan if isinstance(self.factor, bool) else _as_seconds(self.factor)
        if self.cap is None:  # the default: never below initial
            cap = max(DEFAULT_CAP_SECONDS, initial) if math.isfinite(initial) else DEFAULT_CAP_SECONDS
        invariants = (
            (initial > 0 and math.isfinite(initial), "initial > 0 s"),
            (factor >= 1 and math.isfinite(factor), "factor >= 1"),
            (self.cap is None or (cap >= initial and math.isfinite(cap)), "cap >= initial (or None)"),
            (not (initial > 0 and cap / initial > 1e150), "cap / initial <= 1e150"),
            (self.jitter in JITTER_STRATEGIES, "jitter in " + ", ".join(JITTER_STRATEGIES)),
            (not (self.jitter == "decorrelated" and factor == 1), "factor > 1 with jitter='decorrelated'"),
            (splay >= 0 and math.isfinite(splay), "splay >= 0 s"),
        )
        broken = [invariant for holds, invariant in invariants if not holds]
        if broken:
            raise ValueError(f"{self!r} breaks: {'; '.join(broken)} (seconds: a number or a timedelta)")
        for name, value in (("initial", initial), ("factor", factor), ("cap", cap), ("splay", splay)):
            object.__setattr__(self, name, value)
        # k_cap: first gap index whose base interval reaches the cap (b_k == cap for every k >= k_cap).
        # Found from logs and then corrected exactly, so factor**k is only evaluated for k < k_cap.
        k_cap = 0
        if factor > 1:
            k_cap = max(0, math.ceil(math.log(cap / initial) / math.log(factor)))
            while k_cap > 0 and initial * factor ** (k_cap - 1) >= cap:
                k_cap -= 1
            while initial * factor**k_cap < cap:
                k_cap += 1
        object.__setattr__(self, "_k_cap", k_cap)

    # ---- base intervals and slot ends (closed form, O(1)) ---------------------------------------------
    @property
    def cap_seconds(self) -> float:
        """The effective cap in seconds (never None after validation)."""
        assert self.cap is not None
        return self.cap

    def base_interval(self, k: int) -> float:
        """b_k = min(cap, initial * factor**k) without ever overflowing."""
        if self.factor == 1:
            return self.initial
        if k >= self._k_cap:
            return self.cap_seconds
        return min(self.cap_seconds, self.initial * self.factor**k)

    def _base_sum(self, n: int) -> float:
        """sum_{j<n} b_j: a geometric sum up to k_cap, then linear at the cap."""
        if self.factor == 1:
            return self.initial * n
        k_cap: int = self._k_cap
        growing = min(n, k_cap)
        exponent = growing * math.log(self.factor)
        # factor**n - 1 is exact for round factors (60 x2 -> 420, not 419.99...); expm1 keeps precision when
        # factor**n is close to 1 (factors barely above 1). factor - 1 is exact for factor < 2.
        growth = self.factor**growing - 1 if exponent > 1 else math.expm1(exponent)
        total = self.initial * growth / (self.factor - 1)
        if n > k_cap:
            total += (n - k_cap) * self.cap_seconds
        return total

    def _base_sum_index(self, total: float) -> int:
        """Approximately the smallest n with _base_sum(n) >= total (a starting guess for the search)."""
        if total <= 0:
            return 0
        if self.factor == 1:
            return math.ceil(total / self.initial)
        k_cap: int = self._k_cap
        growing_total = self._base_sum(k_cap)
        if total <= growing_total:
            return math.ceil(math.log1p(total * (self.factor - 1) / self.initial) / math.log(self.factor))
        return k_cap + math.ceil((total - growing_total) / self.cap_seconds)

    def _splay_offset(self, seed: str) -> float:
        return self.splay * seeded_uniform(seed, 0, "splay") if self.splay else 0.0

    def _slot_end(self, seed: str, k: int) -> float:
        return self._splay_offset(seed) + _MEAN_SHARE[self.jitter] * self._base_sum(k)

    # ---- public API --------------------------------------------------------------------------------
    def offset(self, seed: str, index: int) -> float:
        """Seconds after ``started_at`` of check #``index`` (0-based), ignoring any deadline.

        O(1) for none/full/equal at any index; decorrelated replays from the seed (memoised per process).
        Offsets never decrease with the index.
        """
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"index must be an int >= 0; got {index!r}")
        if self.jitter == "decorrelated":
            return self._splay_offset(seed) + _decorrelated_sums(self, seed, index)[index]
        end = self._slot_end(seed, index)
        if index == 0 or self.jitter == "none":
            return end
        width = _WIDTH_SHARE[self.jitter] * self.base_interval(index - 1)
        # max(): exact in theory, it keeps float rounding from ever putting check k before slot k-1's end.
        return max(self._slot_end(seed, index - 1), end - width * seeded_uniform(seed, index, "jitter"))

    def sleep(self, seed: str, index: int) -> float:
        """AWS's jittered sleep before attempt #``index`` (>= 1) over the base ``b = b_{index-1}``, drawn on its
        own: ``none`` b, ``full`` U[0, b], ``equal`` U[b/2, b]; ``decorrelated`` the replayed sleep (up to 3x
        the previous one). Unlike the gaps of :meth:`offset`'s slotted schedule, consecutive sleeps are
        independent, as in AWS's algorithms: task retries use it (each delay is taken from the moment a try
        failed, so no absolute schedule is needed). Within ``[0, cap]`` at any index, no overflow.
        """
        if isinstance(index, bool) or not isinstance(index, int) or index < 1:
            raise ValueError(f"index must be an int >= 1; got {index!r}")
        if self.jitter == "decorrelated":
            sums = _decorrelated_sums(self, seed, index)
            return min(self.cap_seconds, max(0.0, sums[index] - sums[index - 1]))
        base = self.base_interval(index - 1)
        return base * (1.0 - 2 * _WIDTH_SHARE[self.jitter] * seeded_uniform(seed, index, "sleep"))

    def next_check(
        self,
        seed: str,
        started_at: float,
        now: float,
        deadline: float | None,
        after: int | None = None,
        offset_of: Callable[[int], float] | None = None,
    ) -> ScheduledCheck | None:
        """The earliest check with index > ``after`` and time >= ``now``; missed checks are skipped.

        The first check whose time would reach or pass ``deadline`` is placed exactly at the deadline and is
        ``final``; nothing follows it (None). ``now > deadline`` gives None. Times are epoch seconds.
        ``offset_of`` may supply ``offset(seed, k)`` from a caller's memo (a trigger asks for the same few
        offsets at every step; the Waits view shares them between waits on one condition); it is used for
        every offset the search needs and must return exactly what :meth:`offset` returns.
        """
        if not (math.isfinite(started_at) and math.isfinite(now)):
            raise ValueError(f"started_at and now must be finite epoch seconds; got {started_at!r}, {now!r}")
        if deadline is not None:
            if not math.isfinite(deadline):
                raise ValueError(f"deadline must be finite epoch seconds or None; got {deadline!r}")
            if now > deadline:
                return None
        if offset_of is None:

            def offset_of(k: int) -> float:
                return self.offset(seed, k)

        first = 0 if after is None else max(0, after + 1)
        at = started_at + offset_of(first)
        index = first
        if at < now:  # checks were missed (a slow poke, a restart): skip them
            index = self._first_index_at_or_after(seed, started_at, now, first, offset_of)
            at = started_at + offset_of(index)
        if deadline is None or at < deadline:
            return ScheduledCheck(index, at, False)
        # This check reaches the deadline: it is the final one unless an earlier check already did.
        if index > 0 and started_at + offset_of(index - 1) >= deadline:
            return None
        return ScheduledCheck(index, deadline, True)

    def describe(self) -> str:
        """Short human text, e.g. ``60s x2 up to 30m, full jitter, splay 1m``."""
        if self.jitter == "decorrelated":
            text = (
                f"{units.duration_text(self.initial)} decorrelated (AWS: up to 3x the previous sleep) up to "
            )
            text += units.duration_text(self.cap_seconds)
        elif self.factor == 1:
            text = f"every {units.duration_text(self.initial)}, {_JITTER_LABEL[self.jitter]}"
        else:
            text = f"{units.duration_text(self.initial)} x{self.factor:g} up to {units.duration_text(self.cap_seconds)}, "
            text += _JITTER_LABEL[self.jitter]
        return text + (f", splay {units.duration_text(self.splay)}" if self.splay else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; ``BackoffPolicy.from_dict(p.to_dict()) == p``."""
        return {key: getattr(self, key) for key in _POLICY_KEYS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackoffPolicy:
        unknown = sorted(set(data) - set(_POLICY_KEYS))
        if unknown:
            raise ValueError(
                f"unknown backoff policy key(s) {unknown}; accepted keys: {', '.join(_POLICY_KEYS)}"
            )
        if "initial" not in data:
            raise ValueError("backoff policy dict needs 'initial' (seconds > 0)")
        return cls(**data)

    # ---- inverse (next_check) ----------------------------------------------------------------------
    def _first_index_at_or_after(
        self, seed: str, started_at: float, target: float, first: int, offset_of: Callable[[int], float]
    ) -> int:
        """Smallest index >= first whose absolute time is >= target (time is non-decreasing in the index)."""

        def reached(k: int) -> bool:
            return started_at + offset_of(k) >= target

        if reached(first):
            return first
        if self.jitter == "decorrelated":
            return _decorrelated_first_index(self, seed, started_at, target, first)
        # Slot k ends at E_k and check k+1 is never before E_k, so the answer is the inverse of the closed-form
        # E (+0 or +1). Floats can shift it a little, so confirm by galloping + bisection from that guess.
        mean_sum = (target - started_at - self._splay_offset(seed)) / _MEAN_SHARE[self.jitter]
        return _gallop(reached, first, max(first + 1, self._base_sum_index(mean_sum)))


def _gallop(reached: Callable[[int], bool], low: int, guess: int) -> int:
    """Smallest k > low with reached(k), given reached(low) is False and reached is monotone."""
    step = 1
    if reached(guess):
        high = guess
        while high - step > low and reached(high - step):
            high -= step
            step *= 2
        low = max(low, high - step)
    else:
        low = guess
        while not reached(low + step):
            low += step
            step *= 2
        high = low + step
    while high - low > 1:
        middle = (low + high) // 2
        if reached(middle):
            high = middle
        else:
            low = middle
    return high


# ---- decorrelated jitter: sequential by nature, replayed from the seed --------------------------------
class _DecorrelatedRun:
    """Cumulative sleeps sums[k] = sum_{j<k} sleep_j of one (policy, seed), extended on demand."""

    def __init__(self, policy: BackoffPolicy, seed: str) -> None:
        self.policy = policy
        self.prefix = f"{seed}|decorrelated|".encode()
        self.sums = array("d", [0.0])
        self.previous = policy.initial

    def extend_to(self, index: int) -> None:
        if index >= MAX_DECORRELATED_CHECKS:
            raise ValueError(
                f"decorrelated jitter is replayed from the seed and supports up to {MAX_DECORRELATED_CHECKS} "
                f"checks; check #{index} was requested -- use jitter 'full' or 'equal' (O(1)) instead"
            )
        initial, cap = self.policy.initial, self.policy.cap_seconds
        sums, previous, total, prefix = self.sums, self.previous, self.sums[-1], self.prefix
        blake2b, from_bytes, append = hashlib.blake2b, int.from_bytes, sums.append
        for j in range(len(sums) - 1, index):
            # seeded_uniform(seed, j, "decorrelated"), inlined: this loop is the O(n) cold replay.
            uniform = (from_bytes(blake2b(prefix + b"%d" % j, digest_size=8).digest(), "big") >> 11) / 2.0**53
            # AWS: sleep = min(cap, uniform(base, 3 * previous sleep)), previous starting at base.
            previous = min(cap, initial + uniform * (3 * previous - initial))
            total += previous
            append(total)
        self.previous = previous


_DECORRELATED_MEMO: OrderedDict[tuple[BackoffPolicy, str], _DecorrelatedRun] = OrderedDict()
_DECORRELATED_MEMO_SIZE = 1024  # distinct (policy, seed) schedules kept per process (LRU)


def decorrelated_memo_size() -> int:
    """Decorrelated schedules kept (at most ``_DECORRELATED_MEMO_SIZE``; triggers/registries.py reports it)."""
    return len(_DECORRELATED_MEMO)


_DECORRELATED_LOCK = threading.Lock()


def _decorrelated_run(policy: BackoffPolicy, seed: str, index: int) -> _DecorrelatedRun:
    with _DECORRELATED_LOCK:
        key = (policy, seed)
        run = _DECORRELATED_MEMO.get(key)
        if run is None:
            run = _DECORRELATED_MEMO[key] = _DecorrelatedRun(policy, seed)
            while len(_DECORRELATED_MEMO) > _DECORRELATED_MEMO_SIZE:
                _DECORRELATED_MEMO.popitem(last=False)
        _DECORRELATED_MEMO.move_to_end(key)
        if len(run.sums) <= index:
            run.extend_to(index)
        return run


def _decorrelated_sums(policy: BackoffPolicy, seed: str, index: int) -> array[float]:
    return _decorrelated_run(policy, seed, index).sums


def _decorrelated_first_index(
    policy: BackoffPolicy, seed: str, started_at: float, target: float, first: int
) -> int:
    splay_offset = policy._splay_offset(seed)

    def time_of(total: float) -> float:  # the same float expression as started_at + offset(k)
        return started_at + (splay_offset + total)

    run = _decorrelated_run(policy, seed, first)
    # Every sleep is <= cap, so from the last known check at least (target - t)/cap more checks are needed.
    while time_of(run.sums[-1]) < target:
        missing = math.ceil((target - time_of(run.sums[-1])) / policy.cap_seconds)
        run = _decorrelated_run(policy, seed, len(run.sums) - 1 + max(1, missing))
    return bisect.bisect_left(run.sums, target, lo=first, key=time_of)


def replay(
    policy: BackoffPolicy, seed: str, started_at: float, until: float, deadline: float | None
) -> list[ScheduledCheck]:
    """Every check from ``started_at`` up to ``until`` (inclusive), deadline applied -- for docs/tests/bench."""
    checks: list[ScheduledCheck] = []
    now = started_at if deadline is None else min(started_at, deadline)
    check = policy.next_check(seed, started_at, now, deadline)
    while check is not None and check.at <= until:
        checks.append(check)
        if check.final:
            break
        check = policy.next_check(seed, started_at, now, deadline, after=check.index)
    return checks
