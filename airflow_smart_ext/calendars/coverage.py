"""Which years a calendar's holiday data covers: the library calendars it reads and their common years.

A calendar without a library source (every day, or only your own weekend and lists) covers every year.
"""

from __future__ import annotations

from airflow_smart_ext.calendars.algebra import CombinedCalendar
from airflow_smart_ext.calendars.business import BusinessCalendar
from airflow_smart_ext.calendars.days import DayCalendar
from airflow_smart_ext.calendars.library import Source, source_years
from airflow_smart_ext.calendars.monthly import MonthlyBusinessDay


def library_sources(*calendars: DayCalendar) -> tuple[Source, ...]:
    """Every ``holidays`` library calendar the given calendars read (each once, in order)."""
    found: dict[Source, None] = {}
    for calendar in calendars:
        if isinstance(calendar, BusinessCalendar):
            found.update(dict.fromkeys(calendar.sources))
        elif isinstance(calendar, CombinedCalendar):
            found.update(dict.fromkeys(library_sources(*calendar.parts)))
        elif isinstance(calendar, MonthlyBusinessDay):
            found.update(dict.fromkeys(library_sources(calendar.calendar)))
    return tuple(found)


def covered_years(sources: tuple[Source, ...]) -> tuple[int, int] | None:
    """The (first, last) year every one of ``sources`` has data for; None without sources (every year).

    An empty range (first > last) means no year is covered by all of them."""
    if not sources:
        return None
    ranges = [source_years(source) for source in sources]
    return max(first for first, _ in ranges), min(last for _, last in ranges)


def coverage_text(sources: tuple[Source, ...]) -> str:
    """E.g. ``"market 'BYMA' 2026-2100"`` or ``"market 'NYSE' 1863-2100, market 'XLON' 1995-2100"``."""
    return ", ".join(f"{source.name} {'-'.join(map(str, source_years(source)))}" for source in sources)
