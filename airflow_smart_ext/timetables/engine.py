"""The one scheduling engine behind every timetable of this package (pure: no Airflow imports).

A schedule is: a *calendar* choosing local days ``D`` (every day, business days, nth business day of the
month), a *window* giving each day's data interval, and a *delay*:

* window ``days=N``:           ``[start of D-N+1, start of D+1)``  (``N=1`` is "the day itself")
* window ``since_previous``:   ``[start of P+1, start of D+1)`` where ``P`` is the previous scheduled day
* run time:                    wall clock ``R 00:00 + delay`` in the zone, where the run day ``R`` is
                               ``D+1``, or with a business-day ``lag`` k >= 1 the k-th business day after
                               ``D`` (T+k): only the run time moves, the data interval stays

All arithmetic is on local ``datetime.date`` values; instants are built only at the edges:

* start of a local day = its first instant that exists (America/Santiago skips 00:00 on its spring-forward
  day, so that day starts at 01:00);
* a run time inside a DST gap moves forward by the gap length (02:30 in a 02:00-03:00 gap runs at 03:30);
* a run time inside a DST fold uses the FIRST occurrence (the earlier instant);
* run times strictly increase: a day whose run time would not be after the previous scheduled day's (only
  possible across a gap of 24 h or more, e.g. Pacific/Apia 2011-12-30) runs 1 s after it.

Instants returned are aware ``datetime`` objects in UTC.
"""

from __future__ import annotations

import datetime
from typing import NamedTuple
from zoneinfo import ZoneInfo

from airflow_smart_ext.calendars import DayCalendar

UTC = datetime.timezone.utc
_ONE_DAY = datetime.timedelta(days=1)
_ONE_SECOND = datetime.timedelta(seconds=1)
_MIDNIGHT = datetime.time()
_CACHE_SIZE = 8192  # per-engine memo of day -> instant (a few hundred KB at most)
_MAX_STEPS = 64  # bound for the small adjustment loops below (each step moves one scheduled day)


class Slot(NamedTuple):
    """One scheduled run: its local day, data interval [start, end) and run time (aware UTC)."""

    day: datetime.date
    start: datetime.datetime
    end: datetime.datetime
    run_after: datetime.datetime


