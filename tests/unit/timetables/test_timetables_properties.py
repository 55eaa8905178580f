"""Property-based tests of the timetables against an independent brute-force model.

The model (``Model`` below) knows nothing of the engine: it walks local calendar dates one by one and
turns them into instants with plain ``zoneinfo`` (first existing instant of a local day found by scanning
minutes across a gap; run time = wall clock ``D+1 00:00 + delay``, first occurrence in a fold, shifted
forward by the gap length in a gap). Only the choice of scheduled dates (``calendar.contains``) is shared;
the calendars themselves are tested in ``test_calendars.py``.

Every example drives the public Airflow API (``next_dagrun_info`` with a frozen "now",
``infer_manual_data_interval``) over six zones with odd DST rules, every timetable and window kind,
catchup on/off, first run / after a pause.
"""

from __future__ import annotations

import datetime as dt
import functools
from zoneinfo import ZoneInfo

import pendulum
import pytest
import time_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.compat.timetables import DataInterval, TimeRestriction
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)

UTC = dt.timezone.utc
ONE_DAY = dt.timedelta(days=1)
ZONES = (
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # 30-minute DST
    "Asia/Kathmandu",  # +05:45
    "America/Santiago",  # DST change at midnight: some days start at 01:00
)
RUNS_PER_EXAMPLE = 8
SCAN_LIMIT = 900  # days: longest brute-force scan of the model (a 60-day holiday run + monthly schedules)

NYSE = BusinessCalendar(market="NYSE")
NYSE_AND_LSE = NYSE & BusinessCalendar(market="XLON")
DAY = dt.timedelta(days=1)
LONG_BREAK = BusinessCalendar(
    extra_holidays=[dt.date(2024, 12, 1) + dt.timedelta(days=i) for i in range(60)],
    weekend=("Fri", "Sat"),
)

# (id, factory(tz, delay), window_days or None for "since_previous")
SPECS = [
    ("daily", lambda tz, d: DelayedDailyTimetable(delay=d, timezone=tz), 1),
    ("rolling-1", lambda tz, d: RollingWindowTimetable(1, delay=d, timezone=tz), 1),
    ("rolling-3", lambda tz, d: RollingWindowTimetable(3, delay=d, timezone=tz), 3),
    ("rolling-7", lambda tz, d: RollingWindowTimetable(7, delay=d, timezone=tz), 7),
    ("rolling-5-nyse", lambda tz, d: RollingWindowTimetable(5, calendar=NYSE, delay=d, timezone=tz), 5),
    (
        "rolling-4-long-break",
        lambda tz, d: RollingWindowTimetable(4, calendar=LONG_BREAK, delay=d, timezone=tz),
        4,
    ),
    ("bd-mon-fri", lambda tz, d: BusinessDaysTimetable(delay=d, timezone=tz), 1),
    ("bd-nyse", lambda tz, d: BusinessDaysTimetable(market="NYSE", delay=d, timezone=tz), 1),
    (
        "bd-nyse-since",
        lambda tz, d: BusinessDaysTimetable(market="NYSE", window="since_previous", delay=d, timezone=tz),
        None,
    ),
    (
        "bd-de-by-since",
        lambda tz, d: BusinessDaysTimetable(
            country="DE", subdivision="BY", window="since_previous", delay=d, timezone=tz
        ),
        None,
    ),
    (
        "bd-long-break",
        lambda tz, d: BusinessDaysTimetable(
            calendar=LONG_BREAK, window="since_previous", delay=d, timezone=tz
        ),
        None,
    ),
    (
        "monthly-1-nyse",
        lambda tz, d: MonthlyBusinessDayTimetable(1, market="NYSE", delay=d, timezone=tz),
        None,
    ),
    (
        "monthly-last-nyse-day",
        lambda tz, d: MonthlyBusinessDayTimetable(-1, market="NYSE", window="day", delay=d, timezone=tz),
        1,
    ),
    (
        "monthly-3-de",
        lambda tz, d: MonthlyBusinessDayTimetable(3, country="DE", delay=d, timezone=tz),
        None,
    ),
    # issue 16: each calendar's own week, make-up days, calendar algebra, business-day lag (delay < 1 day)
    ("bd-il", lambda tz, d: BusinessDaysTimetable(country="IL", delay=d, timezone=tz), 1),
    (
        "bd-cn-since",
        lambda tz, d: BusinessDaysTimetable(country="CN", window="since_previous", delay=d, timezone=tz),
        None,
    ),
    ("bd-nyse-t2", lambda tz, d: BusinessDaysTimetable(market="NYSE", lag=2, delay=d % DAY, timezone=tz), 1),
    (
        "bd-nyse-and-lse-since-t1",
        lambda tz, d: BusinessDaysTimetable(
            calendar=NYSE_AND_LSE, window="since_previous", lag=1, delay=d % DAY, timezone=tz
        ),
        None,
    ),
    (
        "monthly-last-nyse-t2",
        lambda tz, d: MonthlyBusinessDayTimetable(-1, market="NYSE", lag=2, delay=d % DAY, timezone=tz),
        None,
    ),
    (
        "monthly-minus2-plain-day",
        lambda tz, d: MonthlyBusinessDayTimetable(-2, window="day", delay=d, timezone=tz),
        1,
    ),
]

