"""The Waits view's watchers (issue 35): one row per asset watcher of ours, from its trigger row, its asset,
its watermark in the asset state store (3.3+) and the asset's last event. Pure (``watchers_source`` reads
the rows).

What each row can say, per version:

* every 3.x: the asset and the watcher's name, the condition (secrets masked), how it polls, who serves it
  (``serving``: the triggerer holding its trigger row, Airflow's liveness rule), the asset's last event (its
  ``seq`` and value when one of ours sent it);
* 3.3+: also the watermark the watcher keeps: the last value reported and confirmed, its ``seq``, and a value
  being handed over (an event sent and not yet confirmed: a restart now sends it again, flagged).

Not shown: the next check. The watcher's schedule restarts from the moment it sees a new value in the
triggerer, which its rows do not record, so the view could only guess it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import units
from airflow_smart_ext.conditions.spec import check_type
from airflow_smart_ext.ui import serving
from airflow_smart_ext.ui.serving import Triggerer, Triggerers
from airflow_smart_ext.ui.waits_report import WaitsQuery
from airflow_smart_ext.wait_model import last_check
from airflow_smart_ext.wait_model.absence import LATE_KEY_SUFFIX, AbsenceRecord, late_for
from airflow_smart_ext.wait_model.parameters import stored_policy
from airflow_smart_ext.wait_model.watcher_state import read_record

__all__ = ["AssetEvent", "LiveWatcher", "watcher_rows"]


@dataclass(frozen=True)
class AssetEvent:
    """An asset's newest event: when, and the payload a trigger sent with it (None: not from a trigger)."""

    at: str  # ISO
    payload: Mapping[str, Any] | None


@dataclass(frozen=True)
class LiveWatcher:
    """One asset watcher of ours: its asset, name and trigger row (kwargs as they may be shown: secrets
    masked), and what Airflow keeps of it."""

    asset: str
    asset_uri: str
    name: str | None  # None: Airflow < 3.2 keeps no watcher name
    trigger_id: int
    shown_kwargs: Mapping[str, Any]
    state_key: str  # its watermark's key (``state_store_key`` of its real kwargs: a masked secret changes it)
    #: the state store records of the asset (key -> the decoded JSON value), ours among them (3.3+)
    state: Mapping[str, Any]
    state_updated_at: Mapping[str, str]  # key -> ISO
    last_event: AssetEvent | None
    triggerer_id: int | None
    holder: Triggerer | None
    trigger_queue: str | None = None
    trigger_team: str | None = None
    #: whether this Airflow lets a watcher record its last check (the asset state store: 3.3+)
    outcome_recorded: bool = True


def polls(kwargs: Mapping[str, Any]) -> str:
    """How the watcher checks, in words (its stored schedule)."""
    policy = stored_policy(kwargs)
    words = f"every {units.duration_text(policy.initial)}"
    if policy.factor > 1 and policy.cap is not None and policy.cap > policy.initial:
        words += (
            f", x{policy.factor:g} per check without a new value, up to {units.duration_text(policy.cap)}"
        )
    if policy.jitter != "none":
        words += f", {policy.jitter} jitter"
    return words + "; from the first again after each new value"


def _our_event(payload: Mapping[str, Any] | None) -> bool:
    return isinstance(payload, Mapping) and isinstance(payload.get("seq"), int) and "value" in payload


UNREADABLE = "unreadable trigger kwargs"
HIDDEN = "***"


