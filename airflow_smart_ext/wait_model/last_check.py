"""A wait's or watcher's last check outcome, as the triggerer records it and the Waits view / CLI read it.

The record holds our own vocabulary only (the outcome kind, the error's class name and our classification's
reason, a count and two times), never a driver's error text: that may quote bound values (a secret).

Where it is kept (the triggerer writes it, ``triggers/last_check_writes.py`` decides when):

* a deferred wait: an XCom of its task instance under :data:`XCOM_KEY` (3.x through the triggerer's
  supervisor channel, 2.11 with the ORM), one member per check group at a time;
* a condition watcher: the asset state store under ``<its watermark key>`` + :data:`STATE_KEY_SUFFIX`
  (3.3+; 3.0-3.2 have nowhere to keep it).

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import units

XCOM_KEY = "smart_ext_last_check"
STATE_KEY_SUFFIX = "#last-check"
RECORD_FORMAT = "smart_ext.last_check/1"

NOT_MET = "not met"
MET = "met"
TRANSIENT_ERROR = "transient error"
ERROR = "error"
KINDS = (NOT_MET, MET, TRANSIENT_ERROR, ERROR)

#: What a view says when nothing is recorded yet, and where nothing can be.
NONE_RECORDED = "none recorded yet"
NOT_RECORDED_BEFORE_3_3 = "not recorded on Airflow 3.x<3.3"


def outcome_kind(status: str, ridden_out: bool) -> str:
    """The kind of a check's outcome: its status (``conditions.Outcome``) and whether an error was ridden out
    (transient, or any with ``silent_fail``: "not yet", the schedule goes on)."""
    if status == "error":
        return TRANSIENT_ERROR if ridden_out else ERROR
    if status == "negative":
        return NOT_MET
    if status == "positive":
        return MET
    return ERROR  # a failure criterion, a timeout or skip the check asked for: the wait ends on it


@dataclass(frozen=True)
class LastCheck:
    """One check's outcome; ``since``: when this kind (and error class) began; ``errors``: errors in a row."""

    outcome: str
    at: float
    since: float
    errors: int = 0
    error_class: str | None = None
    reason: str | None = None

    def same_kind(self, other: LastCheck | None) -> bool:
        return other is not None and (other.outcome, other.error_class) == (self.outcome, self.error_class)

    def after(self, previous: LastCheck | None) -> LastCheck:
        """This check following ``previous``: the same kind keeps its ``since`` and the larger count."""
        if previous is None or not self.same_kind(previous):
            return self
        return LastCheck(
            self.outcome,
            self.at,
            previous.since,
            max(self.errors, previous.errors),
            self.error_class,
            self.reason,
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "outcome": self.outcome,
            "error_class": self.error_class,
            "reason": self.reason,
            "errors": self.errors,
            "since": units.iso(self.since),
            "at": units.iso(self.at),
        }


def read_record(value: Any) -> dict[str, Any] | None:
    """A stored record's fields (``value`` as the store or XCom column gives it: a dict, or its JSON text or
    bytes); None when it is none or not ours."""
    if isinstance(value, (bytes, str)):
        import json

        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping) or value.get("format") != RECORD_FORMAT:
        return None
    errors = value.get("errors")
    fields = {name: value.get(name) for name in ("outcome", "error_class", "reason", "since", "at")}
    if fields["outcome"] not in KINDS or not all(isinstance(fields[name], str) for name in ("since", "at")):
        return None
    if isinstance(errors, bool) or not isinstance(errors, int) or errors < 0:
        return None
    return {**fields, "errors": errors}


def newest(records: Any) -> dict[str, Any] | None:
    """The newest of some read records (by their check time; None: none)."""
    found = [record for record in records if record is not None]
    return max(found, key=lambda record: record["at"]) if found else None


def words(record: Mapping[str, Any]) -> str:
    """The outcome in words without its times, e.g. "transient error (OperationalError) x12"."""
    text = str(record["outcome"])
    if record.get("error_class"):
        text += f" ({record['error_class']})"
    if record.get("errors"):
        text += f" x{record['errors']}"
    return text


def summary(record: Mapping[str, Any] | None) -> str:
    """One line for JSON and the CLI: the words and since when (UTC ISO), or that none is recorded."""
    if record is None:
        return NONE_RECORDED
    return f"{words(record)} since {record['since']}"
