"""Timetables: delayed-daily, rolling N-day windows, business days and nth/last business day of the month;
and ``DueTime``, when a wait's data is due, on the same calendars and engine.

All share one engine (``_engine.ScheduleEngine``): calendar (every day / business days / nth business day
of the month) x window (the day / N local days / since the previous run) x delay, computed on local
calendar days of an IANA time zone. Importing this package does not import ``holidays`` (it is imported
lazily when a business-day calendar is built): the scheduler imports it via the plugin on every parse loop.
"""

from __future__ import annotations

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables.business_days import BusinessDaysTimetable
from airflow_smart_ext.timetables.delayed_daily import DelayedDailyTimetable
from airflow_smart_ext.timetables.due import DueTime, InvalidDueTime
from airflow_smart_ext.timetables.local_day import InvalidTimetableParameter, LocalDayTimetable
from airflow_smart_ext.timetables.monthly_business_day import MonthlyBusinessDayTimetable
from airflow_smart_ext.timetables.rolling_window import RollingWindowTimetable

TIMETABLE_CLASSES: tuple[type[LocalDayTimetable], ...] = (
    DelayedDailyTimetable,
    RollingWindowTimetable,
    BusinessDaysTimetable,
    MonthlyBusinessDayTimetable,
)

__all__ = [
    "TIMETABLE_CLASSES",
    "BusinessCalendar",
    "BusinessDaysTimetable",
    "DelayedDailyTimetable",
    "DueTime",
    "InvalidDueTime",
    "InvalidTimetableParameter",
    "MonthlyBusinessDayTimetable",
    "RollingWindowTimetable",
]
