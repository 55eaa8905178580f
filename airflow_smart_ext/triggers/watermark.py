"""What a condition watcher reports, free of Airflow: the value of an observation, the edge between two
observations and the watermark it keeps across restarts.

* :func:`reportable_value`: an observation's value as JSON (a date as ISO text, a ``Decimal`` as text);
* :class:`Watermark` / :class:`EdgeTracker`: one report per *new* value, and the two-step write (intent
  before the event, commit after it) that a restart reads back;
* :func:`values_after`: ``every_value=True``: the values of one check after the watermark, in order.

Its arguments are the wait model's (``wait.parameters.watcher_arguments``), and so is when it checks next
(``wait.timeline.PollSchedule``).
"""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext.wait_model.watcher_state import (
    WATERMARK_FORMAT,
    read_record,
)


class ValueNotReportable(ValueError):
    """An observed value that cannot travel in an asset event's ``extra`` (not JSON)."""


# --- values --------------------------------------------------------------------------------------------


def _json_value(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueNotReportable(f"{where} is {value!r}, which JSON cannot carry")
        return value
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        return {key: _json_value(item, f"{where}[{key!r}]") for key, item in value.items()}
    raise ValueNotReportable(
        f"{where} ({type(value).__name__}) cannot travel in an asset event: use str, int, float, bool, a date or "
        "datetime (sent as ISO text), Decimal (as text), or lists / dicts of those"
    )


def reportable_value(value: Any, value_key: str | None = None) -> Any:
    """The JSON form of an observed value (``value[value_key]`` when a key is given); None means no value."""
    if value_key is not None and value is not None:
        if not isinstance(value, Mapping) or value_key not in value:
            raise ValueNotReportable(
                f"value_key={value_key!r}: the check's value must be a dict with that key; got "
                f"{type(value).__name__}{f' with keys {sorted(map(str, value))}' if isinstance(value, Mapping) else ''}"
            )
        value = value[value_key]
    return _json_value(value, "the value")


def _order_kind(value: Any) -> str | None:
    """What ``every_value`` orders a value as: ``number`` or ``text`` (None: neither, it cannot be ordered)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return "text" if isinstance(value, str) else None


def values_after(values: Any, after: Any, value_key: str | None = None) -> list[Any]:
    """``every_value=True``: the values of one check (a list: a query's rows, a sensor's XCom list; each item
    ``item[value_key]`` when a key is given) that come after the watermark ``after`` (None: all), ascending and
    each once. A value at or below the watermark (a late arrival) is left out. ``ValueNotReportable`` when the
    values cannot be ordered: they must all be numbers, or all text (dates as ISO text)."""
    if not isinstance(values, (list, tuple)):
        raise ValueNotReportable(
            f"every_value=True needs a list of values from the check (one per row, or the sensor's XCom value "
            f"as a list); got {type(values).__name__}"
        )
    picked = [item.get(value_key) if value_key and isinstance(item, Mapping) else item for item in values]
    if any(isinstance(item, decimal.Decimal) for item in picked):
        # sent as text, where "10" < "9": ordered wrongly
        raise ValueNotReportable(
            "every_value=True orders the values, and a Decimal travels as text (ordered as text): cast it to an "
            "integer or a float in the query"
        )
    found = [value for value in (reportable_value(item, value_key) for item in values) if value is not None]
    kinds = {_order_kind(value) for value in [*found, *([] if after is None else [after])]}
    if len(kinds) > 1 or None in kinds:
        raise ValueNotReportable(
            "every_value=True orders the values after the watermark: they must all be numbers or all text (dates "
            f"as ISO text); got {sorted(map(repr, found))[:5]} after {after!r}"
        )
    return sorted({value for value in found if after is None or value > after})


# --- the watermark and the edge ------------------------------------------------------------------------


@dataclass(frozen=True)
class Watermark:
    """What a watcher remembers: the last value whose event was handed to Airflow and confirmed by the next
    step (``value``), how many values it reported (``seq``), and a value whose event it is handing over right
    now (``pending``: written *before* the event, cleared by the commit after it)."""

    value: Any = None
    seq: int = 0
    pending: Any = None

    def to_record(self) -> dict[str, Any]:
        record = {"format": WATERMARK_FORMAT, "value": self.value, "seq": self.seq}
        if self.pending is not None:
            record["pending"] = self.pending
        return record

    @classmethod
    def from_record(cls, record: Any) -> Watermark | None:
        """The watermark of a stored record; None when there is none or it is not ours (the caller logs it)."""
        stored = read_record(record)
        return None if stored is None else cls(stored.value, stored.seq, stored.pending)


def latest_watermark(records: Iterable[Any]) -> Watermark | None:
    """One watermark from the records of every asset the watcher feeds (Airflow runs one trigger for identical
    watchers of several assets): the one furthest along (highest ``seq``; a pending value counts as ahead)."""
    marks = [mark for mark in map(Watermark.from_record, records) if mark is not None]
    if not marks:
        return None
    return max(marks, key=lambda mark: (mark.seq, mark.pending is not None))


@dataclass(frozen=True)
class Report:
    """One asset event to emit: a new value, its number and the value before it."""

    value: Any
    seq: int
    previous: Any
    redelivered: bool = False  # handed to Airflow before a restart, not known persisted: sent again

    def payload(self, observed_at: str | None) -> dict[str, Any]:
        return {
            "value": self.value,
            "seq": self.seq,
            "previous": self.previous,
            "redelivered": self.redelivered,
            "observed_at": observed_at,
        }


class EdgeTracker:
    """One report per new value. The caller writes :attr:`mark` to the state store whenever
    :attr:`unsaved` is set: after :meth:`observe` returns a report (the intent, before the event) and after
    :meth:`commit` (once the event is handed over).

    ``report_first_value``: with no watermark stored (a new watcher; or any start on Airflow < 3.3, which has
    no state store), whether the first value observed is reported (True) or taken as the baseline (False).
    """

    def __init__(self, stored: Watermark | None, report_first_value: bool) -> None:
        self.mark = stored if stored is not None else Watermark()
        self._baseline_pending = stored is None and not report_first_value
        self.unsaved = False

    def redelivery(self) -> Report | None:
        """The report a previous run handed over but did not commit: it may have been lost with that run
        (never lose one), so it is sent again, marked ``redelivered``."""
        if self.mark.pending is None:
            return None
        return Report(self.mark.pending, self.mark.seq + 1, self.mark.value, redelivered=True)

    def observe(self, value: Any) -> Report | None:
        """The report of ``value`` when it differs from the last value reported (None: no value yet)."""
        if value is None:
            return None
        if self._baseline_pending:
            self._baseline_pending = False
            self.mark = Watermark(value, self.mark.seq)
            self.unsaved = True
            return None
        if self.mark.pending is not None:
            raise RuntimeError("commit() the pending report before observing again")
        if value == self.mark.value:
            return None
        self.mark = Watermark(self.mark.value, self.mark.seq, pending=value)
        self.unsaved = True
        return Report(value, self.mark.seq + 1, self.mark.value)

    def checkpoint(self) -> tuple[Watermark, bool]:
        """The tracker's state, to :meth:`rollback` to when the watermark it leads to cannot be stored."""
        return self.mark, self._baseline_pending

    def rollback(self, checkpoint: tuple[Watermark, bool]) -> None:
        self.mark, self._baseline_pending = checkpoint
        self.unsaved = False

    def commit(self) -> None:
        """The pending report's event is handed over: it becomes the last value reported."""
        if self.mark.pending is not None:
            self.mark = Watermark(self.mark.pending, self.mark.seq + 1)
            self.unsaved = True

    def saved(self) -> None:
        self.unsaved = False
