"""The nth / nth-from-last business day of each month of a business-day calendar."""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext.calendars.algebra import BusinessDayCalendar
from airflow_smart_ext.calendars.days import MAX_SEARCH_DAYS, ONE_DAY, CalendarSearchError
from airflow_smart_ext.calendars.labels import ordinal

MAX_NTH = 23
"""Largest ``abs(n)`` for :class:`MonthlyBusinessDay` (a month has at most 23 Mon-Fri days)."""


@functools.lru_cache(maxsize=4096)  # calendars are frozen and hashable; a month is scanned once
def _scheduled_in_month(calendar: BusinessDayCalendar, n: int, year: int, month: int) -> datetime.date | None:
    first = datetime.date(year, month, 1)
    last = (first + datetime.timedelta(days=32)).replace(day=1) - ONE_DAY
    step, day, stop = (ONE_DAY, first, last) if n > 0 else (-ONE_DAY, last, first)
    found: datetime.date | None = None
    count = 0
    while True:
        if calendar.contains(day):
            found, count = day, count + 1
            if count == abs(n):
                return found
        if day == stop:
            return found  # fewer than abs(n) business days: clamp to the last one found
        day += step


@dataclass(frozen=True)
class MonthlyBusinessDay:
    """The ``n``-th business day of each month (``n >= 1``), or the ``-n``-th from last (``n <= -1``).

    A month with fewer than ``abs(n)`` business days uses its last (``n > 0``) or first (``n < 0``)
    business day, so every month with a business day has exactly one scheduled day.
    """

    calendar: BusinessDayCalendar
    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.calendar, BusinessDayCalendar):
            raise ValueError(
                f"calendar: expected a BusinessCalendar or a combination of them, got {self.calendar!r}."
            )
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n == 0 or abs(self.n) > MAX_NTH:
            raise ValueError(
                f"n: expected a non-zero integer between -{MAX_NTH} and {MAX_NTH} "
                f"(1 = first business day, -1 = last business day), got {self.n!r}."
            )

    def in_month(self, year: int, month: int) -> datetime.date | None:
        """The scheduled day of the month, or None when the month has no business day at all."""
        return _scheduled_in_month(self.calendar, self.n, year, month)

    def contains(self, day: datetime.date) -> bool:
        return self.in_month(day.year, day.month) == day

    def explain(self, day: datetime.date) -> str | None:
        if self.contains(day):
            return None
        return self.calendar.explain(day) or f"not the {self.label().removesuffix(' of the month')}"

    def next_on_or_after(self, day: datetime.date) -> datetime.date:
        year, month = day.year, day.month
        for _ in range(MAX_SEARCH_DAYS // 28):
            chosen = self.in_month(year, month)
            if chosen is not None and chosen >= day:
                return chosen
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        raise CalendarSearchError(
            f"{self.label()}: no scheduled day within {MAX_SEARCH_DAYS // 28} months after {day}."
        )

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        year, month = day.year, day.month
        for _ in range(MAX_SEARCH_DAYS // 28):
            chosen = self.in_month(year, month)
            if chosen is not None and chosen <= day:
                return chosen
            year, month = (year - 1, 12) if month == 1 else (year, month - 1)
        raise CalendarSearchError(
            f"{self.label()}: no scheduled day within {MAX_SEARCH_DAYS // 28} months before {day}."
        )

    def to_dict(self) -> dict[str, Any]:
        return {"type": "monthly", "n": self.n, "calendar": self.calendar.to_dict()}

    def label(self) -> str:
        base = self.calendar.label().replace("business days", "business day")
        if self.n == -1:
            return f"last {base} of the month"
        if self.n < 0:
            return f"{ordinal(-self.n)}-to-last {base} of the month"
        return f"{ordinal(self.n)} {base} of the month"
