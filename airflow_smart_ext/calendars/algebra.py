"""Calendar algebra: the business-day set every business calendar is (with its ``&``, ``|`` and ``-``) and the
combinations they make. The base class lives here because its operators build :class:`CombinedCalendar`."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from airflow_smart_ext.calendars.days import MAX_SEARCH_DAYS, ONE_DAY, CalendarSearchError, year_days


class BusinessDayCalendar:
    """A set of business days (base of :class:`BusinessCalendar` and :class:`CombinedCalendar`).

    Each year is one frozenset of closed days, computed once per calendar: ``contains`` is one dict get
    and one set lookup, whatever the calendar combines. Immutable and hashable; ``a & b`` (all open),
    ``a | b`` (any open) and ``a - b`` (``a`` open, ``b`` closed) combine calendars.
    """

    __slots__ = ("_closed_by_year",)

    _closed_by_year: dict[int, frozenset[datetime.date]]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init_cache(self) -> None:
        # year -> closed days: values are immutable, so concurrent fills are harmless
        object.__setattr__(self, "_closed_by_year", {})

    # --- to implement ----------------------------------------------------------------------------------

    def _compute_closed(self, year: int) -> frozenset[datetime.date]:
        raise NotImplementedError

    def explain(self, day: datetime.date) -> str | None:
        """Why ``day`` is not a business day (e.g. ``"NYSE holiday: Thanksgiving Day"``); None if it is."""
        raise NotImplementedError

    def working_note(self, day: datetime.date) -> str | None:
        """Why a business day on a weekday that is usually off is open (make-up working day), else None."""
        raise NotImplementedError

    def name(self) -> str:
        """Short name for labels and combinations, e.g. ``"NYSE"``, ``"IL (weekend Fri/Sat)"``."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    # --- shared ------------------------------------------------------------------------------------------

    def closed_days(self, year: int) -> frozenset[datetime.date]:
        """The non-business days of ``year`` (cached)."""
        closed = self._closed_by_year.get(year)
        if closed is None:
            closed = self._closed_by_year[year] = self._compute_closed(year)
        return closed

    # The hot path: one dict get, one set lookup.
    def contains(self, day: datetime.date) -> bool:
        closed = self._closed_by_year.get(day.year)
        if closed is None:
            closed = self.closed_days(day.year)
        return day not in closed

    def next_on_or_after(self, day: datetime.date) -> datetime.date:
        start = day
        for _ in range(MAX_SEARCH_DAYS):
            if self.contains(day):
                return day
            day += ONE_DAY
        raise CalendarSearchError(
            f"{self.label()}: no business day within the {MAX_SEARCH_DAYS} days on or after {start.isoformat()}."
        )

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        start = day
        for _ in range(MAX_SEARCH_DAYS):
            if self.contains(day):
                return day
            day -= ONE_DAY
        raise CalendarSearchError(
            f"{self.label()}: no business day within the {MAX_SEARCH_DAYS} days on or before {start.isoformat()}."
        )

    def label(self) -> str:
        return f"{self.name()} business days"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __and__(self, other: BusinessDayCalendar) -> CombinedCalendar:
        return CombinedCalendar("intersection", (self, other))

    def __or__(self, other: BusinessDayCalendar) -> CombinedCalendar:
        return CombinedCalendar("union", (self, other))

    def __sub__(self, other: BusinessDayCalendar) -> CombinedCalendar:
        return CombinedCalendar("difference", (self, other))


COMBINATIONS = {
    "intersection": "days all of them are open (a & b)",
    "union": "days any of them is open (a | b)",
    "difference": "days the first is open and the second closed (a - b)",
}


