"""A condition watcher's late rule (``due=``): an *absence* alert, at most one per due time. Pure.

A watcher's due times are its ``DueTime``'s ``at`` on each business day of its calendar. At a due time the
watcher is late when no new value has landed since the due time before it (or since it began watching, if
that is later): the first check at or after the due time that leaves it so says it once; the next business
day's due time may say it again. What it needs across restarts (when it began watching, when the last new
value landed, which due time it last told) is :class:`AbsenceRecord`, kept in the asset state store beside the
watermark; the due times themselves are computed, never stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_smart_ext import units

#: The asset state store key suffix of a watcher's absence record (beside its watermark).
LATE_KEY_SUFFIX = "#late"
ABSENCE_FORMAT = 1


def watcher_due_problem(due: Any) -> str | None:
    """Why a ``DueTime`` cannot be a watcher's (None: it can). A watcher runs in no DAG run: its due times are
    the ``at`` of each business day, so ``after=``, ``lag`` and ``reference`` have nothing to count from."""
    data = due.to_dict()
    if data["at"] is None:
        return (
            "due: a condition watcher's due time is a time of day on each business day, e.g. DueTime('09:30', "
            "market='NYSE', timezone='America/New_York'); after= needs a DAG run to count from"
        )
    if data["lag"]:
        return "due.lag: a condition watcher's due time is each business day's `at`; leave lag at 0"
    if data["reference"] != "data_interval_end":
        return "due.reference: a condition watcher runs in no DAG run; leave reference at its default"
    return None


@dataclass(frozen=True)
class AbsenceRecord:
    """What a watcher's late rule remembers (epoch seconds): ``since`` it began watching, when the last new
    value ``landed`` (None: none since then), the due time it last ``told`` (None: none) and whether that alert
    may still be in flight (``telling``: written before the alert, cleared after it, so a restart in between
    sends it again rather than losing it — as the watermark does with an event)."""

    since: float
    landed: float | None = None
    told: float | None = None
    telling: bool = False
    rule: str = ""  # the due rule it was kept for (``due_rule_key``): another rule starts a new record

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"format": ABSENCE_FORMAT, "since": self.since, "landed": self.landed}
        record.update({"told": self.told, "telling": self.telling, "rule": self.rule})
        return record

    @classmethod
    def from_record(cls, record: Any) -> AbsenceRecord | None:
        """The record stored; None when there is none or it is not ours."""
        if not isinstance(record, Mapping) or record.get("format") != ABSENCE_FORMAT:
            return None
        values = [record.get(name) for name in ("since", "landed", "told")]
        if not all(value is None or _is_number(value) for value in values) or values[0] is None:
            return None
        since, landed, told = (None if value is None else float(value) for value in values)
        assert since is not None
        rule = record.get("rule")
        telling = record.get("telling") is True and told is not None
        return cls(since, landed, told, telling, rule if isinstance(rule, str) else "")

    def telling_for(self, due_at: float) -> AbsenceRecord:
        """Before the alert of ``due_at``: it counts as told, and as in flight until :meth:`told_all`."""
        return replace(self, told=due_at, telling=True)

    def told_all(self) -> AbsenceRecord:
        return replace(self, telling=False)


def merged(records: list[AbsenceRecord | None]) -> AbsenceRecord | None:
    """One record from those of every asset the watcher feeds (one trigger for identical watchers of several
    assets): the earliest start, the latest value, the latest due time told."""
    found = [record for record in records if record is not None]
    if not found:
        return None
    landed = [record.landed for record in found if record.landed is not None]
    latest = max(found, key=lambda record: (record.told or 0.0, record.telling))
    since = min(record.since for record in found)
    return AbsenceRecord(since, max(landed) if landed else None, latest.told, latest.telling, latest.rule)


def due_rule_key(due: Any) -> str:
    """The due rule a record is kept for: a changed ``due=`` (or one removed and given again) starts anew."""
    return json.dumps(due.to_dict(), sort_keys=True)


def unfinished_alert(due: Any, now: float, record: AbsenceRecord) -> float | None:
    """The due time whose alert a restart may have cut short (written as being told, not marked done), when
    it is still the latest due time at ``now``: an older one is not said again, days later."""
    if not record.telling or record.told is None:
        return None
    latest = due.latest_at_or_before(units.utc(now))
    return record.told if latest is not None and units.epoch(latest) == record.told else None


def late_for(due: Any, now: float, record: AbsenceRecord) -> float | None:
    """The due time (epoch seconds) the watcher is late for at ``now``, told or not (None: it is not late):
    the latest due time at or before ``now``, when it is after the watcher began watching and no new value
    landed since the due time before it (or since the watcher began, if later). The Waits view shows it."""
    latest = due.latest_at_or_before(units.utc(now))
    if latest is None:
        return None
    due_at = units.epoch(latest)
    if due_at <= record.since or _met(due, due_at, record):
        return None
    return due_at


def late_due(due: Any, now: float, record: AbsenceRecord) -> float | None:
    """The due time a check at ``now`` says the watcher is late for (:func:`late_for`, not told yet), else
    None."""
    due_at = late_for(due, now, record)
    if due_at is None or (record.told is not None and due_at <= record.told):
        return None
    return due_at


def landed(due: Any, observed_at: float, record: AbsenceRecord) -> AbsenceRecord:
    """The record after a check at ``observed_at`` saw a new value. A due time that no check has decided yet
    (the first check at or after it is this one) is met by it: the value counts as landed by that due time,
    not as landed after it (it may well have landed before: the check is the first to look), so it does not
    count for the next business day's due time too."""
    # A shared poll's check can start before this watcher began (3.3's shared streams): it counts from then.
    observed_at = max(observed_at, record.since)
    undecided = late_due(due, observed_at, record)
    return replace(record, landed=observed_at if undecided is None else undecided)


def _met(due: Any, due_at: float, record: AbsenceRecord) -> bool:
    """Whether a new value landed in ``due_at``'s window: after the due time before it, or, when the watcher
    began after that one, at or after it began; at or before ``due_at`` (a value the deciding check saw counts
    as landed at ``due_at``)."""
    if record.landed is None:
        return False
    before = due.latest_at_or_before(units.utc(due_at - 1.0))
    if before is not None and units.epoch(before) >= record.since:
        return record.landed > units.epoch(before)
    return record.landed >= record.since


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
