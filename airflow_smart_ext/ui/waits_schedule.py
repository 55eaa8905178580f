"""What one trigger row of ours says: its condition (key, words) and its schedule at a moment (pure).

Both trigger paths are read into one shape (:class:`WaitFacts`); the condition is described by its check type
(one source of truth) and the schedule is ``BackoffPolicy.next_check`` itself. Memoised per report: waits on
one condition share the check spec objects (``waits_source`` caches them per stored kwargs), the policy, the
seed and the offsets, so the cost grows with the number of distinct conditions, not of waits.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck, aligned_start, condition_seed
from airflow_smart_ext.conditions.spec import check_type, place_template_fields, sharing_key

if TYPE_CHECKING:
    from airflow_smart_ext.ui.waits_model import LiveWait

REDACTED = "***"
#: A decorrelated schedule is replayed from its seed (O(checks so far)); one report replays at most this many
#: checks in all. A wait beyond the budget shows no next check and a cheap lower bound of its checks made.
DECORRELATED_REPLAY_BUDGET = 100_000
_SEALED = "__smart_ext_sealed__"  # sealing.SEALED (sealing imports Airflow; an envelope is plain JSON)
# Groups are named by a salted hash: the sharing key holds the opened (secret) values and must not be
# guessable from the page. Stable within one server process.
_GROUP_SALT = secrets.token_bytes(16)
_RUN_DATE_KEYS = ("ds", "ts", "logical_date", "data_interval_start", "data_interval_end")


@functools.cache
def trigger_paths() -> dict[str, str]:
    """Our triggers' classpaths -> the path a wait takes (imported when first used: they need Airflow)."""
    from airflow_smart_ext.triggers.backoff import CLASSPATH as WORKER_FIRST
    from airflow_smart_ext.triggers.start import CLASSPATH as ZERO_WORKER

    return {WORKER_FIRST: "worker-first", ZERO_WORKER: "zero-worker"}


def redact_sealed(node: Any) -> Any:
    """``node`` with every sealed envelope as "***" (a sealed value is a secret, opened or not)."""
    if type(node) is dict:
        if _SEALED in node:
            return REDACTED
        return {key: redact_sealed(value) for key, value in node.items()}
    if type(node) is list:
        return [redact_sealed(value) for value in node]
    return node


@dataclass(frozen=True)
class WaitFacts:
    """What a trigger row says about its schedule, the same over both paths."""

    path: str  # "worker-first" | "zero-worker"
    policy: Mapping[str, Any]  # BackoffPolicy.to_dict()
    seed: str | None  # None: the condition's seed (zero-worker)
    anchor: float | None  # the schedule's anchor; None: the aligned start of the try (zero-worker)
    started_at: float
    deadline: float | None
    after: int  # the last check already made (its index)
    share: bool
    rate_limit: float | None


def read_wait(wait: LiveWait, path: str) -> WaitFacts:
    """The schedule facts of one wait; KeyError/TypeError/ValueError when its kwargs are not what we store."""
    kwargs = wait.kwargs
    if path == "worker-first":
        return WaitFacts(
            path,
            kwargs["policy"],
            kwargs["seed"],
            float(kwargs["started_at"]),
            wait.ti_start if wait.ti_start is not None else float(kwargs["started_at"]),
            None if kwargs["deadline"] is None else float(kwargs["deadline"]),
            int(kwargs.get("after", 0)),
            bool(kwargs.get("share", True)),
            kwargs.get("rate_limit"),
        )
    start = kwargs["start"]
    # The try's start as Airflow recorded it (the trigger anchors on it too); without one: the row's creation.
    started = wait.ti_start if wait.ti_start is not None else wait.trigger_created
    if started is None:
        raise ValueError("neither the task's start_date nor the trigger's created_date is known")
    deadline = started + float(start["timeout"])
    if start.get("execution_timeout") is not None:
        deadline = min(deadline, started + float(start["execution_timeout"]))
    return WaitFacts(
        path,
        start["policy"],
        None,
        None,
        started,
        deadline,
        0,  # check #0 runs at once when the trigger starts; the schedule goes on after it
        bool(start.get("share", True)),
        start.get("rate_limit"),
    )


