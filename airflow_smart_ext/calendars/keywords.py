"""The business-calendar keywords (one definition) and the validation of their values, naming the parameter."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, TypedDict

from airflow_smart_ext.calendars.labels import WEEKDAY_NAMES

WEEKDAY_ALIASES = {
    **{name.lower(): i for i, name in enumerate(WEEKDAY_NAMES)},
    **{
        name: i
        for i, name in enumerate(
            ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
        )
    },
}
DEFAULT_WEEKEND = (5, 6)
"""The weekend of a calendar without a library source (and the one summaries do not mention)."""


class CalendarKeywords(TypedDict, total=False):
    """THE definition of the business-calendar keywords, shared by :class:`BusinessCalendar` and every
    timetable that accepts a calendar (``**keywords: Unpack[CalendarKeywords]``): add an option here once."""

    country: str | None
    subdivision: str | None
    market: str | None
    categories: str | Iterable[str] | None
    extra_holidays: Iterable[datetime.date | str] | None
    extra_business_days: Iterable[datetime.date | str] | None
    weekend: Iterable[int | str] | None


CALENDAR_KEYWORDS: tuple[str, ...] = tuple(CalendarKeywords.__annotations__)


def parse_weekend(values: Iterable[Any] | None) -> tuple[int, ...] | None:
    accepted = (
        "weekday numbers 0-6 (Mon=0 ... Sun=6) or names 'Mon'..'Sun', or None (the calendar's own weekend, "
        "per date)"
    )
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"weekend: expected a collection of {accepted}, got {values!r}.")
    days = set()
    for value in values:
        if isinstance(value, bool):
            raise ValueError(f"weekend: {value!r} is not a weekday; accepted: {accepted}.")
        if isinstance(value, int) and 0 <= value <= 6:
            days.add(value)
        elif isinstance(value, str) and value.lower() in WEEKDAY_ALIASES:
            days.add(WEEKDAY_ALIASES[value.lower()])
        else:
            raise ValueError(f"weekend: {value!r} is not a weekday; accepted: {accepted}.")
    if len(days) == 7:
        raise ValueError(
            "weekend: all seven weekdays are weekend days, so there is no business day; leave at least one out."
        )
    return tuple(sorted(days))


def parse_categories(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = (value,) if isinstance(value, str) else value
    try:
        cats = tuple(sorted({str(c) for c in items}))
    except TypeError:
        raise ValueError(f"categories: expected a list of category names, got {value!r}.") from None
    if not cats:
        raise ValueError("categories: empty list; pass None for the library default or e.g. ('public',).")
    return cats


def optional_code(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}: expected a non-empty code string or None, got {value!r}.")
    return value.strip()
