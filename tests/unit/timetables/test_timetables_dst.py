"""Explicit DST / odd-offset cases: local days, 23 h / 25 h intervals, gap and fold run times."""

from __future__ import annotations

import datetime as dt

import pendulum
import pytest

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)

H = dt.timedelta(hours=1)


def local(value: str, tz: str) -> pendulum.DateTime:
    return pendulum.parse(value, tz=tz)


def runs(timetable, start: str, tz: str, count: int):
    """[(start, end, run_after)] in local ISO strings for the first ``count`` catchup runs from ``start``."""
    out = []
    for info in timetable.iter_runs(local(start, tz), count):
        assert info.data_interval.start.tzinfo is not None and info.run_after.tzinfo is not None
        out.append(
            (
                info.data_interval.start.in_tz(tz).isoformat(),
                info.data_interval.end.in_tz(tz).isoformat(),
                info.run_after.in_tz(tz).isoformat(),
            )
        )
    return out


def hours(info) -> float:
    return (info.data_interval.end - info.data_interval.start).total_seconds() / 3600


def test_new_york_spring_forward_gap_run_time_moves_forward():
    tz = "America/New_York"
    tt = DelayedDailyTimetable(delay=2 * H, timezone=tz)
    assert runs(tt, "2024-03-09", tz, 2) == [
        # the 02:00 run time on 2024-03-10 does not exist: it moves forward by the gap, to 03:00 EDT
        ("2024-03-09T00:00:00-05:00", "2024-03-10T00:00:00-05:00", "2024-03-10T03:00:00-04:00"),
        # the spring-forward day itself is 23 hours long
        ("2024-03-10T00:00:00-05:00", "2024-03-11T00:00:00-04:00", "2024-03-11T02:00:00-04:00"),
    ]
    assert [hours(i) for i in tt.iter_runs(local("2024-03-09", tz), 3)] == [24, 23, 24]


def test_new_york_fall_back_fold_uses_first_occurrence():
    tz = "America/New_York"
    tt = DelayedDailyTimetable(delay=dt.timedelta(hours=1, minutes=30), timezone=tz)
    infos = tt.iter_runs(local("2024-11-02", tz), 2)
    # 01:30 happens twice on 2024-11-03: the first (EDT) occurrence is used
    assert infos[0].run_after.in_tz(tz).isoformat() == "2024-11-03T01:30:00-04:00"
    assert hours(infos[1]) == 25


def test_berlin_both_changes():
    tz = "Europe/Berlin"
    tt = DelayedDailyTimetable(delay=dt.timedelta(hours=2, minutes=30), timezone=tz)
    spring = tt.iter_runs(local("2024-03-30", tz), 2)
    assert spring[0].run_after.in_tz(tz).isoformat() == "2024-03-31T03:30:00+02:00"  # 02:30 is in the gap
    assert hours(spring[1]) == 23
    autumn = tt.iter_runs(local("2024-10-26", tz), 2)
    assert autumn[0].run_after.in_tz(tz).isoformat() == "2024-10-27T02:30:00+02:00"  # first 02:30 (CEST)
    assert hours(autumn[1]) == 25


def test_lord_howe_half_hour_dst():
    tz = "Australia/Lord_Howe"
    tt = DelayedDailyTimetable(delay=dt.timedelta(hours=2, minutes=15), timezone=tz)
    spring = tt.iter_runs(local("2024-10-05", tz), 2)
    # 02:00 -> 02:30 on 2024-10-06: 02:15 does not exist and moves forward 30 minutes
    assert spring[0].run_after.in_tz(tz).isoformat() == "2024-10-06T02:45:00+11:00"
    assert hours(spring[1]) == 23.5
    autumn = tt.iter_runs(local("2024-04-06", tz), 2)
    assert hours(autumn[1]) == 24.5
    fold = DelayedDailyTimetable(delay=dt.timedelta(hours=1, minutes=45), timezone=tz)
    # 02:00 -> 01:30 on 2024-04-07: 01:45 happens twice, the first one (+11:00) is used
    assert (
        fold.iter_runs(local("2024-04-06", tz), 1)[0].run_after.in_tz(tz).isoformat()
        == "2024-04-07T01:45:00+11:00"
    )


