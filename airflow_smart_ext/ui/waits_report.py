"""The Waits view's data: every live wait of our sensors, what it waits for, who shares it, its next check.

Pure: computed from the trigger rows alone (no Airflow import here; ``waits_source`` reads the rows). The
schedule is a pure function of (seed, start, now, deadline) and the sharing key a pure function of the check
spec, so the server computes what the triggerer will do without asking it. Only the last check's outcome is
the triggerer's word: the record it keeps per check group as one member's XCom (``wait.last_check``).

Estimates, said plainly: ``checks_made`` counts the *scheduled* checks due so far (a lower bound when a
shared check served a wait early; checks missed while no triggerer ran are counted as due). Checks per hour
are taken at each wait's current interval; a group's shared rate is its most frequent sharing member (plus
the members with ``share=False``); sharing happens within one triggerer process, so with several triggerers
the real saving can be smaller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext.ui.query_params import InvalidQuery, decimal_number, whole_number
from airflow_smart_ext.ui.serving import Triggerers, serving
from airflow_smart_ext.ui.trigger_rows import (
    Condition,
    Conditions,
    LiveWait,
    Schedules,
    WaitFacts,
    read_wait,
    trigger_paths,
)
from airflow_smart_ext.ui.worker_rows import WorkerWait, late_alerted, worker_row
from airflow_smart_ext.wait_model import last_check, timeline

__all__ = ["SORTS", "WaitsQuery", "build_report"]

SORTS = ("next_check", "deadline", "due")
MAX_LIMIT = 100_000
DEFAULT_LIMIT = 1000


@dataclass(frozen=True)
class WaitsQuery:
    """The filters, sort and limit of a report (``from_params`` parses and validates them)."""

    dag_id: str | None = None
    conn_id: str | None = None
    sensor_class: str | None = None  # the dotted class path or the class name
    due_within: float | None = None  # seconds: only waits whose next check is due within them
    sort: str = "next_check"
    limit: int = DEFAULT_LIMIT
    late: bool = False  # only waits past their due time (``due=``), still waiting

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> WaitsQuery:
        """From URL/CLI parameters; an empty value means "not given" (an HTML form sends empty fields)."""
        known = ("dag_id", "conn_id", "sensor_class", "due_within", "sort", "limit", "late")
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise InvalidQuery(f"unknown parameter(s) {unknown}; accepted parameters: {', '.join(known)}")
        given = {name: str(params[name]).strip() for name in known if name in params}
        given = {name: value for name, value in given.items() if value}
        due_within = None
        if "due_within" in given:
            due_within = decimal_number(given["due_within"])
            if due_within is None:
                raise InvalidQuery(
                    "due_within must be a number of seconds >= 0 in ASCII digits (e.g. 30 or 90.5); got "
                    f"{given['due_within']!r}"
                )
        sort = given.get("sort", "next_check")
        if sort not in SORTS:
            raise InvalidQuery(f"sort must be one of {', '.join(SORTS)}; got {sort!r}")
        limit = DEFAULT_LIMIT
        if "limit" in given:
            raw = given["limit"]
            if not whole_number(raw) or not 1 <= int(raw) <= MAX_LIMIT:
                raise InvalidQuery(f"limit must be a whole number from 1 to {MAX_LIMIT}; got {raw!r}")
            limit = int(raw)
        late = given.get("late", "false").lower()
        if late not in ("true", "false"):
            raise InvalidQuery(f"late must be true or false; got {given['late']!r}")
        return cls(
            given.get("dag_id"),
            given.get("conn_id"),
            given.get("sensor_class"),
            due_within,
            sort,
            limit,
            late == "true",
        )


@dataclass
class _Member:
    """A wait's row and what its group's totals need."""

    row: dict[str, Any]
    share: bool  # shares its check with identical waits (``share=True``)
    rate: float  # checks per hour at its current interval (0: no check ahead)
    rate_limit: float | None  # its explicit checks per second on the connection (None: the config's)
    last_check: Mapping[str, Any] | None = None  # the record its task's XCom holds (None: none)
    holder: int | None = None  # the triggerer job holding its trigger row (a check group lives in one)
    in_worker: bool = False  # a worker-side wait (``worker_rows``): in no check group


def _base(wait: LiveWait, triggerers: Triggerers | None, now: float) -> dict[str, Any]:
    return {
        "dag_id": wait.dag_id,
        "run_id": wait.run_id,
        "task_id": wait.task_id,
        "map_index": wait.map_index,
        "try_number": wait.try_number,
        "path": trigger_paths()[wait.classpath],
        "worker_host": None,
        **serving(wait.triggerer_id, wait.holder, wait.trigger_queue, wait.trigger_team, triggerers, now),
    }


@dataclass
class _Read:
    """A readable wait: its row so far, its schedule facts and its condition."""

    wait: LiveWait
    row: dict[str, Any]
    facts: WaitFacts
    condition: Condition

    @property
    def schedule(self) -> tuple[str, float]:
        """The (seed, anchor) of its own schedule."""
        return (self.facts.seed or self.condition.seed, self.facts.anchor)


def _unreadable(wait: LiveWait, base: dict[str, Any], err: BaseException) -> tuple[str, _Member]:
    # A row we cannot read must not break the page; the error type only (its text may quote kwargs).
    row = {
        **base,
        **dict.fromkeys(("check_type", "sensor_class", "conn_id", "next_check", "next_check_in")),
        **dict.fromkeys(("deadline", "deadline_in", "deadline_by", "sharing_key_hash", "started_at")),
        **dict.fromkeys(("due", "due_in", "late_by", "late_alerted")),
        "next_check_exact": False,
        "condition": f"unreadable trigger kwargs ({type(err).__name__})",
        "shared_with": 1,
        "checks_made": 0,
        "last_outcome": "unknown",
        "last_check": None,
    }
    return f"unreadable|{wait.dag_id}|{wait.run_id}|{wait.task_id}|{wait.map_index}", _Member(
        row, False, 0.0, None
    )


_UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError)


def _group_schedules(read: Iterable[_Read]) -> dict[tuple[Any, ...], tuple[str, float]]:
    """The schedule each sharing group runs per policy and triggerer process: the first member's (the one
    whose trigger row is oldest), which later members join (``Timeline.joined``)."""
    first: dict[tuple[Any, ...], tuple[tuple[float, int], tuple[str, float]]] = {}
    for one in read:
        if not one.facts.share:
            continue
        key = _schedule_key(one)
        rank = (one.facts.first_run_at, one.wait.trigger_id or 0)
        if key not in first or rank < first[key][0]:
            first[key] = (rank, one.schedule)
    return {key: schedule for key, (_rank, schedule) in first.items()}


def _schedule_key(one: _Read) -> tuple[Any, ...]:
    return (one.condition.key, tuple(sorted(one.facts.policy.items())), one.wait.triggerer_id)


def _row(one: _Read, schedules: Schedules, group: tuple[str, float] | None) -> tuple[str, _Member]:
    """(sharing key, the wait's row and rates)."""
    facts, condition, base = one.facts, one.condition, one.row
    scheduled, checks, rate = schedules.plan(facts, condition.seed, group)
    now = schedules.now
    ends, ends_by = timeline.wait_ends(facts.deadline, facts.deadline_by, one.wait.run_deadline)
    base.update(
        check_type=condition.check_type,
        sensor_class=condition.sensor_class,
        conn_id=condition.conn_id,
        condition=condition.words,
        sharing_key_hash=condition.group,
        shared_with=1,
        checks_made=checks,
        next_check=schedules.iso(scheduled.at) if scheduled else None,
        next_check_in=round(scheduled.at - now, 3) if scheduled else None,
        next_check_exact=condition.exact,
        deadline=schedules.iso(ends),
        deadline_in=None if ends is None else round(ends - now, 3),
        deadline_by=ends_by,
        started_at=schedules.iso(facts.started_at),
        **due_columns(facts.due_at, facts.late_told, now, schedules.iso),
    )
    rate_limit = None if facts.rate_limit is None else float(facts.rate_limit)
    return condition.key, _Member(
        base, facts.share, rate, rate_limit, one.wait.last_check, one.wait.triggerer_id
    )


def due_columns(
    due_at: float | None, late_told: bool | None, now: float, iso: Callable[[float | None], str | None]
) -> dict[str, Any]:
    """A wait's due time (``due=``): when, in how long, and — still waiting after it — how late, and whether
    its alert was sent (the try said it is late)."""
    late_by = None if due_at is None or now < due_at else round(now - due_at, 3)
    return {
        "due": iso(due_at),
        "due_in": None if due_at is None else round(due_at - now, 3),
        "late_by": late_by,
        "late_alerted": None if due_at is None or late_told is None else bool(late_told),
    }


def _worker_member(wait: WorkerWait, schedules: Schedules) -> tuple[str, _Member]:
    """A worker-side wait's own group (it shares no check), its due columns as a trigger row's; whether its
    alert was sent as its task state store says (``worker_rows.late_alerted``)."""
    row, due_at = worker_row(wait, schedules.now, schedules.iso)
    row.update(due_columns(due_at, late_alerted(wait, due_at), schedules.now, schedules.iso))
    key = f"worker|{wait.dag_id}|{wait.run_id}|{wait.task_id}|{wait.map_index}"
    return key, _Member(row, False, 0.0, None, in_worker=True)


def _matches(row: Mapping[str, Any], query: WaitsQuery) -> bool:
    if query.late and row.get("late_by") is None:
        return False
    if query.dag_id is not None and row["dag_id"] != query.dag_id:
        return False
    if query.conn_id is not None and row["conn_id"] != query.conn_id:
        return False
    if query.sensor_class is not None:
        sensor_class = row["sensor_class"] or ""
        if query.sensor_class not in (sensor_class, sensor_class.rpartition(".")[2]):
            return False
    if query.due_within is not None:
        due_in = row["next_check_in"]
        if due_in is None or due_in > query.due_within:
            return False
    return True


def _sort_key(row: Mapping[str, Any], field: str) -> tuple[Any, ...]:
    value = row[f"{field}_in"]
    return (value is None, value or 0.0, row["dag_id"], row["run_id"], row["task_id"], row["map_index"])


def build_report(
    waits: Iterable[LiveWait],
    query: WaitsQuery,
    now: float,
    default_rate_limit: float | None = None,
    triggerers: Triggerers | None = None,
    workers: Iterable[WorkerWait] = (),
) -> dict[str, Any]:
    """The Waits view's data, JSON-ready (``generated_at``, ``total``, ``waits``, ``groups``,
    ``connections``, ``summary``). Groups count every wait given (what really shares); the lists show
    the groups and connections of the waits that pass the filters. A connection's ``rate_limit`` is the
    smallest explicit one of its waits, else ``default_rate_limit`` (``runtime.connection_rate_limit(None)``:
    ``[smart_ext] max_checks_per_second_per_connection``; None: no limit). ``triggerers``: who is alive, to
    say who serves each wait (``serving``; None: not known, ``served_by`` and ``unserved_reason`` are null).
    ``workers``: the waits with a due time whose checks run in a worker (``worker_rows``), a row each."""
    conditions, schedules = Conditions(), Schedules(now)
    members: dict[str, list[_Member]] = {}
    read: list[_Read] = []
    for wait in waits:
        if wait.classpath in trigger_paths():
            base = _base(wait, triggerers, now)
            try:
                read.append(
                    _Read(wait, base, read_wait(wait, base["path"]), conditions.of(wait, base["path"]))
                )
            except _UNREADABLE as err:
                key, member = _unreadable(wait, base, err)
                members.setdefault(key, []).append(member)
    group_schedules = _group_schedules(read)
    for one in read:
        try:
            joins = group_schedules.get(_schedule_key(one)) if one.facts.share else None
            key, member = _row(one, schedules, joins)
        except _UNREADABLE as err:
            key, member = _unreadable(one.wait, _base(one.wait, triggerers, now), err)
        members.setdefault(key, []).append(member)
    deferred = {(one.wait.dag_id, one.wait.run_id, one.wait.task_id, one.wait.map_index) for one in read}
    for worker in workers:
        if (worker.dag_id, worker.run_id, worker.task_id, worker.map_index) in deferred:
            continue  # read as deferred, then running (a resume between the two reads): one row
        key, member = _worker_member(worker, schedules)
        members.setdefault(key, []).append(member)
    rows: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    connections: dict[str, dict[str, Any]] = {}
    for group in members.values():
        # The triggerer writes one record per check group, as one member's XCom: a sharing member shows the
        # newest of those sharing its check (the same triggerer); a share=False wait checks alone: its own.
        newest = {
            holder: last_check.newest(m.last_check for m in group if m.share and m.holder == holder)
            for holder in {m.holder for m in group if m.share}
        }
        for member in group:
            member.row["shared_with"] = len(group)
            if "last_outcome" not in member.row:
                record = newest[member.holder] if member.share else member.last_check
                member.row.update(last_check=record, last_outcome=last_check.summary(record))
        shown = [member.row for member in group if _matches(member.row, query)]
        if not shown:
            continue
        rows.extend(shown)
        if group[0].in_worker:
            continue
        shared = max((member.rate for member in group if member.share), default=0.0)
        shared += sum(member.rate for member in group if not member.share)
        first = group[0].row
        groups.append(
            {
                "sharing_key_hash": first["sharing_key_hash"],
                "condition": first["condition"],
                "tasks": len(group),
                "checks_per_hour_unshared": round(sum(member.rate for member in group), 3),
                "checks_per_hour_shared": round(shared, 3),
            }
        )
        if first["conn_id"] is not None:
            connection = connections.setdefault(
                first["conn_id"], {"conn_id": first["conn_id"], "checks_per_second": 0.0, "rate_limit": None}
            )
            connection["checks_per_second"] += shared / 3600.0
            limits = [member.rate_limit for member in group if member.rate_limit is not None]
            if connection["rate_limit"] is not None:
                limits.append(connection["rate_limit"])
            connection["rate_limit"] = min(limits, default=None)
    rows.sort(key=lambda row: _sort_key(row, query.sort))
    groups.sort(key=lambda group: (-group["tasks"], group["condition"]))
    for connection in connections.values():
        connection["checks_per_second"] = round(connection["checks_per_second"], 6)
        if connection["rate_limit"] is None:
            connection["rate_limit"] = default_rate_limit
    unshared_total = round(sum(group["checks_per_hour_unshared"] for group in groups), 3)
    shared_total = round(sum(group["checks_per_hour_shared"] for group in groups), 3)
    return {
        "generated_at": schedules.iso(now),
        "total": len(rows),
        "waits": rows[: query.limit],
        "groups": groups,
        "connections": sorted(connections.values(), key=lambda connection: connection["conn_id"]),
        "summary": {
            "waits": len(rows),
            "groups": len(groups),
            "checks_per_hour_unshared": unshared_total,
            "checks_per_hour_shared": shared_total,
            "checks_saved_per_hour": round(unshared_total - shared_total, 3),
            # the shown waits no live triggerer serves, and the triggerers alive (None: not known)
            "unserved": sum(row["unserved_reason"] is not None for row in rows),
            # the shown waits past their due time (``due=``) and still waiting
            "late": sum(row["late_by"] is not None for row in rows),
            "live_triggerers": None if triggerers is None else len(triggerers.live),
        },
    }
