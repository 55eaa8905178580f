"""What one trigger row of ours says: its condition (key, words) and its schedule at a moment (pure).

Both trigger paths are read into one shape (:class:`WaitFacts`); the condition is the one the trigger checks
(``wait.condition``), described by its check type, and the schedule is the wait's ``wait.timeline``. Memoised per report: waits on
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
from typing import Any

from airflow_smart_ext import units
from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck
from airflow_smart_ext.conditions.spec import check_type, sharing_key
from airflow_smart_ext.ui.serving import Triggerer
from airflow_smart_ext.wait_model import deferral_paths, late_told, timeline
from airflow_smart_ext.wait_model.condition import TemplateVariables, render_from_run, zero_worker_check
from airflow_smart_ext.wait_model.parameters import has_template
from airflow_smart_ext.wait_model.sharing import wait_seed

REDACTED = "***"
#: A decorrelated schedule is replayed from its seed (O(checks so far)); one report replays at most this many
#: checks in all. A wait beyond the budget shows no next check and a cheap lower bound of its checks made.
DECORRELATED_REPLAY_BUDGET = 100_000
_SEALED = (
    "__smart_ext_sealed__"  # secret_kwargs.SEALED (that module imports Airflow; an envelope is plain JSON)
)
# Groups are named by a salted hash: the sharing key holds the opened (secret) values and must not be
# guessable from the page. Stable within one server process.
_GROUP_SALT = secrets.token_bytes(16)
_RUN_DATE_KEYS = ("ds", "ts", "logical_date", "data_interval_start", "data_interval_end")


def trigger_paths() -> dict[str, str]:
    """Our triggers' classpaths (earlier releases' too) -> the path a wait takes."""
    return deferral_paths.PATH_OF_CLASSPATH


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
class LiveWait:
    """One deferred task instance of ours and its trigger row (kwargs with sealed envelopes opened)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    classpath: str
    kwargs: Mapping[str, Any]
    ti_start: float | None
    trigger_created: float | None
    #: ``kwargs`` as they may be shown: every secret "***" (``waits_source`` sets it). None: ``kwargs`` hold
    #: no secret but sealed envelopes (shown as "***").
    shown_kwargs: Mapping[str, Any] | None = None
    #: The run's ``ds``/``ts``/``logical_date``/``data_interval_*`` as the triggerer ships them (ISO strings):
    #: a zero-worker sensor check's sharing key (hence its seed) depends on them.
    run_dates: Mapping[str, str | None] | None = None
    trigger_id: int | None = None
    #: when the scheduler times the run out (``wait.timeline.run_deadline``; None: no ``dagrun_timeout``)
    run_deadline: float | None = None
    #: the triggerer job holding the row (None: no triggerer holds it). Waits share within one process.
    triggerer_id: int | None = None
    #: that job's row (None: no triggerer holds it, or its job row is gone)
    holder: Triggerer | None = None
    #: the row's trigger queue (3.2+) and team (3.3+ multi-team): which triggerers may take it
    trigger_queue: str | None = None
    trigger_team: str | None = None
    #: its last-check record (``wait.last_check.read_record``: an XCom the triggerer writes; None: none)
    last_check: Mapping[str, Any] | None = None
    #: the run's ``run_after`` (epoch seconds; 3.x), which a due time counts from when the run has no logical date
    run_after: float | None = None
    #: a zero-worker retry's: whether its task state store was read (3.3+), and its late record (None: none
    #: written; ``late_told.NOT_READ``: not given): what its trigger leaves to the worker its late event resumes
    store_read: bool = False
    late_record: Any = None


@dataclass(frozen=True)
class WaitFacts:
    """What a trigger row says about its schedule, the same over both paths (``wait.timeline``'s inputs)."""

    path: str  # "worker-first" | "zero-worker"
    policy: Mapping[str, Any]  # BackoffPolicy.to_dict()
    seed: str | None  # None: the condition's seed (zero-worker)
    anchor: float
    started_at: float  # the start of the try
    deadline: float | None  # when the schedule stops (the earlier of timeout and execution_timeout)
    after: int  # the last check already made when the trigger began (its index; -1: none)
    first_run_at: float  # when the trigger began: the row's creation (a served row is picked up at once)
    share: bool
    rate_limit: float | None
    #: what sets ``deadline``: "timeout", "execution_timeout", or (a worker-first row stores only the earlier)
    #: "timeout or execution_timeout"
    deadline_by: str = "timeout"
    #: when its data is due (``due=``; None: no due time) and whether the try already said it is late
    due_at: float | None = None
    late_told: bool | None = False  # None: not known (a record the task state store could not give)


_POLICIES: dict[tuple[Any, ...], BackoffPolicy] = {}