def test_kathmandu_quarter_hour_offset():
    tz = "Asia/Kathmandu"
    tt = DelayedDailyTimetable(timezone=tz)
    info = tt.iter_runs(local("2024-06-01", tz), 1)[0]
    assert info.data_interval.start.isoformat() == "2024-05-31T18:15:00+00:00"
    assert info.data_interval.end.isoformat() == "2024-06-01T18:15:00+00:00"
    assert info.run_after == info.data_interval.end


def test_santiago_day_without_midnight_starts_at_one():
    tz = "America/Santiago"
    tt = DelayedDailyTimetable(timezone=tz)
    infos = tt.iter_runs(local("2024-09-07", tz), 3)
    # 2024-09-08: clocks jump 00:00 -> 01:00, so that day starts at 01:00 local and lasts 23 hours
    assert infos[0].data_interval.end.in_tz(tz).isoformat() == "2024-09-08T01:00:00-03:00"
    assert infos[1].data_interval.start.in_tz(tz).isoformat() == "2024-09-08T01:00:00-03:00"
    assert [hours(i) for i in infos] == [24, 23, 24]
    # 2024-04-06 has 23:00-24:00 twice (clocks 00:00 -> 23:00): a 25-hour Saturday
    autumn = tt.iter_runs(local("2024-04-06", tz), 2)
    assert [hours(i) for i in autumn] == [25, 24]
    assert autumn[1].data_interval.start.in_tz(tz).isoformat() == "2024-04-07T00:00:00-04:00"


def test_rolling_window_is_local_days_not_24h_blocks():
    tz = "America/New_York"
    tt = RollingWindowTimetable(days=7, timezone=tz)
    info = tt.iter_runs(local("2024-03-04", tz), 1)[0]
    assert info.data_interval.start.in_tz(tz).isoformat() == "2024-03-04T00:00:00-05:00"
    assert info.data_interval.end.in_tz(tz).isoformat() == "2024-03-11T00:00:00-04:00"
    assert hours(info) == 7 * 24 - 1


@pytest.mark.parametrize(
    "tz",
    ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu", "America/Santiago"],
)
def test_intervals_start_and_end_at_local_midnight_all_year(tz):
    tt = BusinessDaysTimetable(weekend=(), window="since_previous", timezone=tz)
    infos = tt.iter_runs(local("2024-01-01", tz), 366)
    for info in infos:
        for edge in (info.data_interval.start, info.data_interval.end):
            wall = edge.in_tz(tz)
            # Santiago's spring-forward day starts at 01:00 (midnight does not exist)
            assert (wall.hour, wall.minute) == (0, 0) or (
                tz == "America/Santiago" and (wall.hour, wall.minute) == (1, 0)
            )
    assert sum(hours(i) for i in infos) == 366 * 24


def test_year_boundary_business_days_and_month_close():
    tz = "America/New_York"
    nyse = BusinessDaysTimetable(market="NYSE", timezone=tz)
    assert [r[0][:10] for r in runs(nyse, "2024-12-30", tz, 3)] == ["2024-12-30", "2024-12-31", "2025-01-02"]
    first = MonthlyBusinessDayTimetable(1, market="NYSE", window="day", timezone=tz)
    assert [r[0][:10] for r in runs(first, "2024-12-01", tz, 2)] == ["2024-12-02", "2025-01-02"]
    rolling = RollingWindowTimetable(days=3, calendar=BusinessCalendar(market="NYSE"), timezone=tz)
    assert [(r[0][:10], r[1][:10]) for r in runs(rolling, "2024-12-29", tz, 2)] == [
        ("2024-12-29", "2025-01-01"),
        ("2024-12-31", "2025-01-03"),
    ]