def check_specs(wait: LiveWait, path: str) -> tuple[Mapping[str, Any], Mapping[str, Any], bool]:
    """(the check spec with opened values, the same with every secret "***", whether the server knows it
    exactly: False when a template field holds Jinja markup, which the triggerer renders -- the sharing key,
    hence the seed, the jitter and the group, then come from a value the server cannot know)."""
    kwargs = wait.kwargs
    shown = wait.shown_kwargs if wait.shown_kwargs is not None else redact_sealed(kwargs)
    if path == "worker-first":
        return kwargs["check"], shown["check"], True
    from airflow_smart_ext.sensors.shipping import has_template  # the sensors' own rule (imports Airflow)

    start = kwargs["start"]
    # unrendered here: the triggerer renders the fields; the server shows the values as stored
    check = place_template_fields(start["check"], start["fields"], kwargs)
    shown_check = place_template_fields(shown["start"]["check"], start["fields"], shown)
    if check["type"] == "sensor":  # the run facts the triggerer ships (compat.trigger_run_context)
        context = {
            "dag_id": wait.dag_id,
            "task_id": wait.task_id,
            "run_id": wait.run_id,
            "map_index": wait.map_index,
            "try_number": wait.try_number,
            **dict.fromkeys(_RUN_DATE_KEYS),
            **(wait.run_dates or {}),
        }
        check["context"], shown_check["context"] = context, dict(context)
    return check, shown_check, not any(has_template(kwargs[name]) for name in start["fields"])


@dataclass(frozen=True)
class Condition:
    """What a wait waits for, as the page shows it."""

    key: str  # the sharing key (opened values: never shown)
    seed: str  # condition_seed(key)
    check_type: str
    conn_id: str | None
    sensor_class: str | None
    words: str  # from the redacted spec
    group: str  # salted hash of the key
    exact: bool  # see check_specs