# per zone: delays whose run time falls into a DST gap (G) or fold (F) of that zone, also one day later
H, M = dt.timedelta(hours=1), dt.timedelta(minutes=1)
ZONE_DELAYS = {
    "UTC": [0 * H, 6 * H],
    "America/New_York": [2 * H, 2 * H + 30 * M, H + 30 * M, 26 * H + 30 * M],  # G 02:00-03:00, F 01:00-02:00
    "Europe/Berlin": [2 * H + 30 * M, 26 * H + 30 * M, 2 * H],  # G 02:00-03:00 / F 02:00-03:00
    "Australia/Lord_Howe": [2 * H + 15 * M, H + 45 * M, 25 * H + 45 * M],  # G 02:00-02:30, F 01:30-02:00
    "Asia/Kathmandu": [0 * H, 5 * H + 45 * M],
    "America/Santiago": [0 * H, 30 * M, 23 * H + 30 * M, 24 * H + 30 * M],  # G 00:00-01:00, F 23:00-24:00
}
GAP_DELAYS = sorted({d for delays in ZONE_DELAYS.values() for d in delays})


def _transition_dates(name: str) -> list[dt.date]:
    """Local dates (2019-2031) on which the zone's UTC offset changes, and the day before each."""
    tz = ZoneInfo(name)
    out: list[dt.date] = []
    day = dt.date(2019, 1, 1)
    previous = dt.datetime.combine(day, dt.time(12), tzinfo=tz).utcoffset()
    while day < dt.date(2031, 12, 31):
        day += ONE_DAY
        offset = dt.datetime.combine(day, dt.time(12), tzinfo=tz).utcoffset()
        if offset != previous:
            out += [day - ONE_DAY, day]
        previous = offset
    return out


TRANSITIONS = {name: _transition_dates(name) for name in ZONES}


