"""PROOF: our business days are the ``holidays`` library's working days — every country and every financial
calendar the installed library supports, every year it supports, both ways.

The oracle is the library's public per-date API on a fully populated object per calendar:
``is_working_day`` for every holiday and make-up working day, ``is_weekend`` per date for calendars whose
weekend changes over time (their ``weekend`` weekdays otherwise) — and, for a few years of every calendar
(this year included), ``is_working_day`` on every single date. Population is the library's cost
(~8 s for everything), so our calendar's per-year cache is filled by our reader
(``read_library_years``) from the same populated object; how our calendar reads the library in blocks of
years on its own is proven separately below on the calendars with make-up working days.
"""

from __future__ import annotations

import datetime as dt
import random
import warnings

import holidays
import pytest

from airflow_smart_ext.calendars import BusinessCalendar, Source, year_days
from airflow_smart_ext.calendars import library as calendars  # the private block cache lives there


def _unique_calendars() -> list[tuple[str, str]]:
    """(kind, code) once per calendar class (the library registers alpha-2, alpha-3 and MIC aliases)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for code in sorted(holidays.list_supported_countries()):
        seen.setdefault(("country", holidays.country_holidays(code, years=[]).country), ("country", code))
    for code in sorted(holidays.list_supported_financial()):
        seen.setdefault(("market", holidays.financial_holidays(code, years=[]).market), ("market", code))
    return sorted(seen.values())


CALENDARS = _unique_calendars()


def _source(kind: str, code: str) -> Source:
    return Source(code, None, None, None) if kind == "country" else Source(None, None, code, None)


def _oracle_closed(
    made, year: int, holidays_of_year: set[dt.date], per_date_weekend: bool
) -> frozenset[dt.date]:
    """The library's non-working days of ``year``, decided date by date from its public API.

    ``is_working_day`` decides every holiday and every make-up working day; any other date is closed exactly
    when it is a weekend day: ``is_weekend`` per date for a calendar whose weekend changes over time, its
    ``weekend`` weekdays otherwise (what ``is_weekend`` returns for such a calendar)."""
    decided = holidays_of_year | {d for d in made.weekend_workdays if d.year == year}
    closed = {d for d in decided if not made.is_working_day(d)}
    if per_date_weekend:
        weekend = {d for d in year_days(year) if made.is_weekend(d)}
    else:
        weekend = year_days(year, frozenset(made.weekend))
    return frozenset(closed | (weekend - decided))


def _library_closed_by_is_working_day(made, year: int) -> frozenset[dt.date]:
    """The plain oracle: ``is_working_day`` on every date of the year."""
    return frozenset(d for d in year_days(year) if not made.is_working_day(d))


def test_every_library_calendar_every_supported_year_both_ways():
    assert len(CALENDARS) > 250  # 0.109: 250 countries + 33 markets; guards against an empty loop
    rng = random.Random(16)
    calendars._LIBRARY_YEARS.clear()
    mismatches = []
    years_checked = 0
    for kind, code in CALENDARS:
        source = _source(kind, code)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bare = (holidays.country_holidays if kind == "country" else holidays.financial_holidays)(
                code, years=[]
            )
            first, last = bare.start_year, bare.end_year
            made = type(bare)(years=range(first, last + 1)) if kind == "market" else None
            if made is None:
                made = holidays.country_holidays(code, years=range(first, last + 1))
        years = range(first, last + 1)
        for year, data in calendars.read_library_years(made, years).items():
            calendars._LIBRARY_YEARS[(source, year)] = data
        by_year: dict[int, set[dt.date]] = {year: set() for year in years}
        for day in made:
            by_year.setdefault(day.year, set()).add(day)
        ours = BusinessCalendar(**{kind: code})
        per_date = type(made)._get_weekend is not holidays.HolidayBase._get_weekend
        # every year by the per-date decisions; a few years (this one included) by is_working_day on every date
        plain = {min(max(dt.date.today().year, first), last), *rng.sample(years, min(3, len(years)))}
        for year in years:
            expected = _oracle_closed(made, year, by_year[year], per_date)
            if year in plain:
                assert _library_closed_by_is_working_day(made, year) == expected, (code, year)
            got = ours.closed_days(year)
            if got != expected:
                extra, missing = sorted(got - expected)[:3], sorted(expected - got)[:3]
                mismatches.append(f"{code} {year}: we close {extra} (library works), we open {missing}")
            years_checked += 1
        calendars._LIBRARY_YEARS.clear()  # keep memory flat
    assert not mismatches, "\n".join(mismatches[:40])
    assert years_checked > 30_000, years_checked


MAKE_UP_CALENDARS = [
    ("CN", 2000, 2030),
    ("RU", 1991, 2030),
    ("VN", 2000, 2030),
    ("TW", 1998, 2030),
    ("KR", 1990, 2030),
]


@pytest.mark.parametrize(("country", "first", "last"), MAKE_UP_CALENDARS)
def test_blocks_of_years_lose_no_make_up_day_across_new_year(country, first, last):
    """Without the patch: our calendar reads the library in blocks of years; a make-up working day or an
    observed holiday moved across New Year (e.g. a Saturday 12-29 worked for a January holiday) is kept."""
    calendars._LIBRARY_YEARS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oracle = holidays.country_holidays(country, years=range(first - 1, last + 2))
    ours = BusinessCalendar(country=country)
    for year in range(first, last + 1):
        expected = frozenset(d for d in year_days(year) if not oracle.is_working_day(d))
        assert ours.closed_days(year) == expected, year


def test_run_days_of_the_timetable_are_the_library_working_days():
    """Through the real timetable (next_dagrun_info with catchup) for calendars with other weekends and
    make-up days: Israel (Fri/Sat), UAE across its 2022 weekend change, Saudi market (Fri/Sat), China."""
    from airflow_smart_ext.timetables import BusinessDaysTimetable

    cases = [
        ({"country": "IL"}, "2025-12-01", 40),
        ({"country": "AE"}, "2021-12-15", 40),
        ({"market": "XSAU"}, "2025-03-20", 30),
        ({"country": "CN"}, "2024-09-25", 30),
        ({"country": "RU"}, "2024-12-20", 30),
    ]
    for keywords, start, count in cases:
        library = (holidays.country_holidays if "country" in keywords else holidays.financial_holidays)(
            next(iter(keywords.values()))
        )
        timetable = BusinessDaysTimetable(**keywords, timezone="UTC")
        runs = timetable.iter_runs(dt.datetime.fromisoformat(start).replace(tzinfo=dt.timezone.utc), count)
        days = [run.data_interval.start.date() for run in runs]
        span = year_days(days[0].year) | year_days(days[-1].year)
        expected = sorted(d for d in span if days[0] <= d <= days[-1] and library.is_working_day(d))
        assert days == expected, keywords