class Conditions:
    """The ``Condition`` of each wait, memoised by the identity of the objects it is computed from
    (``waits_source`` hands out one object for equal kwarg values; ``shown_kwargs`` None: no memo hit)."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, ...], tuple[tuple[Any, ...], Condition]] = {}

    def of(self, wait: LiveWait, path: str) -> Condition:
        kwargs, shown = wait.kwargs, wait.shown_kwargs or {}
        if path == "worker-first":  # the stored check spec (and its shown copy) alone
            parts: tuple[Any, ...] = (kwargs["check"], shown.get("check"))
        else:  # the start spec, the template fields and (a sensor's poke) the run's dates
            fields = kwargs["start"]["fields"]
            parts = (kwargs["start"], shown.get("start"), wait.run_dates)
            parts += tuple(kwargs[name] for name in fields) + tuple(shown.get(name) for name in fields)
        key = tuple(map(id, parts))
        cached = self._memo.get(key)
        if cached is not None and all(old is new for old, new in zip(cached[0], parts, strict=True)):
            return cached[1]
        check, shown_check, exact = check_specs(wait, path)
        kind = check_type(check)
        shared = sharing_key(check)
        condition = Condition(
            shared,
            condition_seed(shared),
            kind.name,
            kind.conn_id(shown_check),  # shown values only: a secret connection id stays "***"
            kind.sensor_class(shown_check),
            kind.describe(shown_check),
            hashlib.blake2b(shared.encode(), key=_GROUP_SALT, digest_size=8).hexdigest(),
            exact,
        )
        self._memo[key] = (parts, condition)  # the objects are kept, so their ids stay theirs
        return condition


class Schedules:
    """One report's schedule arithmetic at ``now``, memoised: waits on one condition share policy, seed and
    offsets (``next_check`` takes them through its ``offset_of``)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self._policies: dict[tuple[Any, ...], BackoffPolicy] = {}
        self._offset_of: dict[tuple[BackoffPolicy, str], Callable[[int], float]] = {}
        self._free_next: dict[tuple[Any, ...], ScheduledCheck] = {}
        self._replayed: dict[tuple[BackoffPolicy, str], int] = {}
        self._budget = DECORRELATED_REPLAY_BUDGET
        self._iso: dict[float, str] = {}

    def policy(self, data: Mapping[str, Any]) -> BackoffPolicy:
        key = tuple(sorted(data.items()))
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = BackoffPolicy.from_dict(data)
        return policy

    def iso(self, epoch: float | None) -> str | None:
        if epoch is None:
            return None
        text = self._iso.get(epoch)
        if text is None:
            moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
            text = self._iso[epoch] = moment.isoformat(timespec="milliseconds")
        return text

    def offset_of(self, policy: BackoffPolicy, seed: str) -> Callable[[int], float]:
        """``policy.offset(seed, k)``, memoised per (policy, seed): shared by every anchor and deadline."""
        offset_of = self._offset_of.get((policy, seed))
        if offset_of is None:
            offsets: dict[int, float] = {}

            def offset_of(index: int) -> float:
                value = offsets.get(index)
                if value is None:
                    value = offsets[index] = policy.offset(seed, index)
                return value

            self._offset_of[(policy, seed)] = offset_of
        return offset_of

    def _affordable(self, policy: BackoffPolicy, seed: str, anchor: float, until: float) -> bool:
        """Whether replaying ``seed``'s decorrelated schedule up to ``until`` fits the report's budget (every
        sleep is >= ``initial``, so the index at ``until`` is at most ``(until - anchor) / initial + 1``)."""
        if policy.jitter != "decorrelated":
            return True
        needed = int(max(0.0, until - anchor) / policy.initial) + 2
        done = self._replayed.get((policy, seed), 0)
        if needed <= done:
            return True
        if needed - done > self._budget:
            return False
        self._budget -= needed - done
        self._replayed[(policy, seed)] = needed
        return True

    def _next_check(
        self, policy: BackoffPolicy, seed: str, anchor: float, deadline: float | None, after: int, now: float
    ) -> ScheduledCheck | None:
        """``policy.next_check``; the deadline only matters near it, so the deadline-free answer (the same
        for every wait on the condition and anchor) is reused while it lies before the deadline."""
        offset_of = self.offset_of(policy, seed)
        key = (policy, seed, anchor, after, now)
        free = self._free_next.get(key)
        if free is None:
            found = policy.next_check(seed, anchor, now, None, after=after, offset_of=offset_of)
            assert found is not None  # without a deadline there is always a next check
            free = self._free_next[key] = found
        if deadline is None or (now <= deadline and free.at < deadline):
            return free
        return policy.next_check(seed, anchor, now, deadline, after=after, offset_of=offset_of)

    def plan(self, facts: WaitFacts, seed: str) -> tuple[ScheduledCheck | None, int, float]:
        """(the next check, the scheduled checks due so far, checks per hour at the current interval)."""
        now, policy = self.now, self.policy(facts.policy)
        seed = facts.seed if facts.seed is not None else seed
        anchor = facts.anchor if facts.anchor is not None else aligned_start(facts.started_at, policy.initial)
        if not self._affordable(policy, seed, anchor, now):  # the replay ends at now (+ one step)
            # Over the replay budget: every decorrelated sleep is <= cap, so at least this many were due.
            return None, int(max(0.0, now - anchor) / policy.cap_seconds), 0.0
        offset_of = self.offset_of(policy, seed)
        scheduled = self._next_check(policy, seed, anchor, facts.deadline, facts.after, now)
        rate = 0.0
        if scheduled is not None:
            checks = scheduled.index
            low = max(0, scheduled.index - 1)  # the current gap, smoothed over two gaps (jitter)
            rate = 7200.0 / max(offset_of(low + 2) - offset_of(low), 1e-3)
        else:  # past the deadline: every check up to the final one (at the deadline) was due
            final = self._next_check(policy, seed, anchor, None, facts.after, facts.deadline or now)
            checks = final.index + 1 if final is not None else 0
        if facts.path == "zero-worker":  # check #0 at the start of the try, then the slots after it
            first = 1
            while first < checks and anchor + offset_of(first) < facts.started_at:
                first += 1
            checks = 1 + max(0, checks - first)
        return scheduled, checks, rate
