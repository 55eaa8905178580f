"""Helpers for the timetable tests: local times, intervals, and next_dagrun_info as the scheduler calls it."""

from __future__ import annotations

import datetime as dt

import pendulum
import time_machine

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.compat.timetables import DataInterval, TimeRestriction
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
)

NY = "America/New_York"
H = dt.timedelta(hours=1)
D = dt.date.fromisoformat


def at(value: str, tz: str = NY) -> pendulum.DateTime:
    return pendulum.parse(value, tz=tz)


def day_of(info, tz: str = NY) -> str:
    """The run's scheduled local day D (its interval ends at the start of D+1)."""
    end = info.data_interval.end.in_tz(tz)
    return (end.date() - dt.timedelta(days=1)).isoformat()


def interval(start: str, end: str, tz: str = NY) -> DataInterval:
    return DataInterval(at(start, tz).in_tz("UTC"), at(end, tz).in_tz("UTC"))


def next_info(timetable, *, now, last=None, earliest=None, latest=None, catchup=False):
    restriction = TimeRestriction(earliest=earliest, latest=latest, catchup=catchup)
    with time_machine.travel(now, tick=False):
        return timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)


def walk(timetable, *, now, earliest, latest=None, catchup=True, last=None, limit=400):
    """Call next_dagrun_info like the scheduler until it returns None (or ``limit`` runs)."""
    infos = []
    for _ in range(limit):
        info = next_info(timetable, now=now, last=last, earliest=earliest, latest=latest, catchup=catchup)
        if info is None:
            break
        infos.append(info)
        last = info.data_interval
    return infos


def every_local_day(first: str, last: str) -> list[dt.date]:
    out, day = [], D(first)
    while day <= D(last):
        out.append(day)
        day += dt.timedelta(days=1)
    return out


NYSE = BusinessCalendar(market="NYSE")
NYSE_6H = BusinessDaysTimetable(market="NYSE", delay=6 * H, timezone=NY)
