"""Scheduling semantics of the timetables as Airflow uses them (docs/timetables.md, "Catch-up, pauses and
manual runs"): catchup walks, catchup=False after a pause, delayed runs not skipped (apache/airflow#51840),
start/end dates, long holiday runs and long gaps.

"now" is frozen with time_machine; nothing here measures time.
"""

from __future__ import annotations

import datetime as dt

import pendulum
import pytest

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.compat.timetables import DataInterval
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    InvalidTimetableParameter,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)
from tests.unit.timetables.helpers import (
    NY,
    NYSE,
    NYSE_6H,
    D,
    H,
    at,
    day_of,
    every_local_day,
    interval,
    next_info,
    walk,
)

# (timetable, is the day D scheduled, window_days or None for since_previous)
CATCHUP_CASES = {
    "daily": (DelayedDailyTimetable(delay=2 * H, timezone=NY), lambda d: True, 1),
    "rolling-7": (RollingWindowTimetable(7, delay=H, timezone=NY), lambda d: True, 7),
    "rolling-5-nyse": (RollingWindowTimetable(5, calendar=NYSE, delay=6 * H, timezone=NY), NYSE.contains, 5),
    "nyse-day": (NYSE_6H, NYSE.contains, 1),
    "nyse-since": (
        BusinessDaysTimetable(market="NYSE", window="since_previous", timezone=NY),
        NYSE.contains,
        None,
    ),
    "monthly-last": (
        MonthlyBusinessDayTimetable(-1, market="NYSE", delay=2 * H, timezone=NY),
        lambda d: MonthlyBusinessDayTimetable(-1, market="NYSE")._monthly.contains(d),
        None,
    ),
}


# --- catchup=True: every interval since start_date, in order, up to end_date ---------------------------


@pytest.mark.parametrize("name", sorted(CATCHUP_CASES))
def test_catchup_walk_yields_every_interval_between_start_and_end_date(name):
    timetable, scheduled, window_days = CATCHUP_CASES[name]
    start, end = at("2026-01-01"), at("2026-12-31T12:00")
    infos = walk(timetable, now=at("2027-06-01"), earliest=start, latest=end)
    # expected: every scheduled day whose interval starts at/after start_date and at/before end_date
    days = [d for d in every_local_day("2025-12-01", "2027-02-28") if scheduled(d)]
    if window_days is not None:  # [D-(N-1), D+1): its start day must be within [01-01, 12-31]
        lag = dt.timedelta(days=window_days - 1)
        expected = [d for d in days if D("2026-01-01") <= d - lag <= D("2026-12-31")]
    else:  # the first one starts at start_date, the others the day after the previous scheduled day
        first = min(d for d in days if d >= D("2026-01-01"))
        expected = [first] + [
            d for prev, d in zip(days, days[1:], strict=False) if d > first and prev < D("2026-12-31")
        ]
    expected = [d.isoformat() for d in expected]
    assert [day_of(i) for i in infos] == expected
    assert all(i.data_interval.start >= start and i.data_interval.start <= end for i in infos)
    assert all(b.data_interval.start > a.data_interval.start for a, b in zip(infos, infos[1:], strict=False))
    assert len({i.data_interval for i in infos}) == len(infos)
    # end_date: nothing after the last one
    assert (
        next_info(
            timetable,
            now=at("2027-06-01"),
            last=infos[-1].data_interval,
            earliest=start,
            latest=end,
            catchup=True,
        )
        is None
    )


def test_catchup_resumes_after_pause_with_every_missed_run():
    last = interval("2026-11-20", "2026-11-21")  # Fri 11-20
    infos = walk(NYSE_6H, now=at("2026-11-30T07:00"), earliest=at("2026-11-01"), last=last, limit=4)
    assert [day_of(i) for i in infos] == ["2026-11-23", "2026-11-24", "2026-11-25", "2026-11-27"]


# --- catchup=False: the latest run whose run time has passed; a pending delayed run is not skipped -------


@pytest.mark.parametrize(
    ("last_day", "now", "catchup", "expected"),
    [
        # the table in docs/timetables.md (NYSE, delay 6h, last run Fri 11-20)
        ("2026-11-20", "2026-11-25T05:00", True, "2026-11-23"),
        ("2026-11-20", "2026-11-25T05:00", False, "2026-11-23"),  # 11-24's run is due only at 11-25 06:00
        ("2026-11-20", "2026-11-25T10:00", True, "2026-11-23"),
        ("2026-11-20", "2026-11-25T10:00", False, "2026-11-24"),  # Mon 11-23 skipped
        ("2026-11-20", "2026-11-30T07:00", False, "2026-11-27"),
        # no earlier run, start_date 2026-11-01
        (None, "2026-11-25T10:00", True, "2026-11-02"),
        (None, "2026-11-25T10:00", False, "2026-11-24"),
        (None, "2026-11-25T05:00", False, "2026-11-23"),
    ],
)
def test_documented_next_run_after_pause_and_first_run(last_day, now, catchup, expected):
    last = None
    if last_day is not None:
        last = interval(last_day, (D(last_day) + dt.timedelta(days=1)).isoformat())
    info = next_info(NYSE_6H, now=at(now), last=last, earliest=at("2026-11-01"), catchup=catchup)
    assert day_of(info) == expected
    assert info.run_after == at(expected).add(days=1, hours=6)


