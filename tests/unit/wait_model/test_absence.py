"""A watcher's absence rule (``wait_model/absence.py``) on calendars beyond the US one of the watcher tests:
hourly checks that never see a value say "late" once on each business day the calendar keeps — a weekend of
its own (Israel), make-up working days on a weekend and a week of holidays (China), a market holiday (NYSE) —
and never on the others. The expected days are the published calendars, written out by hand."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from airflow_smart_ext import units
from airflow_smart_ext.timetables import DueTime
from airflow_smart_ext.wait_model.absence import AbsenceRecord, late_due


def told_days(due: DueTime, zone: str, start: dt.datetime, end: dt.datetime) -> list[str]:
    """The due times (local) hourly checks from ``start`` to ``end`` say late for, with nothing landing."""
    tz = ZoneInfo(zone)
    now, stop = units.epoch(start.replace(tzinfo=tz)), units.epoch(end.replace(tzinfo=tz))
    record, told = AbsenceRecord(since=now), []
    while now < stop:
        due_at = late_due(due, now, record)
        if due_at is not None:
            record = record.telling_for(due_at).told_all()
            told.append(units.utc(due_at).astimezone(tz).strftime("%a %m-%d %H:%M"))
        now += 3600
    return told


@pytest.mark.parametrize(
    ("keywords", "zone", "start", "end", "expected"),
    [
        # Israel works Sunday to Thursday: no alert on Friday 30 or Saturday 31 October 2026
        (
            {"country": "IL"},
            "Asia/Jerusalem",
            dt.datetime(2026, 10, 29, 12),
            dt.datetime(2026, 11, 6, 12),
            ["Sun 11-01", "Mon 11-02", "Tue 11-03", "Wed 11-04", "Thu 11-05"],
        ),
        # China 2025: National Day and Mid-Autumn off 1-8 October; Sunday 28 September and Saturday 11 October
        # are make-up working days
        (
            {"country": "CN"},
            "Asia/Shanghai",
            dt.datetime(2025, 9, 24, 12),
            dt.datetime(2025, 10, 13, 12),
            [
                *("Thu 09-25", "Fri 09-26", "Sun 09-28", "Mon 09-29", "Tue 09-30"),
                *("Thu 10-09", "Fri 10-10", "Sat 10-11", "Mon 10-13"),
            ],
        ),
        # NYSE: closed on Good Friday, 3 April 2026
        (
            {"market": "NYSE"},
            "America/New_York",
            dt.datetime(2026, 3, 30, 12),
            dt.datetime(2026, 4, 7, 12),
            ["Tue 03-31", "Wed 04-01", "Thu 04-02", "Mon 04-06", "Tue 04-07"],
        ),
    ],
    ids=["israel-weekend", "china-make-up-days", "nyse-good-friday"],
)
def test_late_once_on_each_business_day_of_the_calendar_and_never_on_another(
    keywords: dict[str, str], zone: str, start: dt.datetime, end: dt.datetime, expected: list[str]
) -> None:
    due = DueTime("09:30", timezone=zone, **keywords)  # type: ignore[arg-type]
    assert told_days(due, zone, start, end) == [f"{day} 09:30" for day in expected]