class Model:
    """Brute-force reference schedule for one timetable (plain zoneinfo, one local date at a time)."""

    def __init__(
        self,
        zone: str,
        contains,
        window_days: int | None,
        delay: dt.timedelta,
        lag: int = 0,
        lag_contains=None,
    ) -> None:
        self.tz = ZoneInfo(zone)
        self.contains = contains
        self.window_days = window_days
        self.delay = delay
        self.lag = lag
        self.lag_contains = lag_contains
        self.day_start = functools.lru_cache(maxsize=None)(self._day_start)

    def run_day(self, day: dt.date) -> dt.date:
        """D+1, or with a lag the lag-th business day after D (walking one date at a time)."""
        if not self.lag:
            return day + ONE_DAY
        for _ in range(self.lag):
            day += ONE_DAY
            while not (self.lag_contains(day) and self.exists(day)):
                day += ONE_DAY
        return day

    def local_date(self, instant: dt.datetime) -> dt.date:
        return instant.astimezone(self.tz).date()

    def _day_start(self, day: dt.date) -> dt.datetime:
        wall = dt.datetime.combine(day, dt.time())
        instant = wall.replace(tzinfo=self.tz).astimezone(UTC)
        if instant.astimezone(self.tz).replace(tzinfo=None) == wall:
            return instant  # midnight exists (fold=0: its first occurrence)
        # midnight is in a gap: scan from the earlier reading to the first instant of ``day``
        instant = wall.replace(tzinfo=self.tz, fold=1).astimezone(UTC)
        while instant.astimezone(self.tz).date() < day:
            instant += dt.timedelta(minutes=1)
        return instant

    def exists(self, day: dt.date) -> bool:
        return self.day_start(day) < self.day_start(day + ONE_DAY)

    def scheduled(self, day: dt.date) -> bool:
        return self.contains(day) and self.exists(day)

    def wall_run_time(self, day: dt.date) -> dt.datetime:
        """Expected local wall clock of the run (gap: shifted forward by its length)."""
        wall = dt.datetime.combine(self.run_day(day), dt.time()) + self.delay
        first = wall.replace(tzinfo=self.tz).astimezone(UTC)
        if first.astimezone(self.tz).replace(tzinfo=None) == wall:
            return wall
        gap = wall.replace(tzinfo=self.tz, fold=1).utcoffset() - wall.replace(tzinfo=self.tz).utcoffset()
        return wall + gap

    def run_after(self, day: dt.date) -> dt.datetime:
        instant = self.wall_run_time(day).replace(tzinfo=self.tz).astimezone(UTC)  # fold=0: first
        return max(instant, self.day_start(self.run_day(day)))

    def next_scheduled(self, day: dt.date) -> dt.date:
        for _ in range(SCAN_LIMIT):
            if self.scheduled(day):
                return day
            day += ONE_DAY
        raise AssertionError("model: no scheduled day")

    def prev_scheduled(self, day: dt.date) -> dt.date:
        for _ in range(SCAN_LIMIT):
            if self.scheduled(day):
                return day
            day -= ONE_DAY
        raise AssertionError("model: no scheduled day")

    def floor_day(self, earliest: dt.datetime) -> dt.date:
        day = self.local_date(earliest) - ONE_DAY
        while self.day_start(day) < earliest:
            day += ONE_DAY
        return day

    def window(self, day: dt.date, floor: dt.date | None = None) -> tuple[dt.datetime, dt.datetime]:
        if self.window_days is not None:
            start = self.day_start(day - dt.timedelta(days=self.window_days - 1))
        else:
            start = self.day_start(self.prev_scheduled(day - ONE_DAY) + ONE_DAY)
            if floor is not None:
                start = max(start, self.day_start(floor))
        return start, self.day_start(day + ONE_DAY)

    def first_day(self, earliest: dt.datetime) -> dt.date:
        """First scheduled day whose interval may start at/after ``earliest`` (catchup from start_date)."""
        if self.window_days is None:
            return self.next_scheduled(self.floor_day(earliest))
        day = self.next_scheduled(self.local_date(earliest) - dt.timedelta(days=self.window_days + 1))
        while self.window(day)[0] < earliest:
            day = self.next_scheduled(day + ONE_DAY)
        return day

    def due_day(self, now: dt.datetime) -> dt.date:
        """Latest scheduled day whose run time is <= now."""
        day = self.local_date(now)
        for _ in range(SCAN_LIMIT):
            if self.scheduled(day) and self.run_after(day) <= now:
                return day
            day -= ONE_DAY
        raise AssertionError("model: no due day")

    def day_of(self, end: dt.datetime) -> dt.date:
        """The scheduled day D of an interval ending at the start of D+1."""
        return self.local_date(end) - ONE_DAY


def p(instant: dt.datetime) -> pendulum.DateTime:
    return pendulum.instance(instant).in_tz("UTC")


@st.composite
def scenarios(draw):
    zone = draw(st.sampled_from(ZONES))
    spec_id, factory, window_days = draw(st.sampled_from(SPECS))
    delay = draw(
        st.one_of(
            st.sampled_from(ZONE_DELAYS[zone]),
            st.sampled_from(ZONE_DELAYS[zone]),
            st.integers(0, 3 * 24 * 60).map(lambda m: dt.timedelta(minutes=m)),
        )
    )
    anchors = TRANSITIONS[zone]
    day_strategy = st.dates(dt.date(2019, 1, 1), dt.date(2031, 12, 31))
    if anchors:
        day_strategy = st.one_of(st.sampled_from(anchors), day_strategy)
    if spec_id.endswith("long-break"):
        day_strategy = st.one_of(
            st.dates(dt.date(2024, 11, 20), dt.date(2025, 2, 15)), day_strategy
        )  # around and inside the 60-day holiday run
    anchor = draw(day_strategy)
    now = dt.datetime.combine(anchor, dt.time(), tzinfo=UTC) + dt.timedelta(
        minutes=draw(st.integers(-3 * 1440, 3 * 1440))
    )
    catchup = draw(st.booleans())
    paused = draw(st.booleans())
    # start_date: mostly in the past (up to ~8 years), sometimes a few days in the future
    # (near ones make the catchup walk cross the DST change of the anchor)
    earliest = now - dt.timedelta(
        minutes=draw(st.one_of(st.integers(-5 * 1440, 8 * 1440), st.integers(0, 3000 * 1440)))
    )
    pause_days = draw(st.one_of(st.integers(1, 8), st.integers(1, 500)))
    t_fraction = draw(st.floats(0, 1, exclude_max=True))
    return zone, spec_id, factory, window_days, delay, now, catchup, paused, earliest, pause_days, t_fraction