class CombinedCalendar(BusinessDayCalendar):
    """Calendar algebra over business-day calendars: ``"intersection"`` (all open, ``a & b``), ``"union"``
    (any open, ``a | b``) or ``"difference"`` (the first open and the second closed, ``a - b``).

    Accepted wherever a business calendar is (``calendar=``). Rejected at construction: fewer than two
    calendars (exactly two for a difference), a part that is not a business-day calendar, and a combination
    with no business day within :data:`MAX_SEARCH_DAYS` days from today (e.g. ``a - a``).
    """

    __slots__ = ("op", "parts")

    op: str
    parts: tuple[BusinessDayCalendar, ...]

    def __init__(self, op: str, parts: Iterable[BusinessDayCalendar]) -> None:
        if op not in COMBINATIONS:
            raise ValueError(
                f"calendar: unknown combination {op!r}; accepted: "
                + ", ".join(f"{k!r} ({v})" for k, v in COMBINATIONS.items())
                + "."
            )
        flat: list[BusinessDayCalendar] = []
        for part in parts:
            if not isinstance(part, BusinessDayCalendar):
                raise ValueError(
                    f"calendar: a {op} combines business-day calendars (BusinessCalendar or a combination of "
                    f"them), got {part!r}."
                )
            if op != "difference" and isinstance(part, CombinedCalendar) and part.op == op:
                flat.extend(part.parts)  # (a & b) & c == a & b & c
            else:
                flat.append(part)
        if op != "difference":
            flat = list(dict.fromkeys(flat))  # a & a == a
        if op == "difference" and len(flat) != 2:
            raise ValueError(f"calendar: a difference takes exactly two calendars (a - b), got {len(flat)}.")
        if len(flat) < 2:
            raise ValueError(
                f"calendar: a {op} needs at least two different calendars, got {len(flat)}: "
                "use the calendar itself."
            )
        self._init_cache()
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "parts", tuple(flat))
        start = datetime.date.today()
        try:
            self.next_on_or_after(start)
        except CalendarSearchError:
            raise ValueError(
                f"calendar: {self.label()} has no business day in the {MAX_SEARCH_DAYS} days from "
                f"{start.isoformat()} — the combination is empty or contradictory "
                f"({COMBINATIONS[op]}); check the calendars and their weekends."
            ) from None

    def _key(self) -> tuple[Any, ...]:
        return (self.op, self.parts)

    def __repr__(self) -> str:
        return f"CombinedCalendar({self.op!r}, {list(self.parts)!r})"

    def _compute_closed(self, year: int) -> frozenset[datetime.date]:
        closed = [part.closed_days(year) for part in self.parts]
        if self.op == "intersection":
            return frozenset().union(*closed)
        if self.op == "union":
            return frozenset.intersection(*closed)
        return closed[0] | (year_days(year) - closed[1])

    def explain(self, day: datetime.date) -> str | None:
        if self.contains(day):
            return None
        if self.op == "difference":
            first, second = self.parts
            return first.explain(day) or f"{second.name()} open (excluded)"
        reasons = (part.explain(day) for part in self.parts)
        return "; ".join(dict.fromkeys(r for r in reasons if r)) or None

    def working_note(self, day: datetime.date) -> str | None:
        for part in self.parts:
            if part.contains(day):
                note = part.working_note(day)
                if note:
                    return note
        return None

    def _part_names(self) -> list[str]:
        return [f"({p.name()})" if isinstance(p, CombinedCalendar) else p.name() for p in self.parts]

    def closed_text(self) -> str:
        """When this combination is closed, e.g. ``"XLON and DE are both closed"`` for ``XLON | DE``."""
        names = self._part_names()
        listed = ", ".join(names[:-1])
        if self.op == "union":  # closed when every part is
            return f"{listed} and {names[-1]} are {'both' if len(names) == 2 else 'all'} closed"
        if self.op == "intersection":  # closed when any part is
            return f"{listed} or {names[-1]} is closed"
        return f"({self.name()}) is closed"

    def name(self) -> str:
        names = self._part_names()
        if self.op == "difference":
            return f"{names[0]} when {_closed_text(self.parts[1])}"
        joined = ", ".join(names[:-1]) + (" and " if self.op == "intersection" else " or ") + names[-1]
        return joined

    def label(self) -> str:
        if self.op == "difference":
            return f"{self.parts[0].label()} when {_closed_text(self.parts[1])}"
        return f"{self.name()} business days"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.op, "calendars": [part.to_dict() for part in self.parts]}


def _closed_text(calendar: BusinessDayCalendar) -> str:
    if isinstance(calendar, CombinedCalendar):
        return calendar.closed_text()
    return f"{calendar.name()} is closed"


def intersection(*calendars: BusinessDayCalendar) -> CombinedCalendar:
    """The days all ``calendars`` are open, e.g. ``intersection(BusinessCalendar(market="NYSE"),
    BusinessCalendar(market="XLON"))`` (same as ``a & b``)."""
    return CombinedCalendar("intersection", calendars)


def union(*calendars: BusinessDayCalendar) -> CombinedCalendar:
    """The days any of ``calendars`` is open (same as ``a | b``)."""
    return CombinedCalendar("union", calendars)


def difference(first: BusinessDayCalendar, second: BusinessDayCalendar) -> CombinedCalendar:
    """The days ``first`` is open and ``second`` is closed (same as ``first - second``)."""
    return CombinedCalendar("difference", (first, second))
