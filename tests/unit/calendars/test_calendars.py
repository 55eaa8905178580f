"""Business-day calendars (pure date logic + the ``holidays`` library)."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys

import pytest
import time_machine

from airflow_smart_ext.calendars import (
    MAX_SEARCH_DAYS,
    BusinessCalendar,
    CalendarSearchError,
    EveryDay,
    HolidayYearOutOfRange,
    MonthlyBusinessDay,
    algebra,
    business_calendar_from_dict,
    calendar_from_dict,
    holiday_dates,
)
from tests.unit.calendars.helpers import business_days

D = dt.date.fromisoformat


def test_nyse_thanksgiving_and_good_friday():
    nyse = BusinessCalendar(market="NYSE")
    # Thanksgiving 2024-11-28 closed; Friday 29th (half day) is a trading day; weekend skipped
    assert business_days(nyse, "2024-11-25", "2024-12-03") == [
        "2024-11-25",
        "2024-11-26",
        "2024-11-27",
        "2024-11-29",
        "2024-12-02",
        "2024-12-03",
    ]
    # Easter-based: Good Friday moves every year (2024-03-29, 2025-04-18)
    assert not nyse.contains(D("2024-03-29"))
    assert not nyse.contains(D("2025-04-18"))
    assert nyse.contains(D("2025-04-21"))  # Easter Monday is a NYSE trading day ...
    assert not BusinessCalendar(country="DE").contains(D("2025-04-21"))  # ... but a German holiday


def test_country_subdivision_and_thanksgiving():
    us = BusinessCalendar(country="US")
    assert not us.contains(D("2024-11-28"))  # Thanksgiving: 4th Thursday of November
    assert not us.contains(D("2023-11-23"))
    bavaria = BusinessCalendar(country="DE", subdivision="BY")
    berlin = BusinessCalendar(country="DE", subdivision="BE")
    epiphany = D("2025-01-06")  # a Monday; a holiday in Bavaria, not in Berlin
    assert not bavaria.contains(epiphany)
    assert berlin.contains(epiphany)


def test_country_and_market_combine():
    both = BusinessCalendar(country="DE", market="NYSE")
    assert not both.contains(D("2024-11-28"))  # NYSE Thanksgiving
    assert not both.contains(D("2024-10-03"))  # German Unity Day
    assert both.contains(D("2024-10-04"))


def test_extra_lists_and_weekend():
    cal = BusinessCalendar(
        extra_holidays=["2024-01-02", dt.date(2024, 1, 3)],
        extra_business_days=["2024-01-06"],  # a Saturday
    )
    assert business_days(cal, "2024-01-01", "2024-01-08") == [
        "2024-01-01",
        "2024-01-04",
        "2024-01-05",
        "2024-01-06",
        "2024-01-08",
    ]
    fri_sat = BusinessCalendar(weekend=("Fri", "sat"))
    assert fri_sat.weekend == (4, 5)
    assert business_days(fri_sat, "2024-01-01", "2024-01-07") == [
        "2024-01-01",
        "2024-01-02",
        "2024-01-03",
        "2024-01-04",
        "2024-01-07",
    ]
    assert BusinessCalendar(weekend=[]).contains(D("2024-01-06"))


def test_next_and_prev_business_day_cross_year():
    nyse = BusinessCalendar(market="NYSE")
    assert nyse.next_on_or_after(D("2024-12-31")) == D("2024-12-31")
    assert nyse.next_on_or_after(D("2025-01-01")) == D("2025-01-02")
    assert nyse.prev_on_or_before(D("2025-01-01")) == D("2024-12-31")
    assert nyse.prev_on_or_before(D("2024-12-29")) == D("2024-12-27")


def test_bounded_search_raises_instead_of_looping(monkeypatch):
    # A real calendar with such a run is refused at construction (next test); shrink the bound instead.
    start = D("2030-01-01")
    closed = [start + dt.timedelta(days=i) for i in range(100)]
    cal = BusinessCalendar(extra_holidays=closed)
    monkeypatch.setattr(algebra, "MAX_SEARCH_DAYS", 50)  # where the business-day search reads it
    with pytest.raises(CalendarSearchError, match=r"within the 50 days on or after 2030-01-01\.$"):
        cal.next_on_or_after(start)
    with pytest.raises(CalendarSearchError, match=r"within the 50 days on or before 2030-04-10\.$"):
        cal.prev_on_or_before(closed[-1])


def closed_days(first: str, count: int, *, skip: tuple[int, ...] = ()) -> list[dt.date]:
    """``count`` consecutive days from ``first``, without the weekdays in ``skip``."""
    days = [D(first) + dt.timedelta(days=i) for i in range(count)]
    return [d for d in days if d.weekday() not in skip]


def longest_closed_run(cal: BusinessCalendar, first: dt.date, last: dt.date) -> int:
    """Brute force: the longest run of consecutive non-business days between ``first`` and ``last``."""
    best = current = 0
    day = first
    while day <= last:
        current = 0 if cal.contains(day) else current + 1
        best = max(best, current)
        day += dt.timedelta(days=1)
    return best


def unchecked(**kwargs) -> BusinessCalendar:
    """The calendar as it was accepted before the construction check (to brute-force its runs)."""
    original = BusinessCalendar._check_closed_runs
    BusinessCalendar._check_closed_runs = lambda self: None  # type: ignore[method-assign]
    try:
        return BusinessCalendar(**kwargs)
    finally:
        BusinessCalendar._check_closed_runs = original  # type: ignore[method-assign]


SAT_SUN = (5, 6)
REFUSED = {
    "exactly the bound": {"extra_holidays": closed_days("2030-01-01", MAX_SEARCH_DAYS)},
    "800 days (issue)": {"extra_holidays": closed_days("2030-01-01", 800)},
    # only weekdays listed: the weekends in between join them into one run of days off
    "weekdays only": {"extra_holidays": closed_days("2030-01-07", 740, skip=SAT_SUN)},
    # 730 listed days from Monday 2030-01-07 + the weekend before them (2030-01-05/06) = 732
    "weekend at the edge": {"extra_holidays": closed_days("2030-01-07", 730)},
    # a Friday/Saturday weekend bridges Sunday-to-Thursday lists
    "fri-sat weekend": {
        "extra_holidays": closed_days("2030-01-06", 742, skip=(4, 5)),
        "weekend": ("Fri", "Sat"),
    },
    # Wed 2030-01-02 .. Fri 2032-01-02 listed (731) + New Year's Day 2030 (NYSE holiday) + weekend after
    "library holiday at the edge": {
        "market": "NYSE",
        "extra_holidays": closed_days("2030-01-02", 731),
    },
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_closed_run_at_or_beyond_search_bound_is_refused_at_construction(name):
    """Before the fix these calendars were accepted, and the scheduler's bounded search raised
    CalendarSearchError later (Airflow 3 logs it and the DAG silently stops being scheduled)."""
    kwargs = REFUSED[name]
    listed = sorted(kwargs["extra_holidays"])
    length = longest_closed_run(
        unchecked(**kwargs), listed[0] - dt.timedelta(days=20), listed[-1] + dt.timedelta(days=20)
    )
    assert length >= MAX_SEARCH_DAYS  # test premise
    with pytest.raises(
        ValueError, match=r"^extra_holidays: \d{4}-\d\d-\d\d \.\. \d{4}-\d\d-\d\d are "
    ) as caught:
        BusinessCalendar(**kwargs)
    message = str(caught.value)
    assert f"are {length} consecutive non-business days" in message, message
    assert f"at most {MAX_SEARCH_DAYS - 1} consecutive days off are accepted" in message, message


ACCEPTED = {
    "one below the bound": {"extra_holidays": closed_days("2030-01-01", MAX_SEARCH_DAYS - 1)},
    # weekdays listed for 900 days; one Saturday in the middle is a business day and splits the run
    "broken by an extra business day": {
        "extra_holidays": closed_days("2030-01-01", 900, skip=SAT_SUN),
        "extra_business_days": ["2031-03-29"],
    },
    # Sunday is a business day here, so the Saturday before Monday 2030-01-07 does not join: 730 + 0
    "saturday-only weekend": {"extra_holidays": closed_days("2030-01-07", 730), "weekend": ("Sat",)},
    # Wed 2030-01-02 .. Thu 2032-01-01 + New Year's Day 2030 = 731; Fri 2032-01-02 is a NYSE business day
    "library holiday at the edge": {"market": "NYSE", "extra_holidays": closed_days("2030-01-02", 730)},
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_closed_runs_below_the_bound_are_accepted_and_searchable(name):
    cal = BusinessCalendar(**ACCEPTED[name])
    listed = sorted(cal.extra_holidays)
    first, last = listed[0] - dt.timedelta(days=20), listed[-1] + dt.timedelta(days=20)
    assert longest_closed_run(cal, first, last) < MAX_SEARCH_DAYS
    day = first
    while day <= last:  # every search in and around the run succeeds
        assert cal.next_on_or_after(day) >= day and cal.prev_on_or_before(day) <= day
        day += dt.timedelta(days=7)


def test_monthly_nth_and_last():
    nyse = BusinessCalendar(market="NYSE")
    first = MonthlyBusinessDay(nyse, 1)
    last = MonthlyBusinessDay(nyse, -1)
    second_last = MonthlyBusinessDay(nyse, -2)
    assert first.in_month(2025, 1) == D("2025-01-02")  # New Year's Day closed
    assert first.in_month(2025, 6) == D("2025-06-02")  # 1st is a Sunday
    assert last.in_month(2024, 3) == D("2024-03-28")  # Good Friday 29th closed
    assert last.in_month(2024, 11) == D("2024-11-29")
    assert second_last.in_month(2024, 3) == D("2024-03-27")
    assert last.next_on_or_after(D("2024-03-29")) == D("2024-04-30")
    assert last.prev_on_or_before(D("2024-04-29")) == D("2024-03-28")
    assert last.contains(D("2024-03-28")) and not last.contains(D("2024-03-27"))


def test_monthly_clamps_when_month_is_short():
    # February 2026 has 20 weekdays; NYSE closes on Presidents' Day (16th): 19 business days
    twentieth = MonthlyBusinessDay(BusinessCalendar(market="NYSE"), 20)
    assert twentieth.in_month(2026, 2) == D("2026-02-27")  # clamped to the last business day
    twentieth_from_last = MonthlyBusinessDay(BusinessCalendar(market="NYSE"), -20)
    assert twentieth_from_last.in_month(2026, 2) == D("2026-02-02")


@pytest.mark.parametrize("n", [0, 24, -24, 1.0, True, "1"])
def test_monthly_rejects_bad_n(n):
    with pytest.raises(ValueError, match=r"^n: expected a non-zero integer between -23 and 23"):
        MonthlyBusinessDay(BusinessCalendar(), n)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"country": "XX"}, r"country: unknown country code 'XX'\. Accepted: .*US.*list_supported_countries"),
        (
            {"country": "US", "subdivision": "ZZ"},
            r"subdivision: unknown subdivision 'ZZ' of country 'US'\. Accepted: .*NY",
        ),
        ({"subdivision": "NY"}, r"subdivision: needs `country`"),
        ({"market": "NOPE"}, r"market: unknown financial market 'NOPE'\. Accepted .*NYSE"),
        (
            {"country": "US", "categories": ["nonsense"]},
            r"^categories: 'nonsense' not supported by country 'US'; accepted: 'government', 'half_day', "
            r"'public', 'unofficial' \(None = the library default, usually 'public'\)\.$",
        ),
        (
            {"country": "DE", "categories": ["public", "government"]},
            r"^categories: 'government' not supported by country 'DE'; accepted: 'catholic', 'public', 'school' ",
        ),
        (
            {"market": "NYSE", "categories": ["bank"]},
            r"^categories: 'bank' not supported by market 'NYSE'; accepted: 'half_day', 'public' ",
        ),
        ({"categories": ["public"]}, r"categories: needs `country` or `market`"),
        ({"country": ""}, r"country: expected a non-empty code string"),
        ({"extra_holidays": ["2024-13-01"]}, r"extra_holidays: '2024-13-01' is not an ISO date"),
        ({"extra_holidays": "2024-01-01"}, r"extra_holidays: expected a list of dates"),
        ({"extra_business_days": [20240101]}, r"extra_business_days: 20240101 is not a date"),
        ({"extra_holidays": [dt.datetime(2024, 1, 1)]}, r"extra_holidays: .* is a datetime"),
        (
            {"extra_holidays": ["2024-01-01"], "extra_business_days": ["2024-01-01"]},
            r"in both lists: 2024-01-01",
        ),
        ({"weekend": range(7)}, r"weekend: all seven weekdays"),
        ({"weekend": "Sat"}, r"weekend: expected a collection"),
        ({"weekend": [7]}, r"weekend: 7 is not a weekday; accepted: weekday numbers 0-6"),
        ({"weekend": ["Caturday"]}, r"weekend: 'Caturday' is not a weekday"),
    ],
)
def test_business_calendar_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BusinessCalendar(**kwargs)


def test_calendar_is_immutable_hashable_and_round_trips():
    cal = BusinessCalendar(
        country="US", subdivision="NY", categories=("public",), extra_holidays=["2024-07-05"], weekend=(6,)
    )
    again = calendar_from_dict(cal.to_dict())
    assert again == cal and hash(again) == hash(cal)
    assert calendar_from_dict(EveryDay().to_dict()) == EveryDay()
    monthly = MonthlyBusinessDay(cal, -1)
    assert calendar_from_dict(monthly.to_dict()) == monthly
    with pytest.raises(AttributeError):
        cal.country = "DE"  # type: ignore[misc]
    with pytest.raises(ValueError, match="calendar: unknown calendar type"):
        calendar_from_dict({"type": "lunar"})


def test_holiday_sets_are_cached_frozensets_per_year():
    first = holiday_dates(None, None, "NYSE", None, 2031)
    assert isinstance(first, frozenset)
    assert all(day.year == 2031 for day in first)
    assert D("2031-12-25") in first
    nyse = BusinessCalendar(market="NYSE")
    assert nyse.closed_days(2031) is nyse.closed_days(2031)  # one frozenset per calendar and year


def test_labels():
    assert BusinessCalendar(market="NYSE").label() == "NYSE business days"
    assert BusinessCalendar(country="DE", subdivision="BY").label() == "DE-BY business days"
    assert (
        MonthlyBusinessDay(BusinessCalendar(market="NYSE"), -1).label()
        == "last NYSE business day of the month"
    )
    assert MonthlyBusinessDay(BusinessCalendar(), 3).label() == "3rd business day of the month"
    assert MonthlyBusinessDay(BusinessCalendar(), -2).label() == "2nd-to-last business day of the month"


def test_importing_timetables_does_not_import_holidays():
    code = (
        "import sys, airflow_smart_ext.timetables, airflow_smart_ext.plugin; print('holidays' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


# --- holiday data outside the library's supported years --------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "year", "name", "supported"),
    [
        ({"market": "XETR"}, 2015, "market 'XETR'", "2016-2100"),
        ({"market": "HKEX"}, 2013, "market 'HKEX'", "2014-2100"),
        ({"market": "NYSE"}, 2101, "market 'NYSE'", "1863-2100"),
        ({"country": "DE", "subdivision": "BY"}, 1990, "country 'DE' (subdivision 'BY')", "1991-2100"),
        ({"country": "US", "market": "XETR"}, 2010, "market 'XETR'", "2016-2100"),
    ],
)
def test_year_outside_library_range_raises_instead_of_returning_no_holidays(kwargs, year, name, supported):
    """Before the fix holiday_dates returned an empty set there: every weekday became a business day."""
    cal = BusinessCalendar(**kwargs)
    parameter = "market" if name.startswith("market") else "country"
    pattern = rf"^{parameter}: the `holidays` library \(.*\) has no holiday data for {re.escape(name)} in {year}; it supports {supported} only\."
    with pytest.raises(HolidayYearOutOfRange, match=pattern):
        cal.holidays_in(year)
    weekday = next(d for d in (dt.date(year, 7, i) for i in range(1, 8)) if d.weekday() < 5)
    with pytest.raises(HolidayYearOutOfRange, match=pattern):
        cal.contains(weekday)
    with pytest.raises(HolidayYearOutOfRange):
        cal.next_on_or_after(weekday)
    assert issubclass(HolidayYearOutOfRange, ValueError)


def test_supported_years_come_from_the_library():
    import holidays

    with pytest.raises(HolidayYearOutOfRange, match=f"supports {holidays.XETR.start_year}-"):
        BusinessCalendar(market="XETR").contains(dt.date(holidays.XETR.start_year - 1, 6, 1))
    assert BusinessCalendar(market="NYSE").contains(D("2100-12-31")) is True  # last covered year still works
    assert BusinessCalendar(market="XETR").holidays_in(2016)


@pytest.mark.parametrize(
    ("kwargs", "today", "message"),
    [
        ({"market": "XETR"}, "2015-06-01", r"^market: .*'XETR' in 2015; it supports 2016-2100 only"),
        ({"market": "BYMA"}, "2025-06-01", r"^market: .*'BYMA' in 2025; it supports 2026-2100 only"),
        ({"country": "US"}, "2101-01-02", r"^country: .*'US' in 2101; it supports 1777-2100 only"),
    ],
)
def test_calendar_not_covering_today_fails_at_construction(kwargs, today, message):
    moment = dt.datetime.fromisoformat(today + "T12:00:00+00:00")
    with time_machine.travel(moment, tick=False), pytest.raises(HolidayYearOutOfRange, match=message):
        BusinessCalendar(**kwargs)


# --- calendar dicts --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"type": "business", "markte": "NYSE"},
            r"^calendar: unknown key\(s\) 'markte' in the business calendar dict; accepted keys: 'type', "
            r"'country', 'subdivision', 'market', 'categories', 'extra_holidays', 'extra_business_days', "
            r"'weekend'\.$",
        ),
        ({"type": "business", "contry": "US", "holidays": []}, r"unknown key\(s\) 'contry', 'holidays'"),
        ({"type": "every_day", "market": "NYSE"}, r"unknown key\(s\) 'market' in the every_day calendar"),
        (
            {"type": "monthly", "n": 1, "calendar": {}, "window": "day"},
            r"unknown key\(s\) 'window' in the monthly",
        ),
        (
            {"type": "monthly", "n": 1, "calendar": {"type": "every_day"}},
            r"type 'every_day' is not a business",
        ),
        (
            {"type": "lunar"},
            r"unknown calendar type 'lunar'; accepted: 'every_day', 'business', 'intersection', 'union', "
            r"'difference', 'monthly'\.$",
        ),
    ],
)
def test_calendar_dict_with_unknown_keys_or_type_is_rejected(data, message):
    with pytest.raises(ValueError, match=message):
        calendar_from_dict(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"markte": "NYSE"}, r"^calendar: unknown key\(s\) 'markte' .*accepted keys: 'type', 'country'"),
        (
            {"type": "monthly", "market": "NYSE"},
            r"^calendar: type 'monthly' is not a business-day calendar; "
            r"accepted: 'business' \(or omit 'type'\), 'intersection', 'union', 'difference'\.$",
        ),
        ({"type": "every_day"}, r"^calendar: type 'every_day' is not a business-day calendar"),
        # a mistyped combination type names the accepted types, not the keys it brings
        (
            {"type": "intersect", "calendars": []},
            r"^calendar: type 'intersect' is not a business-day calendar",
        ),
        ("NYSE", r"^calendar: expected a dict"),
    ],
)
def test_business_calendar_dict_rejects_unknown_keys_and_types(data, message):
    with pytest.raises(ValueError, match=message):
        business_calendar_from_dict(data)


def test_business_calendar_dict_type_may_be_omitted():
    assert business_calendar_from_dict({"market": "NYSE"}) == BusinessCalendar(market="NYSE")
