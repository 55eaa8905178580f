"""Helpers for the calendar tests."""

from __future__ import annotations

import datetime as dt

from airflow_smart_ext.calendars import BusinessCalendar

D = dt.date.fromisoformat


def business_days(calendar: BusinessCalendar, first: str, last: str) -> list[str]:
    day, out = D(first), []
    while day <= D(last):
        if calendar.contains(day):
            out.append(day.isoformat())
        day += dt.timedelta(days=1)
    return out