def _policy(data: Mapping[str, Any]) -> BackoffPolicy:
    """``BackoffPolicy.from_dict``, memoised by typed value: a zero-worker row needs its policy for the anchor,
    and validating it anew for each of 10,000 waits of a few tasks cost a tenth of a request."""
    try:
        key = tuple(sorted((name, type(value), value) for name, value in data.items()))
        policy = _POLICIES.get(key)
    except TypeError:  # an unhashable value: not a policy we store (from_dict says why)
        return BackoffPolicy.from_dict(data)
    if policy is None:
        if len(_POLICIES) >= 1024:
            _POLICIES.clear()
        policy = _POLICIES[key] = BackoffPolicy.from_dict(data)
    return policy


def read_wait(wait: LiveWait, path: str) -> WaitFacts:
    """The schedule facts of one wait; KeyError/TypeError/ValueError when its kwargs are not what we store."""
    kwargs = wait.kwargs
    if path == "worker-first":
        try_start = wait.ti_start if wait.ti_start is not None else float(kwargs["started_at"])
        return WaitFacts(
            path,
            kwargs["policy"],
            kwargs["seed"],
            float(kwargs["started_at"]),
            try_start,
            None if kwargs["deadline"] is None else float(kwargs["deadline"]),
            int(kwargs.get("after", 0)),
            wait.trigger_created if wait.trigger_created is not None else try_start,
            bool(kwargs.get("share", True)),
            kwargs.get("rate_limit"),
            "timeout or execution_timeout",
            None if kwargs.get("due_at") is None else float(kwargs["due_at"]),
            bool(kwargs.get("late_told", False)),
        )
    start = kwargs["start"]
    # The try's start as Airflow recorded it (the trigger anchors on it too); without one: the row's creation.
    started = wait.ti_start if wait.ti_start is not None else wait.trigger_created
    if started is None:
        raise ValueError("neither the task's start_date nor the trigger's created_date is known")
    policy = _policy(start["policy"])
    ends = timeline.deadlines(started, float(start["timeout"]), start.get("execution_timeout"))
    return WaitFacts(
        path,
        start["policy"],
        None,
        timeline.anchor(started, policy),
        started,
        ends.schedule,
        -1,  # check #0 is the trigger's (timeline.first_check)
        max(started, wait.trigger_created if wait.trigger_created is not None else started),
        bool(start.get("share", True)),
        start.get("rate_limit"),
        "execution_timeout" if ends.execution_first else "timeout",
        due_at := _zero_worker_due_at(start.get("due"), wait, started),
        _zero_worker_told(wait, started, due_at),
    )


def _zero_worker_told(wait: LiveWait, started: float, due_at: float | None) -> bool | None:
    """Whether a zero-worker try's late alert is said: as its task state store's record says (3.3+: an earlier
    try's, read by the worker its late event resumes; None: not known); before 3.3, as its trigger takes it: a
    retry that started after the due time has nothing to say (its first try said it)."""
    if due_at is None:
        return False
    if wait.store_read:
        told = late_told.state_of(wait.late_record, units.iso(due_at), wait.try_number)
        return None if told is None else told == late_told.TOLD
    return timeline.retried_after_due(wait.try_number > 1, started, due_at)


def _zero_worker_due_at(due: Any, wait: LiveWait, started: float) -> float | None:
    """A zero-worker wait's due time, as its trigger computes it (``triggers/zero_worker.py``): the rule
    in the start plan, on the run's instants; None: no due time (or one that cannot be computed)."""
    if not due:
        return None
    from airflow_smart_ext.timetables.due import DueTime  # only for a wait with a due time

    instants: dict[str, Any] = {
        name: datetime.datetime.fromisoformat(value)
        for name, value in (wait.run_dates or {}).items()
        if name in ("logical_date", "data_interval_start", "data_interval_end") and value
    }
    if wait.run_after is not None:
        instants["run_after"] = units.utc(wait.run_after)
    try:
        return DueTime.from_dict(due).due_epoch(instants, started)
    except Exception:  # the trigger logs it and runs without one: so does the view
        return None


def server_variable(key: str) -> str | None:
    """A Variable as this server reads it (its secrets backends, then the metadata DB); None: there is none."""
    from airflow.models.variable import Variable

    return Variable.get_variable_from_secrets(key=key)


def check_specs(
    wait: LiveWait, path: str, variables: TemplateVariables | None = None
) -> tuple[Mapping[str, Any], Mapping[str, Any], bool]:
    """(the check spec with opened values, the same with every secret "***", whether the server knows it
    exactly). A zero-worker wait's template fields are rendered from the run's dates and ``variables`` as its
    trigger renders them (``wait.condition``); one that needs more than those stays unrendered: its sharing
    key, hence its seed, jitter and group, then come from a value only the triggerer knows (not exact). The
    rendered values only key the group: the page shows the fields as stored."""
    kwargs = wait.kwargs
    shown = wait.shown_kwargs if wait.shown_kwargs is not None else redact_sealed(kwargs)
    if path == "worker-first":
        return kwargs["check"], shown["check"], True
    start = kwargs["start"]
    run_facts = {
        "dag_id": wait.dag_id,
        "task_id": wait.task_id,
        "run_id": wait.run_id,
        "map_index": wait.map_index,
        "try_number": wait.try_number,
        **dict.fromkeys(_RUN_DATE_KEYS),
        **(wait.run_dates or {}),
    }
    values = {name: kwargs[name] for name in start["fields"]}
    rendered = render_from_run(values, run_facts, variables)
    check = zero_worker_check(start, rendered if rendered is not None else values, run_facts)
    # shown as stored (the page shows what the DAG says; a rendered secret would need masking again)
    shown_values = {name: shown[name] for name in start["fields"]}
    shown_check = zero_worker_check(shown["start"], shown_values, run_facts)
    return check, shown_check, rendered is not None


