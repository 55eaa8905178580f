"""Business-day calendars (pure date logic + the ``holidays`` library)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

from airflow_smart_ext.calendars import (
    MAX_SEARCH_DAYS,
    BusinessCalendar,
    CalendarSearchError,
    EveryDay,
    MonthlyBusinessDay,
    calendar_from_dict,
    holiday_dates,
)

D = dt.date.fromisoformat


def business_days(calendar: BusinessCalendar, first: str, last: str) -> list[str]:
    day, out = D(first), []
    while day <= D(last):
        if calendar.contains(day):
            out.append(day.isoformat())
        day += dt.timedelta(days=1)
    return out


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


def test_bounded_search_raises_instead_of_looping():
    start = D("2030-01-01")
    closed = [start + dt.timedelta(days=i) for i in range(MAX_SEARCH_DAYS + 10)]
    cal = BusinessCalendar(extra_holidays=closed)
    with pytest.raises(CalendarSearchError, match="no business day within"):
        cal.next_on_or_after(start)
    with pytest.raises(CalendarSearchError):
        cal.prev_on_or_before(closed[-1])


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
        ({"country": "US", "categories": ["nonsense"]}, r"categories: .*supported_categories"),
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
    assert holiday_dates(None, None, "NYSE", None, 2031) is first
    assert all(day.year == 2031 for day in first)
    assert D("2031-12-25") in first


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
