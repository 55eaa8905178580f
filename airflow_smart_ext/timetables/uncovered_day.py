"""The first local day a DAG's schedule needs that its calendar's holiday data does not cover (pure).

The scheduler asks a timetable for runs from the DAG's ``start_date`` (both catchup modes search from it),
for the run due now and for the one after it. If any of these needs a year the ``holidays`` library has no
data for, the timetable refuses it (:class:`~airflow_smart_ext.calendars.HolidayYearOutOfRange`) and
Airflow only logs it: the DAG never runs again. This module finds that day before the scheduler does, by
asking the same :class:`~._engine.ScheduleEngine` the same questions — the horizon is the run after the one
due now, so a DAG is flagged once its last covered run is due, never earlier (an import error stops the
DAG's covered runs too), and before the day the first uncovered run would have run.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, NamedTuple

from airflow_smart_ext.calendars import HolidayYearOutOfRange
from airflow_smart_ext.calendars.coverage import coverage_text, covered_years, library_sources
from airflow_smart_ext.calendars.library import Source, holidays_version
from airflow_smart_ext.timetables.engine import ScheduleEngine

if TYPE_CHECKING:
    from airflow_smart_ext.timetables.local_day import LocalDayTimetable


class CoverageGap(NamedTuple):
    """A day the schedule needs outside the years its calendar's holiday data covers."""

    day: datetime.date
    sources: tuple[Source, ...]
    years: tuple[int, int]
    from_start: bool  # True: the start_date is uncovered; False: the runs from now reach past the data


def first_uncovered_day(
    engine: ScheduleEngine,
    *,
    start: datetime.datetime | None,
    end: datetime.datetime | None,
    catchup: bool,
    now: datetime.datetime,
) -> CoverageGap | None:
    """The first day the scheduler would need beyond the holiday data (None: every needed day is covered).

    Cheap when covered: a few cached calendar lookups (what the scheduler computes anyway)."""
    sources = library_sources(engine.calendar, engine.lag_calendar)
    years = covered_years(sources)
    if years is None:
        return None  # no library data: every year is covered
    first, last = years
    if start is not None:
        start_day = engine.local_date(start)
        if not first <= start_day.year <= last:
            return CoverageGap(start_day, sources, years, from_start=True)
    try:
        if catchup and start is not None:  # the first run: its window may look back before start_date
            engine.next_slot(
                last_start=None, last_end=None, earliest=start, latest=end, catchup=True, now=now
            )
        due = engine.next_slot(
            last_start=None, last_end=None, earliest=start, latest=end, catchup=False, now=now
        )
        if due is not None:  # the run after the one due now: the next the scheduler creates
            engine.next_slot(
                last_start=due.start, last_end=due.end, earliest=start, latest=end, catchup=True, now=now
            )
    except HolidayYearOutOfRange as err:
        day = datetime.date(err.year, 1, 1) if err.year > last else datetime.date(err.year, 12, 31)
        if end is not None and err.year > last and day > engine.local_date(end):
            return None  # only the search past end_date reaches there: no run needs it
        return CoverageGap(day, sources, years, from_start=False)
    return None


def coverage_message(what: str, gap: CoverageGap, *, catchup: bool, version: str) -> str:
    """The import error's text: the calendar, the years its data covers and the first uncovered day."""
    first, last = gap.years
    covers = f"{first}-{last}" if first <= last else "no common year"
    if gap.from_start:
        needs = f"its start_date {gap.day.isoformat()} (catchup={catchup})"
        fix = f"move start_date to {first}-01-01 or later"
    elif gap.day.year > last:
        needs = f"{gap.day.isoformat()} for its next runs"
        fix = f"set end_date to {last}-12-31 or earlier"
    else:
        needs = f"{gap.day.isoformat()}: its first run's data interval looks back there"
        fix = f"move start_date later into {first}"
    outcome = (
        "silently stop after its last covered run"
        if gap.day.year > last and not gap.from_start
        else "silently never run"
    )
    return (
        f"{what}: the holiday data of its calendar ({coverage_text(gap.sources)}; `holidays` {version}) "
        f"covers {covers} only, but this DAG needs {needs}. Outside those years the calendar has no holidays, "
        f"so the timetable refuses to compute the runs and the DAG would {outcome}. "
        f"Fix: {fix}, upgrade `holidays` if a newer release covers these years, or use a calendar whose "
        "data covers them. (Check by airflow-smart-ext's DAG policy; [smart_ext] check_holiday_coverage.)"
    )


def coverage_problem(
    timetable: LocalDayTimetable,
    *,
    start: datetime.datetime | None,
    end: datetime.datetime | None,
    catchup: bool,
    now: datetime.datetime,
) -> str | None:
    """The import error for a DAG with this timetable and time restriction, or None when all is covered."""
    gap = first_uncovered_day(timetable.engine, start=start, end=end, catchup=catchup, now=now)
    if gap is None:
        return None
    return coverage_message(type(timetable).__name__, gap, catchup=catchup, version=holidays_version())