def _calendar_of(timetable) -> object:
    return timetable._calendar  # the timetable's own day calendar (tested in test_calendars.py)


def _model(zone: str, timetable, window_days: int | None) -> Model:
    """The model of ``timetable``: its day calendar, window, delay and lag (over its business calendar)."""
    engine = timetable.engine
    return Model(
        zone,
        _calendar_of(timetable).contains,
        window_days,
        engine.delay,
        engine.lag,
        engine.lag_calendar.contains,
    )


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_runs_match_brute_force_model(scenario):
    zone, spec_id, factory, window_days, delay, now, catchup, paused, earliest, pause_days, frac = scenario
    timetable = factory(zone, delay)
    model = _model(zone, timetable, window_days)
    floor = model.floor_day(earliest)

    last: DataInterval | None = None
    expected = model.first_day(earliest)
    if paused:
        # a real run of this schedule from long ago (``pause_days`` before now), after start_date
        last_day = model.prev_scheduled(model.local_date(now) - dt.timedelta(days=pause_days))
        if last_day < expected:
            last_day = expected
        start, end = model.window(last_day, floor)
        last = DataInterval(p(start), p(end))
        expected = model.next_scheduled(last_day + ONE_DAY)
    if not catchup:
        expected = max(expected, model.due_day(now))

    infos = walk(timetable, earliest=earliest, catchup=catchup, now=now, last=last)
    check_runs(timetable, model, infos, floor=floor, expected=expected, frac=frac, window_days=window_days)
    # ... and at an arbitrary moment: the model's due run
    manual = timetable.infer_manual_data_interval(run_after=p(now))
    assert (manual.start, manual.end) == model.window(model.due_day(now))
    assert manual.start < manual.end


def walk(timetable, *, earliest, catchup, now, last, count=RUNS_PER_EXAMPLE):
    """What the scheduler does: call next_dagrun_info with the previous run's interval, "now" frozen."""
    restriction = TimeRestriction(earliest=p(earliest), latest=None, catchup=catchup)
    infos = []
    with time_machine.travel(now, tick=False):
        for _ in range(count):
            info = timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
            assert info is not None
            infos.append(info)
            last = info.data_interval
    return infos


def check_runs(timetable, model, infos, *, floor, expected, frac, window_days):
    zone = model.tz.key
    days = []
    for i, info in enumerate(infos):
        start, end, run_after = info.data_interval.start, info.data_interval.end, info.run_after
        # timezone-aware, non-empty, the run never starts before its interval ends
        assert start.tzinfo is not None and end.tzinfo is not None and run_after.tzinfo is not None
        assert start < end <= run_after
        day = model.day_of(end)
        days.append(day)
        # the expected day (first run: catchup / due-run rule; then the next scheduled day, none skipped)
        assert day == expected, (i, day, expected)
        # only scheduled days (business days for business calendars; never a day off)
        assert model.scheduled(day)
        assert _calendar_of(timetable).contains(day)
        # interval edges are the first existing instant of their local day
        for edge in (start, end):
            assert model.local_date(edge - dt.timedelta(seconds=1)) < model.local_date(edge)
            assert edge == model.day_start(model.local_date(edge))
        assert (start, end) == model.window(day, floor), i
        # run time: wall clock D+1 00:00 + delay, gap -> shifted forward, fold -> first occurrence
        assert run_after == model.run_after(day)
        if run_after > end:
            assert run_after.in_tz(zone).naive() == model.wall_run_time(day)
        expected = model.next_scheduled(day + ONE_DAY)

    for previous, current, prev_day, day in zip(infos, infos[1:], days, days[1:], strict=False):
        a, b = previous.data_interval, current.data_interval
        # strictly advancing, no duplicates
        assert b.start > a.start and b.end > a.end and current.run_after > previous.run_after
        if window_days is None:
            assert b.start == a.end  # since_previous: contiguous, no gap, no overlap
        elif window_days == 1:
            assert b.start >= a.end  # one day each: never overlapping
            if day - prev_day == ONE_DAY:
                assert b.start == a.end
        else:
            # N-day rolling windows: the window of the next run day, i.e. shifted by (day - prev_day)
            shift = day - prev_day
            assert model.local_date(b.start) == model.local_date(a.start) + shift
            assert model.local_date(b.end) == model.local_date(a.end) + shift
            assert model.local_date(a.end) - model.local_date(a.start) == dt.timedelta(days=window_days)

    # manual runs get the interval of the scheduled run current at that moment (same as the scheduler)
    for i in range(1, len(infos) - 1):
        info, following = infos[i], infos[i + 1]
        for t in (
            info.run_after,
            min(
                info.run_after + (following.run_after - info.run_after) * frac,
                following.run_after - dt.timedelta(microseconds=1),
            ),
            following.run_after - dt.timedelta(microseconds=1),
        ):
            manual = timetable.infer_manual_data_interval(run_after=p(t))
            assert manual.start.tzinfo is not None
            assert (manual.start, manual.end) == (info.data_interval.start, info.data_interval.end)


