"""Business calendars as the world keeps them (issue 16): each calendar's own weekend and make-up working
days, precedence of the explicit lists, calendar algebra, business-day lag (T+k), the serialized forms of
the previous release, and the preview command."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import holidays
import pendulum
import pytest
import time_machine

from airflow_smart_ext import compat
from airflow_smart_ext.calendars import (
    BusinessCalendar,
    CombinedCalendar,
    calendar_from_dict,
    difference,
    intersection,
    union,
)
from airflow_smart_ext.compat.timetables import TimeRestriction
from airflow_smart_ext.preview import main as preview_main
from airflow_smart_ext.preview import preview
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    InvalidTimetableParameter,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)
from tests.unit.calendars.helpers import business_days as days

D = dt.date.fromisoformat
NY = "America/New_York"
UTC = dt.timezone.utc


def run_days(timetable, start: str, count: int, tz: str = "UTC") -> list[str]:
    runs = timetable.iter_runs(pendulum.parse(start, tz=tz), count)
    return [run.data_interval.end.in_tz(tz).date().isoformat() for run in runs]  # with window="day": D+1


def scheduled(timetable, start: str, count: int, tz: str = "UTC") -> list[str]:
    return [(D(end) - dt.timedelta(days=1)).isoformat() for end in run_days(timetable, start, count, tz)]


# --- each calendar's own weekend and make-up days -----------------------------------------------------


def test_israel_runs_sunday_to_thursday():
    assert scheduled(BusinessDaysTimetable(country="IL"), "2026-11-01", 5) == [
        "2026-11-01",  # Sun
        "2026-11-02",
        "2026-11-03",
        "2026-11-04",
        "2026-11-05",  # Thu; Fri/Sat off
    ]


def test_uae_weekend_changed_in_2022():
    uae = BusinessCalendar(country="AE")
    # 2021: Fri/Sat weekend, Sunday is a working day; 2022: Sat/Sun, Friday works
    assert days(uae, "2021-12-24", "2021-12-30") == [
        "2021-12-26",
        "2021-12-27",
        "2021-12-28",
        "2021-12-29",
        "2021-12-30",
    ]
    assert days(uae, "2022-01-09", "2022-01-15") == [
        "2022-01-10",
        "2022-01-11",
        "2022-01-12",
        "2022-01-13",
        "2022-01-14",
    ]


def test_saudi_market_trades_sunday_to_thursday():
    tadawul = BusinessCalendar(market="XSAU")
    assert days(tadawul, "2026-11-01", "2026-11-07") == [
        "2026-11-01",
        "2026-11-02",
        "2026-11-03",
        "2026-11-04",
        "2026-11-05",
    ]
    assert tadawul.label() == "XSAU business days (weekend Fri/Sat)"


@pytest.mark.parametrize(
    ("country", "make_up_day"),
    [
        ("CN", "2024-02-04"),
        ("CN", "2024-10-12"),
        ("RU", "2024-11-02"),
        ("VN", "2024-05-04"),
        ("TW", "2024-02-17"),
    ],
)
def test_make_up_working_weekend_days_are_run_days(country, make_up_day):
    library = holidays.country_holidays(country, years=D(make_up_day).year)
    assert D(make_up_day).weekday() >= 5 and library.is_working_day(D(make_up_day))  # the library says so
    calendar = BusinessCalendar(country=country)
    assert calendar.contains(D(make_up_day))
    assert calendar.working_note(D(make_up_day)) == f"{country} make-up working day"
    timetable = BusinessDaysTimetable(country=country)
    start = (D(make_up_day) - dt.timedelta(days=3)).isoformat()
    assert make_up_day in scheduled(timetable, start, 4)


def test_monthly_rolling_and_since_previous_follow_the_calendar_weekend():
    # Israel: the last business day of January 2026 is Thursday 01-29 (Fri 30 / Sat 31 are weekend)
    last = MonthlyBusinessDayTimetable(-1, country="IL", window="day")
    assert scheduled(last, "2026-01-01", 1) == ["2026-01-29"]
    # the since_previous window of Sunday's run starts after Thursday's day: it covers Fri, Sat, Sun
    since = BusinessDaysTimetable(country="IL", window="since_previous")
    runs = since.iter_runs(pendulum.datetime(2026, 11, 5, tz="UTC"), 2)
    assert [
        (r.data_interval.start.date().isoformat(), r.data_interval.end.date().isoformat()) for r in runs
    ] == [
        ("2026-11-05", "2026-11-06"),
        ("2026-11-06", "2026-11-09"),
    ]
    rolling = RollingWindowTimetable(3, country="IL")
    assert scheduled(rolling, "2026-11-01", 3) == ["2026-11-03", "2026-11-04", "2026-11-05"]


def test_precedence_extra_business_day_then_extra_holiday_then_make_up_then_holiday_then_weekend():
    # explicit weekend replaces Israel's Fri/Sat on every date; library holidays still apply
    il_sat_sun = BusinessCalendar(country="IL", weekend=("Sat", "Sun"))
    assert il_sat_sun.contains(D("2026-11-06"))  # a Friday: open with the explicit weekend
    assert not il_sat_sun.contains(D("2026-11-08"))  # a Sunday: closed
    # China: a make-up Sunday stays a working day under an explicit weekend, an extra holiday closes it,
    # an extra business day opens a holiday
    assert BusinessCalendar(country="CN", weekend=(5, 6)).contains(D("2024-02-04"))
    assert not BusinessCalendar(country="CN", extra_holidays=["2024-02-04"]).contains(D("2024-02-04"))
    assert BusinessCalendar(country="CN", extra_business_days=["2024-10-01"]).contains(D("2024-10-01"))
    assert (
        BusinessCalendar(country="CN", extra_holidays=["2024-02-04"]).explain(D("2024-02-04"))
        == "extra holiday"
    )


def test_summaries_name_a_weekend_that_is_not_saturday_sunday():
    assert BusinessDaysTimetable(country="IL", timezone="Asia/Jerusalem").summary == (
        "IL business days (weekend Fri/Sat) 00:00 Asia/Jerusalem"
    )
    assert "IL business day (weekend Fri/Sat)" in BusinessDaysTimetable(country="IL").description
    assert BusinessDaysTimetable(market="NYSE").summary == "NYSE business days 00:00 UTC"
    assert MonthlyBusinessDayTimetable(-1, country="IL").summary.startswith(
        "last IL business day (weekend Fri/Sat) of the month"
    )


# --- calendar algebra --------------------------------------------------------------------------------------


NYSE = BusinessCalendar(market="NYSE")
LSE = BusinessCalendar(market="XLON")


def test_intersection_union_difference():
    both, either, only_ny = NYSE & LSE, NYSE | LSE, NYSE - LSE
    assert intersection(NYSE, LSE) == both and union(NYSE, LSE) == either and difference(NYSE, LSE) == only_ny
    # Thanksgiving 2026-11-26: NYSE closed, LSE open; Boxing Day (observed) 2026-12-28: LSE closed
    assert not both.contains(D("2026-11-26")) and either.contains(D("2026-11-26"))
    assert not both.contains(D("2026-12-28")) and only_ny.contains(D("2026-12-28"))
    assert days(only_ny, "2026-01-01", "2026-12-31") == [
        d for d in days(NYSE, "2026-01-01", "2026-12-31") if not LSE.contains(D(d))
    ]
    assert both.explain(D("2026-12-28")) == "XLON holiday: Boxing Day (observed)"
    assert both.explain(D("2026-12-25")) == "NYSE holiday: Christmas Day; XLON holiday: Christmas Day"
    assert both.label() == "NYSE and XLON business days"
    assert either.label() == "NYSE or XLON business days"
    assert only_ny.label() == "NYSE business days when XLON is closed"
    # The summary says what the difference means, whatever it subtracts.
    nyse, xlon, de = (
        BusinessCalendar(market="NYSE"),
        BusinessCalendar(market="XLON"),
        BusinessCalendar(country="DE"),
    )
    assert (nyse - (xlon | de)).label() == "NYSE business days when XLON and DE are both closed"
    assert (nyse - (xlon & de)).label() == "NYSE business days when XLON or DE is closed"
    assert BusinessCalendar(country="US", weekend=[]).label() == "US business days (no weekend)"
    assert (nyse - (xlon - de)).label() == "NYSE business days when (XLON when DE is closed) is closed"
    assert (NYSE & LSE & BusinessCalendar(market="JPX")).parts == (NYSE, LSE, BusinessCalendar(market="JPX"))


@pytest.mark.parametrize("make", [lambda: NYSE & LSE, lambda: NYSE | LSE, lambda: NYSE - LSE])
def test_combined_calendar_usable_wherever_a_calendar_is_and_round_trips(make):
    calendar = make()
    for timetable in (
        BusinessDaysTimetable(calendar=calendar, timezone=NY),
        MonthlyBusinessDayTimetable(-1, calendar=calendar, timezone=NY),
        RollingWindowTimetable(5, calendar=calendar, timezone=NY),
    ):
        data = compat.serialization.encode_timetable(timetable)
        json.dumps(data)
        restored = compat.serialization.decode_timetable(json.loads(json.dumps(data)))
        assert restored == timetable and restored.summary == timetable.summary
        start = pendulum.datetime(2026, 11, 20, tz=NY)
        assert restored.iter_runs(start, 6) == timetable.iter_runs(start, 6)
    assert calendar_from_dict(calendar.to_dict()) == calendar


def test_intersection_is_the_same_as_checking_both():
    timetable = BusinessDaysTimetable(calendar=NYSE & LSE, timezone=NY)
    got = scheduled(timetable, "2026-01-01", 200, NY)
    expected = [d for d in days(NYSE, "2026-01-01", "2026-12-31") if LSE.contains(D(d))][:200]
    assert got == expected


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: NYSE - NYSE,
            r"^calendar: a difference takes exactly two calendars|^calendar: NYSE business days when NYSE is closed has no business day",
        ),
        (
            lambda: BusinessCalendar(weekend=[0, 1, 2]) & BusinessCalendar(weekend=[3, 4, 5, 6]),
            r"^calendar: .* has no business day in the 732 days from .* empty or contradictory",
        ),
        (lambda: CombinedCalendar("intersection", [NYSE]), r"^calendar: a intersection needs at least two"),
        (
            lambda: CombinedCalendar("xor", [NYSE, LSE]),
            r"^calendar: unknown combination 'xor'; accepted: 'intersection'",
        ),
        (
            lambda: CombinedCalendar("union", [NYSE, "XLON"]),
            r"^calendar: a union combines business-day calendars",
        ),
        (
            lambda: CombinedCalendar("difference", [NYSE, LSE, NYSE]),
            r"^calendar: a difference takes exactly two",
        ),
        (
            lambda: BusinessDaysTimetable(
                calendar={"type": "intersection", "calendars": [{"market": "NYSE"}]}
            ),
            r"^calendar: a intersection needs at least two",
        ),
        (
            lambda: BusinessDaysTimetable(calendar={"type": "union", "calendars": "NYSE"}),
            r"^calendar: 'calendars' of a union must be a list",
        ),
    ],
)
def test_empty_or_contradictory_combination_fails_at_parse(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_combined_calendar_in_a_timetable_raises_invalid_timetable_parameter():
    with pytest.raises(InvalidTimetableParameter, match="^calendar: "):
        BusinessDaysTimetable(
            calendar={"type": "difference", "calendars": [{"market": "NYSE"}, {"market": "NYSE"}]}
        )


# --- business-day lag (T+k) ------------------------------------------------------------------------------


def _info(timetable, *, now: str, last=None, earliest=None, catchup=True):
    restriction = TimeRestriction(earliest=earliest, latest=None, catchup=catchup)
    with time_machine.travel(pendulum.parse(now, tz=NY), tick=False):
        return timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)


def test_lag_two_runs_at_the_second_business_day_over_weekend_and_holiday():
    t2 = BusinessDaysTimetable(market="NYSE", lag=2, delay=dt.timedelta(hours=6), timezone=NY)
    runs = t2.iter_runs(pendulum.datetime(2026, 11, 23, tz=NY), 5)
    got = [
        (
            r.data_interval.start.in_tz(NY).date().isoformat(),
            r.data_interval.end.in_tz(NY).date().isoformat(),
            r.run_after.in_tz(NY).isoformat(),
        )
        for r in runs
    ]
    assert got == [
        ("2026-11-23", "2026-11-24", "2026-11-25T06:00:00-05:00"),  # Mon -> Wed
        ("2026-11-24", "2026-11-25", "2026-11-27T06:00:00-05:00"),  # Tue -> Fri (Thanksgiving skipped)
        ("2026-11-25", "2026-11-26", "2026-11-30T06:00:00-05:00"),  # Wed -> Mon
        ("2026-11-27", "2026-11-28", "2026-12-01T06:00:00-05:00"),  # Fri -> Tue
        ("2026-11-30", "2026-12-01", "2026-12-02T06:00:00-05:00"),
    ]
    assert t2.summary == "NYSE business days T+2 06:00 America/New_York"
    assert "on the 2nd business day after D (T+2)" in t2.description


def test_lag_across_dst_keeps_the_wall_clock_time():
    t1 = BusinessDaysTimetable(market="NYSE", lag=1, delay=dt.timedelta(hours=2, minutes=30), timezone=NY)
    runs = t1.iter_runs(pendulum.datetime(2026, 3, 5, tz=NY), 3)  # Thu, Fri -> Mon after spring-forward Sun
    assert [r.run_after.in_tz(NY).isoformat() for r in runs] == [
        "2026-03-06T02:30:00-05:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]


def test_lag_with_catchup_false_and_manual_inference_agree():
    t2 = BusinessDaysTimetable(market="NYSE", lag=2, delay=dt.timedelta(hours=6), timezone=NY)
    # Mon 11-30 07:00: the latest run due is Wed 11-25's (run Mon 11-30 06:00); Fri 11-27's is due Tue
    info = _info(t2, now="2026-11-30T07:00", earliest=pendulum.datetime(2026, 11, 1, tz=NY), catchup=False)
    assert info.data_interval.start.in_tz(NY).date() == D("2026-11-25")
    manual = t2.infer_manual_data_interval(run_after=pendulum.parse("2026-11-30T07:00", tz=NY))
    assert manual == info.data_interval
    early = t2.infer_manual_data_interval(run_after=pendulum.parse("2026-11-30T05:00", tz=NY))
    assert early.start.in_tz(NY).date() == D("2026-11-24")
    # the next call after that run waits for Fri 11-27's (due Tue 12-01 06:00)
    following = _info(t2, now="2026-11-30T07:00", last=info.data_interval, catchup=False)
    assert following.data_interval.start.in_tz(NY).date() == D("2026-11-27")
    assert following.run_after.in_tz(NY).isoformat() == "2026-12-01T06:00:00-05:00"


def test_monthly_close_processed_on_the_second_business_day_of_next_month():
    close = MonthlyBusinessDayTimetable(-1, market="NYSE", lag=2, delay=dt.timedelta(hours=7), timezone=NY)
    runs = close.iter_runs(pendulum.datetime(2026, 1, 1, tz=NY), 3)
    assert [r.run_after.in_tz(NY).date().isoformat() for r in runs] == [
        "2026-02-03",
        "2026-03-03",
        "2026-04-02",
    ]
    assert runs[0].data_interval.end.in_tz(NY).date() == D("2026-01-31")  # the data interval did not move


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: BusinessDaysTimetable(market="NYSE", lag=-1),
            r"^lag: expected a whole number of business days between 0 and 30",
        ),
        (lambda: BusinessDaysTimetable(market="NYSE", lag=1.5), r"^lag: expected a whole number"),
        (lambda: BusinessDaysTimetable(market="NYSE", lag=True), r"^lag: expected a whole number"),
        (
            lambda: BusinessDaysTimetable(market="NYSE", lag=2, delay=dt.timedelta(days=1)),
            r"^delay: with lag=2 .* shorter than 1 day",
        ),
        (lambda: RollingWindowTimetable(3, lag=1), r"^lag: counts business days, so it needs a calendar"),
        (
            lambda: BusinessDaysTimetable(markte="NYSE"),
            r"^markte: unknown argument; accepted calendar keywords: calendar, country",
        ),
    ],
)
def test_bad_lag_and_keywords_fail_at_parse(make, message):
    with pytest.raises(InvalidTimetableParameter, match=message):
        make()


def test_lag_serializes_only_when_set_and_round_trips():
    plain = BusinessDaysTimetable(market="NYSE")
    assert "lag" not in plain.serialize()
    t2 = BusinessDaysTimetable(market="NYSE", lag=2, delay=dt.timedelta(hours=6), timezone=NY)
    assert t2.serialize()["lag"] == 2
    assert BusinessDaysTimetable.deserialize(t2.serialize()) == t2


# --- the previous release's serialized forms still load ----------------------------------------------------

# Literal output of the previous release (main before issue 16) through Airflow's own encoder.
PREVIOUS_RELEASE = [
    '{"__type": "airflow_smart_ext.timetables.delayed_daily.DelayedDailyTimetable", "__var": {"timezone": "America/New_York", "delay": 9000.0}}',
    '{"__type": "airflow_smart_ext.timetables.rolling_window.RollingWindowTimetable", "__var": {"timezone": "Europe/Berlin", "delay": 3600.0, "days": 7, "calendar": null}}',
    '{"__type": "airflow_smart_ext.timetables.rolling_window.RollingWindowTimetable", "__var": {"timezone": "America/New_York", "delay": 21600.0, "days": 5, "calendar": {"type": "business", "country": null, "subdivision": null, "market": "NYSE", "categories": null, "extra_holidays": [], "extra_business_days": [], "weekend": [5, 6]}}}',
    '{"__type": "airflow_smart_ext.timetables.business_days.BusinessDaysTimetable", "__var": {"timezone": "America/New_York", "delay": 3600.0, "calendar": {"type": "business", "country": null, "subdivision": null, "market": "NYSE", "categories": null, "extra_holidays": [], "extra_business_days": [], "weekend": [5, 6]}, "window": "since_previous"}}',
    '{"__type": "airflow_smart_ext.timetables.business_days.BusinessDaysTimetable", "__var": {"timezone": "UTC", "delay": 0.0, "calendar": {"type": "business", "country": "DE", "subdivision": "BY", "market": null, "categories": ["public"], "extra_holidays": ["2026-12-24"], "extra_business_days": ["2026-12-26"], "weekend": [5, 6]}, "window": "day"}}',
    '{"__type": "airflow_smart_ext.timetables.business_days.BusinessDaysTimetable", "__var": {"timezone": "UTC", "delay": 0.0, "calendar": {"type": "business", "country": "IL", "subdivision": null, "market": null, "categories": null, "extra_holidays": [], "extra_business_days": [], "weekend": [5, 6]}, "window": "day"}}',
    '{"__type": "airflow_smart_ext.timetables.monthly_business_day.MonthlyBusinessDayTimetable", "__var": {"timezone": "America/New_York", "delay": 7200.0, "n": -1, "calendar": {"type": "business", "country": null, "subdivision": null, "market": "NYSE", "categories": null, "extra_holidays": [], "extra_business_days": [], "weekend": [5, 6]}, "window": "since_previous"}}',
    '{"__type": "airflow_smart_ext.timetables.monthly_business_day.MonthlyBusinessDayTimetable", "__var": {"timezone": "UTC", "delay": 0.0, "n": 3, "calendar": {"type": "business", "country": "US", "subdivision": null, "market": null, "categories": null, "extra_holidays": [], "extra_business_days": [], "weekend": [4, 5]}, "window": "day"}}',
]
PREVIOUS_SUMMARIES = [
    "daily 02:30 America/New_York",
    "7-day window, daily 01:00 Europe/Berlin",
    "5-day window, NYSE business days 06:00 America/New_York",
    "NYSE business days (incl. days off) 01:00 America/New_York",
    "DE-BY business days +custom 00:00 UTC",
    "IL business days 00:00 UTC",
    "last NYSE business day of the month 02:00 America/New_York",
    "3rd US business day (weekend Fri/Sat) of the month 00:00 UTC",
]


@pytest.mark.parametrize(("literal", "summary"), list(zip(PREVIOUS_RELEASE, PREVIOUS_SUMMARIES, strict=True)))
def test_previous_release_serialized_timetables_still_load(literal, summary):
    timetable = compat.serialization.decode_timetable(json.loads(literal))
    timetable.validate()
    assert timetable.summary == summary
    assert len(timetable.iter_runs(pendulum.datetime(2026, 11, 1, tz="UTC"), 5)) == 5
    # the stored weekend list is kept as an explicit weekend: the schedule is the one that was serialized
    # until the dag-processor re-parses the DAG file with this release
    assert (
        compat.serialization.decode_timetable(compat.serialization.encode_timetable(timetable)) == timetable
    )


def test_previous_release_israel_form_keeps_its_stored_weekend():
    timetable = compat.serialization.decode_timetable(json.loads(PREVIOUS_RELEASE[5]))
    assert scheduled(timetable, "2026-11-01", 3) == [
        "2026-11-02",
        "2026-11-03",
        "2026-11-04",
    ]  # Mon-Fri, as stored


# --- preview ----------------------------------------------------------------------------------------------------

DAG_FILE = """
import datetime as dt
import pendulum
from airflow import DAG
from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables import BusinessDaysTimetable