@pytest.mark.parametrize("last_day", [None, "2026-11-10", "2026-11-23"])
def test_delayed_run_whose_time_has_not_come_is_not_skipped_51840(last_day):
    """apache/airflow#51840: daily, delay 6h, catchup=False, now = 11-25 03:00, i.e. after the end of
    11-24's interval (11-25 00:00) but before its run time (11-25 06:00). Documented: the next run is never
    older than the latest run whose run time has passed (11-23, due 11-24 06:00), and 11-24's pending run
    is not skipped: it follows, due at 06:00."""
    timetable = DelayedDailyTimetable(delay=6 * H, timezone=NY)
    now = at("2026-11-25T03:00")
    last = None
    if last_day is not None:
        last = interval(last_day, (D(last_day) + dt.timedelta(days=1)).isoformat())
    first = next_info(timetable, now=now, last=last, earliest=at("2026-11-01"), catchup=False)
    if last_day == "2026-11-23":  # 11-23 already ran: the pending one is next, not skipped
        assert day_of(first) == "2026-11-24"
        assert first.run_after == at("2026-11-25T06:00") > now
        return
    assert day_of(first) == "2026-11-23"
    assert first.run_after == at("2026-11-24T06:00") <= now
    second = next_info(timetable, now=now, last=first.data_interval, earliest=at("2026-11-01"), catchup=False)
    assert day_of(second) == "2026-11-24"
    assert second.data_interval.start == first.data_interval.end
    assert second.run_after == at("2026-11-25T06:00")
    # once its time has passed it is still the next one (not skipped in favour of 11-25)
    later = next_info(
        timetable,
        now=at("2026-11-25T06:30"),
        last=first.data_interval,
        earliest=at("2026-11-01"),
        catchup=False,
    )
    assert day_of(later) == "2026-11-24"


def test_catchup_false_never_repeats_a_run():
    last = interval("2026-11-24", "2026-11-25")
    info = next_info(NYSE_6H, now=at("2026-11-25T10:00"), last=last, earliest=at("2026-11-01"), catchup=False)
    assert day_of(info) == "2026-11-25"  # 11-24 already ran; 11-25 is pending (due 11-26 06:00)


# --- start_date / end_date ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CATCHUP_CASES))
@pytest.mark.parametrize("catchup", [True, False])
def test_start_date_mid_day_and_in_the_future(name, catchup):
    timetable = CATCHUP_CASES[name][0]
    start = at("2026-03-05T13:00")
    for now in (at("2026-03-01"), at("2026-03-06T12:00"), at("2026-04-20")):
        info = next_info(timetable, now=now, earliest=start, catchup=catchup)
        assert info.data_interval.start >= start
        assert info.data_interval.start.in_tz(NY).time() == dt.time(0)
        if catchup or now < start:
            # the first interval of the schedule starting at/after start_date
            runs = timetable.iter_runs(start, 1)
            assert info.data_interval == runs[0].data_interval


def test_end_date_stops_catchup_false_too():
    timetable = DelayedDailyTimetable(timezone=NY)
    end = at("2026-03-20T12:00")
    info = next_info(timetable, now=at("2026-04-01"), earliest=at("2026-03-01"), latest=end, catchup=False)
    assert info is None
    info = next_info(
        timetable, now=at("2026-03-21T01:00"), earliest=at("2026-03-01"), latest=end, catchup=False
    )
    assert info.data_interval.start == at("2026-03-20") <= end
    assert (
        next_info(
            timetable,
            now=at("2026-04-01"),
            last=info.data_interval,
            earliest=at("2026-03-01"),
            latest=end,
            catchup=True,
        )
        is None
    )


def test_since_previous_first_interval_starts_at_start_date_midnight():
    timetable = BusinessDaysTimetable(market="NYSE", window="since_previous", timezone=NY)
    info = next_info(timetable, now=at("2026-12-01"), earliest=at("2026-11-28T08:00"), catchup=True)
    # start_date Sat 11-28 08:00 -> first local midnight at/after it is Sun 11-29; first business day Mon 11-30
    assert info.data_interval == interval("2026-11-29", "2026-12-01")


# --- long holiday runs and long gaps: correct and bounded -----------------------------------------------

HOLIDAY_RUN = [D("2025-01-01") + dt.timedelta(days=i) for i in range(60)]  # 2025-01-01 .. 2025-03-01
LONG_BREAK = BusinessCalendar(extra_holidays=HOLIDAY_RUN)