EVERY_DAY_SPECS = [s for s in SPECS if s[0] in ("daily", "rolling-1", "rolling-3", "rolling-7")]
WEEKDAY_SPECS = [s for s in SPECS if s[0] in ("bd-mon-fri", "bd-nyse-since", "rolling-5-nyse")]


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_walk_across_dst_changes(data):
    """Catchup walks starting just before each zone's DST changes, with delays landing in its gap/fold
    (DST changes happen on weekends: business-day schedules reach them with a delay of 1 day +)."""
    zone = data.draw(st.sampled_from([z for z in ZONES if TRANSITIONS[z]]))
    anchor = data.draw(st.sampled_from(TRANSITIONS[zone]))
    every_day = data.draw(st.booleans())
    spec_id, factory, window_days = data.draw(
        st.sampled_from(EVERY_DAY_SPECS if every_day else WEEKDAY_SPECS)
    )
    delay = data.draw(st.sampled_from(ZONE_DELAYS[zone]))
    if not every_day:
        delay += dt.timedelta(days=data.draw(st.integers(1, 2)))
    earliest = dt.datetime.combine(anchor - dt.timedelta(days=4), dt.time(), tzinfo=UTC)
    timetable = factory(zone, delay)
    model = _model(zone, timetable, window_days)
    now = earliest + dt.timedelta(days=data.draw(st.integers(0, 9)), hours=data.draw(st.integers(0, 23)))
    catchup = data.draw(st.booleans())
    expected = model.first_day(earliest)
    if not catchup:
        expected = max(expected, model.due_day(now))
    infos = walk(timetable, earliest=earliest, catchup=catchup, now=now, last=None, count=10)
    check_runs(
        timetable,
        model,
        infos,
        floor=model.floor_day(earliest),
        expected=expected,
        frac=data.draw(st.floats(0, 1, exclude_max=True)),
        window_days=window_days,
    )


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(
    zone=st.sampled_from(ZONES),
    spec=st.sampled_from(SPECS),
    delay=st.sampled_from(GAP_DELAYS),
    moment=st.datetimes(dt.datetime(2019, 1, 1), dt.datetime(2031, 12, 31), timezones=st.just(UTC)),
)
def test_manual_interval_is_the_latest_due_scheduled_interval(zone, spec, delay, moment):
    _, factory, window_days = spec
    timetable = factory(zone, delay)
    model = _model(zone, timetable, window_days)
    manual = timetable.infer_manual_data_interval(run_after=p(moment))
    day = model.due_day(moment)
    assert (manual.start, manual.end) == model.window(day)
    assert manual.start < manual.end
    # it is what a catchup=False scheduler would hand out at that moment for a DAG resumed after a gap
    previous = model.prev_scheduled(day - dt.timedelta(days=40))
    restriction = TimeRestriction(earliest=p(moment - dt.timedelta(days=3000)), latest=None, catchup=False)
    with time_machine.travel(moment, tick=False):
        info = timetable.next_dagrun_info(
            last_automated_data_interval=DataInterval(*map(p, model.window(previous))),
            restriction=restriction,
        )
    assert info is not None
    assert (info.data_interval.start, info.data_interval.end) == (manual.start, manual.end)
    assert info.run_after <= moment


@pytest.mark.parametrize("zone", ZONES)
def test_transition_anchors_exist(zone):
    """The strategies above really exercise DST changes in the DST zones (guards the test itself)."""
    assert bool(TRANSITIONS[zone]) == (zone not in ("UTC", "Asia/Kathmandu"))
