"""Day calendars for the timetables: which local calendar days are scheduled, and why the others are not.

Pure date logic (``datetime.date`` only): no Airflow, no time zones. The timetables turn the days chosen
here into aware instants at the edges. One concept per module; every public name is importable from here.

* :mod:`.days` — :class:`DayCalendar` (what the engine needs), :class:`EveryDay`, the search bound
  :data:`MAX_SEARCH_DAYS`: a calendar with no scheduled day in that range raises :class:`CalendarSearchError`
  instead of looping.
* :mod:`.library` — the ``holidays`` library, imported lazily (~70 ms; the scheduler imports the timetables
  on every parse loop) and read in blocks of years into immutable per-year sets (cached); a ``holidays``
  object is never shared (they mutate while expanding years). A year it has no data for is refused
  (:class:`HolidayYearOutOfRange`), never read as "no holidays".
* :mod:`.business` — :class:`BusinessCalendar`: the working days of a library calendar (country +
  optional subdivision, and/or a financial market such as ``"NYSE"``) as the library models them — each
  calendar's own weekend per date, its holidays and make-up working days — with your ``weekend``,
  ``extra_holidays`` and ``extra_business_days`` overriding.
* :mod:`.lists` — your lists of days; :mod:`.keywords` — the calendar keywords and their validation.
* :mod:`.algebra` — :class:`BusinessDayCalendar` and :class:`CombinedCalendar`: all open (``a & b``), any
  open (``a | b``), the first open and the second closed (``a - b``). ``contains`` is one frozenset lookup,
  whatever a calendar combines.
* :mod:`.monthly` — :class:`MonthlyBusinessDay`, the nth / nth-from-last business day of each month.
* :mod:`.labels` — weekday names and ordinals for labels and explanations.
* :mod:`.serialization` — calendars from their ``to_dict()`` form.
* :mod:`.coverage` — the library calendars a calendar reads and the years their holiday data covers.
"""

from __future__ import annotations

from airflow_smart_ext.calendars.algebra import (
    COMBINATIONS,
    BusinessDayCalendar,
    CombinedCalendar,
    difference,
    intersection,
    union,
)
from airflow_smart_ext.calendars.business import BusinessCalendar
from airflow_smart_ext.calendars.days import (
    MAX_SEARCH_DAYS,
    CalendarSearchError,
    DayCalendar,
    EveryDay,
    year_days,
)
from airflow_smart_ext.calendars.keywords import CALENDAR_KEYWORDS, DEFAULT_WEEKEND, CalendarKeywords
from airflow_smart_ext.calendars.labels import WEEKDAY_NAMES, ordinal, weekday_names
from airflow_smart_ext.calendars.library import (
    HolidayYearOutOfRange,
    LibraryYear,
    Source,
    holiday_dates,
    library_year,
    read_library_years,
    source_years,
)
from airflow_smart_ext.calendars.monthly import MAX_NTH, MonthlyBusinessDay
from airflow_smart_ext.calendars.serialization import (
    BUSINESS_CALENDAR_KEYS,
    CALENDAR_TYPES,
    business_calendar_from_dict,
    calendar_from_dict,
)

__all__ = [
    "BUSINESS_CALENDAR_KEYS",
    "CALENDAR_KEYWORDS",
    "CALENDAR_TYPES",
    "COMBINATIONS",
    "DEFAULT_WEEKEND",
    "MAX_NTH",
    "MAX_SEARCH_DAYS",
    "WEEKDAY_NAMES",
    "BusinessCalendar",
    "BusinessDayCalendar",
    "CalendarKeywords",
    "CalendarSearchError",
    "CombinedCalendar",
    "DayCalendar",
    "EveryDay",
    "HolidayYearOutOfRange",
    "LibraryYear",
    "MonthlyBusinessDay",
    "Source",
    "business_calendar_from_dict",
    "calendar_from_dict",
    "difference",
    "holiday_dates",
    "intersection",
    "library_year",
    "ordinal",
    "read_library_years",
    "source_years",
    "union",
    "weekday_names",
    "year_days",
]
