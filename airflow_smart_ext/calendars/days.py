"""Scheduled days: the protocol the timetable engine needs from a calendar, every day, and the search bound."""

from __future__ import annotations

import datetime
import functools
import itertools
from dataclasses import dataclass
from typing import Any, Protocol

MAX_SEARCH_DAYS = 366 * 2
"""Longest run of consecutive non-business days a calendar may contain."""

ONE_DAY = datetime.timedelta(days=1)


class CalendarSearchError(ValueError):
    """No scheduled day was found within the bounded search range."""


class DayCalendar(Protocol):
    """What the timetable engine needs from a calendar: the set of scheduled local days."""

    def contains(self, day: datetime.date) -> bool: ...

    def next_on_or_after(self, day: datetime.date) -> datetime.date: ...

    def prev_on_or_before(self, day: datetime.date) -> datetime.date: ...

    def explain(self, day: datetime.date) -> str | None: ...

    def to_dict(self) -> dict[str, Any]: ...

    def label(self) -> str: ...


@functools.lru_cache(maxsize=256)
def year_days(year: int, weekdays: frozenset[int] | None = None) -> frozenset[datetime.date]:
    """Every date of ``year`` (or only those on ``weekdays``), cached."""
    first = datetime.date(year, 1, 1).toordinal()
    stop = datetime.date(year + 1, 1, 1).toordinal()
    if weekdays is None:
        return frozenset(map(datetime.date.fromordinal, range(first, stop)))
    first_weekday = datetime.date.fromordinal(first).weekday()
    return frozenset(
        itertools.chain.from_iterable(
            map(datetime.date.fromordinal, range(first + (weekday - first_weekday) % 7, stop, 7))
            for weekday in weekdays
        )
    )


@dataclass(frozen=True)
class EveryDay:
    """Every local calendar day is scheduled."""

    def contains(self, day: datetime.date) -> bool:
        return True

    def next_on_or_after(self, day: datetime.date) -> datetime.date:
        return day

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        return day

    def explain(self, day: datetime.date) -> str | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "every_day"}

    def label(self) -> str:
        return "daily"