@dataclass(frozen=True)
class Condition:
    """What a wait waits for, as the page shows it."""

    key: str  # the sharing key (opened values: never shown)
    seed: str  # wait_seed(check): the seed of a zero-worker wait
    check_type: str
    conn_id: str | None
    sensor_class: str | None
    words: str  # from the redacted spec
    group: str  # salted hash of the key
    exact: bool  # see check_specs


class Conditions:
    """The ``Condition`` of each wait, memoised by the identity of the objects it is computed from
    (``waits_source`` hands out one object for equal kwarg values; ``shown_kwargs`` None: no memo hit)."""

    def __init__(self, read_variable: Callable[[str], str | None] = server_variable) -> None:
        self._memo: dict[tuple[Any, ...], tuple[tuple[Any, ...], Condition]] = {}
        # one read per Variable per report, whatever the number of waits whose templates name it
        self._variables = TemplateVariables(functools.cache(read_variable))

    def of(self, wait: LiveWait, path: str) -> Condition:
        kwargs, shown = wait.kwargs, wait.shown_kwargs or {}
        if path == "worker-first":  # the stored check spec (and its shown copy) alone
            parts: tuple[Any, ...] = (kwargs["check"], shown.get("check"))
        else:  # the start spec, the template fields and (a sensor's poke) the run's dates
            fields = kwargs["start"]["fields"]
            parts = (kwargs["start"], shown.get("start"), wait.run_dates)
            parts += tuple(kwargs[name] for name in fields) + tuple(shown.get(name) for name in fields)
        key: tuple[Any, ...] = tuple(map(id, parts))
        if path == "zero-worker" and any(has_template(kwargs[name]) for name in fields):
            key += (wait.dag_id, wait.task_id, wait.run_id)  # a template may render them (``{{ run_id }}``)
        cached = self._memo.get(key)
        if cached is not None and all(old is new for old, new in zip(cached[0], parts, strict=True)):
            return cached[1]
        check, shown_check, exact = check_specs(wait, path, self._variables)
        kind = check_type(check)
        shared = sharing_key(check)
        condition = Condition(
            shared,
            wait_seed(check),  # the seed the triggerer draws (wait_model/sharing.py)
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
        self._progress: dict[tuple[Any, ...], tuple[ScheduledCheck | None, int]] = {}
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
            text = self._iso[epoch] = units.iso(epoch)
        return text

    def offset_of(self, policy: BackoffPolicy, seed: str) -> Callable[[int], float]:
        """``policy.offset(seed, k)``, memoised per (policy, seed): shared by every anchor and deadline."""
        offset_of = self._offset_of.get((policy, seed))
        if offset_of is None:
            offset_of = self._offset_of[(policy, seed)] = timeline.Offsets(policy, seed)
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

    def plan(
        self, facts: WaitFacts, seed: str, group: tuple[str, float] | None = None
    ) -> tuple[ScheduledCheck | None, int, float]:
        """(the next check, the checks made so far, checks per hour at the current interval): the wait's
        ``wait.timeline`` at ``now``, with the worker's checks (``after + 1``) on the worker-first path.
        ``group``: the (seed, anchor) of the schedule its sharing group runs (see ``Timeline.joined``)."""
        now, policy = self.now, self.policy(facts.policy)
        seed = facts.seed if facts.seed is not None else seed
        zero_worker = facts.path == "zero-worker"
        line = timeline.Timeline(
            policy, seed, facts.anchor, facts.deadline, facts.started_at if zero_worker else None
        )
        if group is not None:
            line = line.joined(*group)
        for replayed in (line, line.own):  # the replay ends at now (+ one step)
            if replayed is not None and not self._affordable(policy, replayed.seed, replayed.anchor, now):
                # Over the replay budget: every decorrelated sleep is <= cap, so at least this many were due.
                return None, int(max(0.0, now - line.anchor) / policy.cap_seconds), 0.0
        offset_of = self.offset_of(policy, line.seed)
        key = (line, facts.first_run_at, facts.after)
        planned = self._progress.get(key)
        if planned is None:
            planned = self._progress[key] = line.progress(now, facts.first_run_at, facts.after, offset_of)
        scheduled, made = planned
        rate = 0.0
        if scheduled is not None:
            low = max(0, scheduled.index - 1)  # the current gap, smoothed over two gaps (jitter)
            rate = 7200.0 / max(offset_of(low + 2) - offset_of(low), 1e-3)
        return scheduled, made + max(0, facts.after + 1), rate