def _stars(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {key: _stars(value) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [_stars(value) for value in node]
    return HIDDEN


def without_values(check: Mapping[str, Any]) -> dict[str, Any]:
    """A watcher's check as the view shows it: its SQL parameters and sensor arguments by name, every value
    "***". A watcher's arguments are not sealed (it renders no template), and the server's masker knows only
    the secrets it loaded itself: a value the DAG read at parse (a Variable, a password) would show."""
    shown = dict(check)
    for name in ("parameters", "kwargs"):
        if shown.get(name) is not None:
            shown[name] = _stars(shown[name])
    return shown


def _condition(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What the watcher checks and how often; a row whose kwargs cannot be read says so (the rest stays)."""
    try:
        check = without_values(kwargs["check"])
        kind = check_type(check)
        return {
            "check_type": kind.name,
            "conn_id": kind.conn_id(check),
            "sensor_class": kind.sensor_class(check),
            "condition": kind.describe(check),
            "polls": polls(kwargs),
        }
    except (KeyError, TypeError, ValueError):
        return {
            "check_type": None,
            "conn_id": None,
            "sensor_class": None,
            "condition": UNREADABLE,
            "polls": "",
        }


def due_columns(kwargs: Mapping[str, Any], record: Any, now: float) -> dict[str, Any]:
    """A watcher's due time (``due=``): its rule, and the due time it is late for (no new value since the one
    before: how late, and whether it said so) or else its next one."""
    columns: dict[str, Any] = {
        "due_rule": None,
        "due": None,
        "due_in": None,
        "late_by": None,
        "late_alerted": None,
    }
    if not kwargs.get("due"):
        return columns
    from airflow_smart_ext.timetables.due import DueTime  # only for a watcher with a due time

    try:
        due = DueTime.from_dict(kwargs["due"])
    except (TypeError, ValueError):
        return {**columns, "due_rule": "unreadable due time"}
    columns["due_rule"] = due.describe(daily=True)
    stored = AbsenceRecord.from_record(record)
    late = None if stored is None else late_for(due, now, stored)
    if late is not None:
        assert stored is not None
        told = stored.told is not None and stored.told >= late
        return {**columns, "due": units.iso(late), "late_by": round(now - late, 3), "late_alerted": told}
    following = units.epoch(due.due_at(units.utc(now)))
    return {**columns, "due": units.iso(following), "due_in": round(following - now, 3)}


def watcher_row(watcher: LiveWatcher, triggerers: Triggerers | None, now: float) -> dict[str, Any]:
    key = watcher.state_key
    mark = read_record(watcher.state.get(key))
    check = last_check.read_record(watcher.state.get(key + last_check.STATE_KEY_SUFFIX)) if key else None
    if check is not None:
        outcome = last_check.summary(check)
    else:
        outcome = last_check.NONE_RECORDED if watcher.outcome_recorded else last_check.NOT_RECORDED_BEFORE_3_3
    event = watcher.last_event
    payload = event.payload if event is not None and _our_event(event.payload) else None
    return {
        "asset": watcher.asset,
        "asset_uri": watcher.asset_uri,
        "watcher": watcher.name,
        "trigger_id": watcher.trigger_id,
        **_condition(watcher.shown_kwargs),
        "state_key": key or None,
        "last_value": None if mark is None else mark.value,
        "last_seq": None if mark is None else mark.seq,
        "handing_over": None if mark is None else mark.pending,
        "watermark_updated_at": watcher.state_updated_at.get(key) if mark is not None else None,
        "last_event_at": None if event is None else event.at,
        "last_event_seq": None if payload is None else payload["seq"],
        "last_event_value": None if payload is None else payload["value"],
        "last_event_redelivered": None if payload is None else bool(payload.get("redelivered")),
        "last_check": check,
        "last_outcome": outcome,
        **due_columns(watcher.shown_kwargs, watcher.state.get(key + LATE_KEY_SUFFIX) if key else None, now),
        **serving.serving(
            watcher.triggerer_id,
            watcher.holder,
            watcher.trigger_queue,
            watcher.trigger_team,
            triggerers,
            now,
        ),
    }


def watcher_rows(
    watchers: Sequence[LiveWatcher], triggerers: Triggerers | None, now: float
) -> list[dict[str, Any]]:
    """Every watcher's row, by asset then watcher name."""
    rows = [watcher_row(watcher, triggerers, now) for watcher in watchers]
    return sorted(rows, key=lambda row: (row["asset"], row["watcher"] or "", row["trigger_id"]))


def add_watchers(
    report: dict[str, Any],
    watchers: Sequence[LiveWatcher],
    triggerers: Triggerers | None,
    now: float,
    query: WaitsQuery | None = None,
) -> dict[str, Any]:
    """``report`` with its ``watchers`` (those the ``query`` keeps: its ``conn_id``, ``sensor_class`` and
    ``late`` filters) and their counts in its summary: how many, how many no live triggerer serves, how many
    are late."""
    query = query or WaitsQuery()
    conn_id, sensor_class, late = query.conn_id, query.sensor_class, query.late
    rows = [
        row
        for row in watcher_rows(watchers, triggerers, now)
        if (conn_id is None or row["conn_id"] == conn_id)
        and (not late or row["late_by"] is not None)
        and (
            sensor_class is None
            or sensor_class in (row["sensor_class"], (row["sensor_class"] or "").rsplit(".", 1)[-1])
        )
    ]
    report["watchers"] = rows
    report["summary"]["watchers"] = len(rows)
    report["summary"]["unserved_watchers"] = sum(row["unserved_reason"] is not None for row in rows)
    report["summary"]["late_watchers"] = sum(row["late_by"] is not None for row in rows)
    return report
