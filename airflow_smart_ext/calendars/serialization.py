"""Calendars from their ``to_dict()`` form (the serialized timetables store it): unknown keys and types are
refused, naming them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_smart_ext.calendars.algebra import COMBINATIONS, BusinessDayCalendar, CombinedCalendar
from airflow_smart_ext.calendars.business import BusinessCalendar
from airflow_smart_ext.calendars.days import EveryDay
from airflow_smart_ext.calendars.keywords import CALENDAR_KEYWORDS, CalendarKeywords
from airflow_smart_ext.calendars.monthly import MonthlyBusinessDay

BUSINESS_CALENDAR_KEYS = ("type", *CALENDAR_KEYWORDS)
_COMBINED_KEYS = ("type", "calendars")
_MONTHLY_KEYS = ("type", "n", "calendar")
CALENDAR_TYPES = ("every_day", "business", *COMBINATIONS, "monthly")


def _check_keys(data: Mapping[str, Any], accepted: tuple[str, ...], what: str) -> None:
    unknown = sorted(str(k) for k in data if k not in accepted)
    if unknown:
        raise ValueError(
            f"calendar: unknown key(s) {', '.join(map(repr, unknown))} in the {what} dict; accepted keys: "
            f"{', '.join(map(repr, accepted))}."
        )


def business_calendar_from_dict(data: Mapping[str, Any]) -> BusinessDayCalendar:
    """A business-day calendar from its ``to_dict()`` form: ``type`` ``"business"`` (may be omitted),
    ``"intersection"``, ``"union"`` or ``"difference"``. Unknown keys and other types are rejected (a typo
    must not silently drop a holiday source)."""
    if not isinstance(data, Mapping):
        raise ValueError(
            f"calendar: expected a dict in BusinessCalendar.to_dict() / CombinedCalendar.to_dict() form, "
            f"got {data!r}."
        )
    kind = data.get("type", "business")
    if kind in COMBINATIONS:
        _check_keys(data, _COMBINED_KEYS, f"{kind} calendar")
        parts = data.get("calendars")
        if not isinstance(parts, (list, tuple)):
            raise ValueError(
                f"calendar: 'calendars' of a {kind} must be a list of calendar dicts, got {parts!r}."
            )
        return CombinedCalendar(kind, [business_calendar_from_dict(part) for part in parts])
    if kind != "business":  # before the keys: a mistyped type is the error, not the keys it brings
        raise ValueError(
            f"calendar: type {kind!r} is not a business-day calendar; accepted: 'business' (or omit 'type'), "
            f"{', '.join(map(repr, COMBINATIONS))}."
        )
    _check_keys(data, BUSINESS_CALENDAR_KEYS, "business calendar")
    keywords: CalendarKeywords = {k: data[k] for k in CALENDAR_KEYWORDS if k in data}  # type: ignore[assignment]
    return BusinessCalendar(**keywords)


def calendar_from_dict(data: Mapping[str, Any]) -> EveryDay | BusinessDayCalendar | MonthlyBusinessDay:
    """Inverse of ``to_dict`` for every calendar type (unknown keys and types are rejected)."""
    kind = data.get("type")
    if kind == "every_day":
        _check_keys(data, ("type",), "every_day calendar")
        return EveryDay()
    if kind == "business" or kind in COMBINATIONS:
        return business_calendar_from_dict(data)
    if kind == "monthly":
        _check_keys(data, _MONTHLY_KEYS, "monthly calendar")
        return MonthlyBusinessDay(business_calendar_from_dict(data["calendar"]), int(data["n"]))
    raise ValueError(
        f"calendar: unknown calendar type {kind!r}; accepted: {', '.join(map(repr, CALENDAR_TYPES))}."
    )