@pytest.mark.parametrize("window", ["day", "since_previous"])
def test_sixty_day_holiday_run(window):
    timetable = BusinessDaysTimetable(calendar=LONG_BREAK, window=window, timezone=NY)
    infos = timetable.iter_runs(at("2024-12-30"), 4)
    assert [day_of(i) for i in infos] == ["2024-12-30", "2024-12-31", "2025-03-03", "2025-03-04"]
    if window == "since_previous":
        assert infos[2].data_interval == interval("2025-01-01", "2025-03-04")
    # catchup=False inside the break: the last run before it, then the first after it (strict progress)
    first = next_info(timetable, now=at("2025-02-10"), earliest=at("2024-12-01"), catchup=False)
    assert day_of(first) == "2024-12-31"
    second = next_info(timetable, now=at("2025-02-10"), last=first.data_interval, earliest=at("2024-12-01"))
    assert day_of(second) == "2025-03-03"
    assert second.run_after > at("2025-02-10")
    manual = timetable.infer_manual_data_interval(run_after=at("2025-02-10"))
    assert manual == first.data_interval
    rolling = RollingWindowTimetable(5, calendar=LONG_BREAK, timezone=NY)
    assert [day_of(i) for i in rolling.iter_runs(at("2024-12-27"), 3)] == [
        "2024-12-31",
        "2025-03-03",
        "2025-03-04",
    ]
    monthly = MonthlyBusinessDayTimetable(1, calendar=LONG_BREAK, window="day", timezone=NY)
    # January and February have no business day at all: the next monthly run is in March
    assert [day_of(i) for i in monthly.iter_runs(at("2024-12-01"), 2)] == ["2024-12-02", "2025-03-03"]


@pytest.mark.parametrize(
    "make",
    [
        lambda closed: BusinessDaysTimetable(extra_holidays=closed, timezone=NY),
        lambda closed: MonthlyBusinessDayTimetable(-1, extra_holidays=closed, timezone=NY),
        lambda closed: RollingWindowTimetable(5, extra_holidays=closed, timezone=NY),
        lambda closed: RollingWindowTimetable(5, calendar={"extra_holidays": closed}, timezone=NY),
    ],
)
def test_holiday_run_longer_than_search_bound_fails_at_construction(make):
    """Before the fix construction and validate() succeeded and next_dagrun_info raised CalendarSearchError
    in the scheduler (Airflow 3.3 logs it and the DAG silently stops being scheduled)."""
    closed = [(D("2030-01-01") + dt.timedelta(days=i)).isoformat() for i in range(800)]
    with pytest.raises(
        InvalidTimetableParameter, match=r"^extra_holidays: 2030-01-01 \.\. 2032-03-10 are 800 "
    ):
        make(closed)
    # just below the bound: accepted, and the scheduler gets the first business day after the run
    timetable = BusinessDaysTimetable(extra_holidays=closed[:731], timezone=NY)
    info = next_info(
        timetable, now=at("2031-06-01"), last=interval("2029-12-31", "2030-01-01"), earliest=at("2029-01-01")
    )
    assert day_of(info) == "2032-01-02"


@pytest.mark.parametrize("name", sorted(CATCHUP_CASES))
def test_first_call_after_ten_year_gap(name):
    timetable, scheduled, window_days = CATCHUP_CASES[name]
    old = timetable.iter_runs(at("2016-03-01"), 1)[0]
    now = at("2026-11-25T10:00")
    resumed = next_info(timetable, now=now, last=old.data_interval, earliest=at("2016-03-01"), catchup=False)
    # catchup=False: exactly the run a manual run at that moment would get = the latest due one
    assert resumed.data_interval == timetable.infer_manual_data_interval(run_after=now)
    assert resumed.run_after <= now
    following = next_info(timetable, now=now, last=resumed.data_interval, earliest=at("2016-03-01"))
    assert following.run_after > now  # nothing due was left out between them
    day = D(day_of(resumed))
    assert scheduled(day)
    assert not any(scheduled(day + dt.timedelta(days=i)) for i in range(1, (D(day_of(following)) - day).days))
    # catchup=True: the very next one after 2016's
    caught = next_info(timetable, now=now, last=old.data_interval, earliest=at("2016-03-01"), catchup=True)
    assert caught.data_interval == timetable.iter_runs(at("2016-03-01"), 2)[1].data_interval


def test_schedule_switched_from_daily_to_long_rolling_window_progresses():
    """An interval written by another schedule (a daily DAG switched to a 400-day window): the next run is
    the first window starting after it, found without walking 400 runs (used to raise RuntimeError)."""
    timetable = RollingWindowTimetable(400, timezone="UTC")
    last = DataInterval(pendulum.datetime(2020, 1, 1), pendulum.datetime(2020, 1, 2))
    info = next_info(
        timetable,
        now=pendulum.datetime(2030, 1, 1),
        last=last,
        earliest=pendulum.datetime(2019, 1, 1),
        catchup=True,
    )
    assert info.data_interval.start == pendulum.datetime(2020, 1, 2)
    assert info.data_interval.end == pendulum.datetime(2021, 2, 5)