class ScheduleEngine:
    """Compute runs for ``calendar`` × window × ``delay`` in time zone ``tz``.

    :param window_days: N for an N-local-day window ending at the run's day boundary; None for
        "since the previous scheduled day".
    """

    __slots__ = (
        "_day_start_cache",
        "_first_day_cache",
        "_run_after_cache",
        "calendar",
        "delay",
        "lag",
        "lag_calendar",
        "tz",
        "window_days",
    )

    def __init__(
        self,
        *,
        tz: ZoneInfo,
        calendar: DayCalendar,
        window_days: int | None,
        delay: datetime.timedelta,
        lag: int = 0,
        lag_calendar: DayCalendar | None = None,
    ) -> None:
        self.tz = tz
        self.calendar = calendar
        self.window_days = window_days
        self.delay = delay
        self.lag = lag
        self.lag_calendar = lag_calendar if lag_calendar is not None else calendar
        self._day_start_cache: dict[datetime.date, datetime.datetime] = {}
        self._run_after_cache: dict[datetime.date, datetime.datetime] = {}
        # the scheduler asks with the same start_date every time: remember the last answer
        self._first_day_cache: tuple[datetime.datetime, tuple[datetime.date, datetime.date]] | None = None

    # --- local date <-> instant edges -----------------------------------------------------------

    def local_date(self, instant: datetime.datetime) -> datetime.date:
        local = instant.astimezone(self.tz)
        return datetime.date(local.year, local.month, local.day)  # a plain date, whatever the input type

    def resolve_wall(self, wall: datetime.datetime) -> datetime.datetime:
        """Naive local wall time -> UTC instant. Fold: first occurrence; gap: shift forward by its length."""
        # fold=0 gives the pre-transition offset: the first occurrence in a fold, and in a gap the instant
        # shifted forward by the gap length (PEP 495). Two utcoffset() calls are ~3x cheaper than astimezone.
        return (wall - self.tz.utcoffset(wall)).replace(tzinfo=UTC)  # type: ignore[operator]

    def day_start(self, day: datetime.date) -> datetime.datetime:
        """First existing instant of local ``day`` (memoised)."""
        cached = self._day_start_cache.get(day)
        if cached is not None:
            return cached
        midnight = datetime.datetime.combine(day, _MIDNIGHT)
        before = self.tz.utcoffset(midnight)
        after = self.tz.utcoffset(midnight.replace(fold=1))
        instant = (midnight - before).replace(tzinfo=UTC)  # type: ignore[operator]
        if before is not None and after is not None and before < after:
            # midnight is in a spring-forward gap: the day starts at the transition (first existing instant)
            instant = self._first_instant_at_or_after(midnight, instant)
        if len(self._day_start_cache) >= _CACHE_SIZE:
            self._day_start_cache.clear()
        self._day_start_cache[day] = instant
        return instant

    def _first_instant_at_or_after(
        self, wall: datetime.datetime, upper: datetime.datetime
    ) -> datetime.datetime:
        """``wall`` is in a DST gap: the first instant whose wall time is >= ``wall`` is the transition.

        Binary search (seconds) below ``upper`` (the gap-shifted instant, already past the transition).
        """
        lo, hi = upper - datetime.timedelta(days=2), upper
        while hi - lo > datetime.timedelta(seconds=1):
            mid = lo + (hi - lo) / 2
            if mid.astimezone(self.tz).replace(tzinfo=None) >= wall:
                hi = mid
            else:
                lo = mid
        return hi.replace(microsecond=0) if hi.microsecond else hi

    def run_day(self, day: datetime.date) -> datetime.date:
        """The local day whose start the run time counts from: ``D+1``, or with a lag of k business days the
        k-th business day of ``lag_calendar`` after ``D`` (a day the zone skips does not count)."""
        if not self.lag:
            return day + _ONE_DAY
        for _ in range(self.lag):
            day = self.lag_calendar.next_on_or_after(day + _ONE_DAY)
            for _ in range(_MAX_STEPS):
                if self.exists(day):
                    break
                day = self.lag_calendar.next_on_or_after(day + _ONE_DAY)
        return day

    def _wall_run_after(self, day: datetime.date) -> datetime.datetime:
        """``R 00:00 + delay`` (R = :meth:`run_day`) resolved by the gap/fold rules (never before the end
        of the interval)."""
        end = self.day_start(day + _ONE_DAY)
        run_day = self.run_day(day)
        if run_day != day + _ONE_DAY:
            end = self.day_start(run_day)
        if self.delay:
            wall = datetime.datetime.combine(run_day, _MIDNIGHT) + self.delay
            end = max(self.resolve_wall(wall), end)
        return end

    def run_after(self, day: datetime.date) -> datetime.datetime:
        """Run time of scheduled day ``day``: its wall-clock run time, but always strictly (>= 1 s) after the
        previous scheduled day's run time.

        The wall-clock rule alone can give two days the same instant when a gap of 24 h or more swallows a
        run time (Pacific/Apia skipped 2011-12-30: with ``delay=30h`` the run of 12-28, due at 12-30 06:00,
        moves forward by the gap to 12-31 06:00 - the run time of 12-29). Airflow 3 derives run ids from
        ``run_after``, so the later day then runs 1 s after the earlier one. Only the previous *calendar*
        day can collide: scheduled days two or more days apart are >= 48 h apart in wall time, more than
        any UTC offset change. With a business-day lag the run days of two scheduled days are two different
        existing days and the delay is shorter than a day, so they cannot collide either.
        """
        cached = self._run_after_cache.get(day)
        if cached is not None:
            return cached
        instant = self._wall_run_after(day)
        previous = day - _ONE_DAY
        if (
            not self.lag
            and self._wall_run_after(previous) >= instant
            and self.calendar.contains(previous)
            and self.exists(previous)
        ):
            instant = self.run_after(previous) + _ONE_SECOND
        if len(self._run_after_cache) >= _CACHE_SIZE:
            self._run_after_cache.clear()
        self._run_after_cache[day] = instant
        return instant

    # --- scheduled days -----------------------------------------------------------------------------

    def exists(self, day: datetime.date) -> bool:
        """False for a local date the zone skips entirely (Pacific/Apia jumped from 2011-12-29 to 12-31):
        it has no instant, so its interval would be empty. Such a day is never scheduled."""
        return self.day_start(day) != self.day_start(day + _ONE_DAY)

    def next_day(self, day: datetime.date) -> datetime.date:
        """First scheduled day on or after ``day`` (calendar day that exists in the zone)."""
        day = self.calendar.next_on_or_after(day)
        for _ in range(_MAX_STEPS):
            if self.exists(day):
                return day
            day = self.calendar.next_on_or_after(day + _ONE_DAY)
        raise RuntimeError(f"no existing local day on or after {day.isoformat()} within {_MAX_STEPS} steps")

    def prev_day(self, day: datetime.date) -> datetime.date:
        """Last scheduled day on or before ``day`` (calendar day that exists in the zone)."""
        day = self.calendar.prev_on_or_before(day)
        for _ in range(_MAX_STEPS):
            if self.exists(day):
                return day
            day = self.calendar.prev_on_or_before(day - _ONE_DAY)
        raise RuntimeError(f"no existing local day on or before {day.isoformat()} within {_MAX_STEPS} steps")

    # --- one slot ---------------------------------------------------------------------------------

    def window_start_day(self, day: datetime.date, floor: datetime.date | None = None) -> datetime.date:
        if self.window_days is not None:
            return day - datetime.timedelta(days=self.window_days - 1)
        start = self.prev_day(day - _ONE_DAY) + _ONE_DAY
        return start if floor is None or start >= floor else floor

    def slot(self, day: datetime.date, floor: datetime.date | None = None) -> Slot:
        return Slot(
            day,
            self.day_start(self.window_start_day(day, floor)),
            self.day_start(day + _ONE_DAY),
            self.run_after(day),
        )

    # --- searches -----------------------------------------------------------------------------------

    def due_day(self, now: datetime.datetime) -> datetime.date:
        """The latest scheduled day whose run time is <= ``now`` (jumps by date arithmetic, no walking)."""
        wall_now = now.astimezone(self.tz).replace(tzinfo=None)
        estimate = (wall_now - self.delay).date() - _ONE_DAY  # the day whose run day is today
        if self.lag:
            estimate += _ONE_DAY
            for _ in range(self.lag):  # back over the lag's business days
                estimate = self.lag_calendar.prev_on_or_before(estimate - _ONE_DAY)
        day = self.prev_day(estimate)
        for _ in range(_MAX_STEPS):  # DST can make the estimate one scheduled day off either way
            following = self.next_day(day + _ONE_DAY)
            if self.run_after(following) > now:
                break
            day = following
        for _ in range(_MAX_STEPS):
            if self.run_after(day) <= now:
                return day
            day = self.prev_day(day - _ONE_DAY)
        raise RuntimeError(f"no scheduled run due before {now.isoformat()} found within {_MAX_STEPS} steps")

    def first_day_from(self, earliest: datetime.datetime) -> tuple[datetime.date, datetime.date]:
        """(first scheduled day whose interval starts at or after ``earliest``, first local day >= earliest)."""
        cached = self._first_day_cache
        if cached is not None and cached[0] == earliest:
            return cached[1]
        floor = self.local_date(earliest)
        if self.day_start(floor) < earliest:
            floor += _ONE_DAY
        lowest_day = (
            floor if self.window_days is None else floor + datetime.timedelta(days=self.window_days - 1)
        )
        found = (self.next_day(lowest_day), floor)
        self._first_day_cache = (earliest, found)
        return found

    def day_after(self, last_start: datetime.datetime, last_end: datetime.datetime) -> datetime.date:
        """The first scheduled day after a previous run: its window ends after ``last_end`` and it starts
        strictly after ``last_start`` (strict progress, also for intervals written by another schedule)."""
        day = self.local_date(last_end)
        if self.window_days is not None:
            # an N-day window starts N-1 days before its day: jump past ``last_start`` directly (an interval
            # written by another schedule may start far before ``last_end`` - e.g. a daily DAG switched to a
            # 400-day rolling window - and walking there one run at a time would exceed the step bound)
            day = max(day, self.local_date(last_start) + datetime.timedelta(days=self.window_days - 1))
        day = self.next_day(day)
        for _ in range(_MAX_STEPS):
            if self.day_start(self.window_start_day(day)) > last_start:
                return day
            day = self.next_day(day + _ONE_DAY)
        raise RuntimeError(
            f"no scheduled run starting after {last_start.isoformat()} within {_MAX_STEPS} steps"
        )

    # --- what Airflow asks ------------------------------------------------------------------------------

    def next_slot(
        self,
        *,
        last_start: datetime.datetime | None,
        last_end: datetime.datetime | None,
        earliest: datetime.datetime | None,
        latest: datetime.datetime | None,
        catchup: bool,
        now: datetime.datetime,
    ) -> Slot | None:
        """The next run to schedule (Airflow's ``next_dagrun_info``).

        catchup=True: the first slot after the last run (or from ``earliest``). catchup=False: additionally
        never older than the latest slot whose *run time* has passed — so after a pause only the latest due
        run is made, while a delayed run whose time has not come yet is not skipped (apache/airflow#51840).
        """
        candidates: list[datetime.date] = []
        floor: datetime.date | None = None
        if last_start is not None and last_end is not None:
            candidates.append(self.day_after(last_start, last_end))
        if earliest is not None:
            first, floor = self.first_day_from(earliest)
            candidates.append(first)
        if not catchup or not candidates:
            candidates.append(self.due_day(now))
        found = self.slot(max(candidates), floor)
        if latest is not None and found.start > latest:
            return None
        return found

    def manual_slot(self, run_after: datetime.datetime) -> Slot:
        """The scheduled slot current at ``run_after``: the latest one whose run time has passed."""
        return self.slot(self.due_day(run_after))