with DAG(
    dag_id="nyse_and_lse",
    schedule=BusinessDaysTimetable(
        calendar=BusinessCalendar(market="NYSE") & BusinessCalendar(market="XLON", extra_holidays=["2026-12-31"]),
        lag=1, delay=dt.timedelta(hours=6), timezone="America/New_York",
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="America/New_York"),
):
    pass
"""


def test_preview_lists_runs_and_every_skipped_day_with_its_reason(tmp_path, capsys):
    path = tmp_path / "dag_preview.py"
    path.write_text(DAG_FILE)
    assert (
        preview_main([str(path), "nyse_and_lse", "-n", "6", "-p", "1", "--at", "2026-12-22T12:00", "--json"])
        == 0
    )
    [result] = json.loads(capsys.readouterr().out)
    assert result["dag_id"] == "nyse_and_lse" and result["timezone"] == NY
    assert [r["day"] for r in result["previous"]] == ["2026-12-21"]  # Mon 12-21, run Tue 12-22 06:00
    assert [r["day"] for r in result["next"]] == [
        "2026-12-22",
        "2026-12-23",
        "2026-12-24",
        "2026-12-29",
        "2026-12-30",
        "2027-01-04",
    ]
    skipped = {s["day"]: s["reason"] for r in result["next"] for s in r["skipped_before"]}
    assert skipped == {
        "2026-12-25": "NYSE holiday: Christmas Day; XLON holiday: Christmas Day",
        "2026-12-26": "NYSE weekend (Sat/Sun); XLON weekend (Sat/Sun)",
        "2026-12-27": "NYSE weekend (Sat/Sun); XLON weekend (Sat/Sun)",
        "2026-12-28": "XLON holiday: Boxing Day (observed)",
        "2026-12-31": "extra holiday",
        "2027-01-01": "NYSE holiday: New Year's Day; XLON holiday: New Year's Day",
        "2027-01-02": "NYSE weekend (Sat/Sun); XLON weekend (Sat/Sun)",
        "2027-01-03": "NYSE weekend (Sat/Sun); XLON weekend (Sat/Sun)",
    }
    first = result["next"][0]
    assert first["data_interval_start"] == "2026-12-22T00:00:00-05:00"
    assert first["data_interval_end"] == "2026-12-23T00:00:00-05:00"
    assert first["run_after"] == "2026-12-23T06:00:00-05:00"  # T+1
    assert (
        result["next"][2]["run_after"] == "2026-12-29T06:00:00-05:00"
    )  # Thu 12-24 -> next open day Tue 12-29
    # text form
    assert preview_main([str(path), "-n", "8", "--at", "2026-12-22T12:00"]) == 0
    text = capsys.readouterr().out
    assert "skipped Mon 2026-12-28: XLON holiday: Boxing Day (observed)" in text
    assert "skipped Thu 2026-12-31: extra holiday" in text
    assert "NYSE and XLON+custom business days T+1 06:00 America/New_York" in text


def test_preview_reports_a_missing_dag_and_bad_arguments(tmp_path, capsys):
    path = tmp_path / "dag_preview.py"
    path.write_text(DAG_FILE)
    assert preview_main([str(path), "nope"]) == 2
    assert "dag_id: no DAG 'nope'" in capsys.readouterr().err
    assert preview_main([str(tmp_path / "missing.py")]) == 2
    assert preview_main([str(path), "--at", "yesterday"]) == 2
    assert "--at: 'yesterday' is not an ISO date/time" in capsys.readouterr().err
    path.write_text(DAG_FILE.replace("lag=1", "lag=-1"))
    assert preview_main([str(path)]) == 2
    assert (
        "InvalidTimetableParameter: lag: expected a whole number of business days" in capsys.readouterr().err
    )


def test_preview_finds_every_dag_of_a_file_as_airflow_does(tmp_path, capsys):
    # ``with DAG(...)`` blocks that no variable holds are found even when the garbage collector runs between
    # them (Airflow's autoregistration, not a scan of live objects); a DAG held by a name is found too.
    path = tmp_path / "three.py"
    body = DAG_FILE.split("with DAG(", 1)[1]
    path.write_text(
        DAG_FILE
        + "import gc\ngc.collect()\n"
        + "with DAG("
        + body.replace("nyse_and_lse", "second")
        + "third = DAG("
        + body.replace("nyse_and_lse", "third").rsplit("):", 1)[0]
        + ")\n"
    )
    assert preview_main([str(path), "-n", "1", "-p", "0", "--at", "2026-12-22T12:00", "--json"]) == 0
    assert [r["dag_id"] for r in json.loads(capsys.readouterr().out)] == ["nyse_and_lse", "second", "third"]


def test_preview_outside_the_holiday_data_is_a_plain_error(tmp_path, capsys):
    path = tmp_path / "dag_preview.py"
    path.write_text(DAG_FILE)
    assert preview_main([str(path), "--at", "2300-01-01"]) == 2
    assert capsys.readouterr().err.startswith("error: HolidayYearOutOfRange: ")


def test_preview_runs_as_a_module_on_an_example_dag():
    example = Path(__file__).parents[3] / "example_dags" / "timetable_business_days.py"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_smart_ext.preview",
            str(example),
            "-n",
            "3",
            "--at",
            "2024-11-27T12:00",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "skipped Thu 2024-11-28: NYSE holiday: Thanksgiving Day" in out


def test_preview_monthly_counts_unchosen_business_days():
    timetable = MonthlyBusinessDayTimetable(-1, market="NYSE", timezone=NY)
    result = preview(timetable, at=dt.datetime(2026, 3, 1, tzinfo=UTC), next_runs=2, previous_runs=0)
    gap = result["next"][1]["skipped_before"]
    assert {"day": "2026-04-03", "reason": "NYSE holiday: Good Friday"} in gap
    assert gap[-1]["reason"] == "20 business days not the last NYSE business day"
