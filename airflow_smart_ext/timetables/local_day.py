"""The Airflow face of :mod:`._engine`: one Timetable base class shared by every public timetable.

Subclasses only translate their constructor arguments into (calendar, window, delay) and back
(``_params`` / ``deserialize``) and name themselves (``_what``); everything else lives here once.
"""

from __future__ import annotations

import datetime
import functools
import zoneinfo
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal, overload

import pendulum

from airflow_smart_ext import compat, units
from airflow_smart_ext.calendars import (
    CALENDAR_KEYWORDS,
    BusinessCalendar,
    BusinessDayCalendar,
    CalendarKeywords,
    CalendarSearchError,
    DayCalendar,
    business_calendar_from_dict,
    ordinal,
)
from airflow_smart_ext.compat.partitions import InvalidPartitionKeyError, make_partition_dagrun_info
from airflow_smart_ext.compat.timetables import (
    AirflowTimetableInvalid,
    DagRunInfo,
    DataInterval,
    TimeRestriction,
    Timetable,
    make_dagrun_info,
)
from airflow_smart_ext.timetables.engine import ScheduleEngine, Slot

_UTC = datetime.timezone.utc
_ONE_DAY = datetime.timedelta(days=1)
_PENDULUM_UTC = pendulum.UTC
DESCRIPTION_MAX_CHARS = 1000  # Airflow stores it in a String(1000) column


class InvalidTimetableParameter(AirflowTimetableInvalid, ValueError):
    """A timetable argument is invalid (both an ``AirflowTimetableInvalid`` and a ``ValueError``)."""


def zone_name(timezone: Any) -> str:
    """Accept an IANA name or a tz object with one (pendulum ``.name`` / zoneinfo ``.key``)."""
    name = (
        timezone
        if isinstance(timezone, str)
        else getattr(timezone, "name", None) or getattr(timezone, "key", None)
    )
    if not isinstance(name, str) or not name:
        raise InvalidTimetableParameter(
            f"timezone: expected an IANA time zone name such as 'UTC', 'America/New_York' or 'Europe/Berlin' "
            f"(or a pendulum/zoneinfo time zone with such a name), got {timezone!r}."
        )
    return name


# Names zoneinfo can load but that mean different things on different machines (or nothing at all):
# "localtime" is the host's own zone, "posixrules" a tzcode default, "Factory" a placeholder ("-00").
NON_PORTABLE_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_ZONE_LIST_HINT = "list: `python -c 'import zoneinfo; print(sorted(zoneinfo.available_timezones()))'`"


@functools.lru_cache(maxsize=1)
def portable_zone_names() -> frozenset[str]:
    """IANA names accepted for ``timezone``: ``zoneinfo.available_timezones()`` (+ "UTC") minus the
    machine-dependent ones (computed once per process: ~40 ms)."""
    return frozenset(zoneinfo.available_timezones() | {"UTC"}) - NON_PORTABLE_ZONES


def load_zone(timezone: Any) -> zoneinfo.ZoneInfo:
    name = zone_name(timezone)
    if name in NON_PORTABLE_ZONES or name.startswith(("posix/", "right/")):
        raise InvalidTimetableParameter(
            f"timezone: {name!r} is not a portable IANA time zone name (it depends on the machine that "
            "parses or schedules the DAG). Accepted: names from zoneinfo.available_timezones() such as "
            f"'UTC', 'America/New_York', 'Europe/Berlin' ({_ZONE_LIST_HINT}); pass the zone explicitly."
        )
    try:
        zone = zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None or name not in portable_zone_names():
        raise InvalidTimetableParameter(
            f"timezone: unknown time zone {name!r}. Accepted: IANA time zone names from "
            "zoneinfo.available_timezones() (case-sensitive) such as 'UTC', 'America/New_York', "
            f"'Europe/Berlin', 'Asia/Kathmandu' ({_ZONE_LIST_HINT}). Fixed offsets like '+05:00' are not "
            "accepted."
        )
    return zone


def check_delay(delay: Any) -> datetime.timedelta:
    if not isinstance(delay, datetime.timedelta):
        raise InvalidTimetableParameter(
            f"delay: expected a datetime.timedelta >= 0 (e.g. timedelta(hours=2)), got {delay!r}."
        )
    if delay < datetime.timedelta(0):
        raise InvalidTimetableParameter(
            f"delay: must be >= 0 (a run never starts before its data interval ends), got {delay!r}."
        )
    if delay >= datetime.timedelta(days=366):
        raise InvalidTimetableParameter(f"delay: must be shorter than 366 days, got {delay!r}.")
    return datetime.timedelta(days=delay.days, seconds=delay.seconds, microseconds=delay.microseconds)


def check_window_days(days: Any) -> int:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3660:
        raise InvalidTimetableParameter(
            f"days: expected a whole number of local calendar days between 1 and 3660, got {days!r}."
        )
    return days


MAX_LAG = 30


def check_lag(lag: Any, delay: datetime.timedelta) -> int:
    """``lag``: run business day D at the start of business day D+lag (0 = at the end of D, the default)."""
    if isinstance(lag, bool) or not isinstance(lag, int) or not 0 <= lag <= MAX_LAG:
        raise InvalidTimetableParameter(
            f"lag: expected a whole number of business days between 0 and {MAX_LAG} (0 = run when day D ends, "
            f"2 = run at the start of the 2nd business day after D, T+2), got {lag!r}."
        )
    if lag and delay >= datetime.timedelta(days=1):
        raise InvalidTimetableParameter(
            f"delay: with lag={lag} the delay is a time of day on the run's business day, so it must be "
            f"shorter than 1 day (e.g. timedelta(hours=6)), got {delay!r}; use a larger lag instead."
        )
    return lag


DEFAULT_KEY_FORMAT = "%Y-%m-%d"
PARTITION_KEY_MAX_CHARS = 250  # Airflow's ID_LEN: the partition_key column
# Dates a key format must tell apart and give back (day, month and year all differ; 2-digit-year formats too)
_KEY_FORMAT_PROBES = (datetime.date(2026, 1, 2), datetime.date(2027, 12, 31), datetime.date(2031, 11, 13))


def check_key_format(partitioned: Any, key_format: Any) -> str | None:
    """``partitioned`` / ``key_format`` -> the key format of a partitioned timetable, or None (unpartitioned).

    A key must name one local date and give it back (``strptime``), so Airflow can resolve manual keys and
    temporal partition mappers can read it; on Airflow < 3.2 partitions do not exist (error naming 3.2).
    """
    if not isinstance(partitioned, bool):
        raise InvalidTimetableParameter(f"partitioned: expected True or False, got {partitioned!r}.")
    if not partitioned:
        if key_format is not None:
            raise InvalidTimetableParameter(
                f"key_format: only used with partitioned=True (the partition key of each run), got "
                f"key_format={key_format!r} with partitioned=False."
            )
        return None
    problem = compat.partitions.partitions_problem()
    if problem is not None:
        raise InvalidTimetableParameter(f"partitioned: {problem}")
    if key_format is None:
        return DEFAULT_KEY_FORMAT
    hint = f"a strftime format naming one date, such as {DEFAULT_KEY_FORMAT!r} (default) or '%Y%m%d'"
    if not isinstance(key_format, str) or not key_format.strip():
        raise InvalidTimetableParameter(f"key_format: expected {hint}, got {key_format!r}.")
    for probe in _KEY_FORMAT_PROBES:
        try:
            key = probe.strftime(key_format)
            back = datetime.datetime.strptime(key, key_format).date()
        except ValueError:
            back = None
        if back != probe:
            raise InvalidTimetableParameter(
                f"key_format: {key_format!r} does not give the date back (e.g. {probe} -> "
                f"{probe.strftime(key_format)!r}); expected {hint}."
            )
        if len(key) > PARTITION_KEY_MAX_CHARS:
            raise InvalidTimetableParameter(
                f"key_format: keys must be at most {PARTITION_KEY_MAX_CHARS} characters, {key_format!r} gives "
                f"{len(key)}."
            )
    return key_format


class DayKeywords(CalendarKeywords, total=False):
    """The keywords the business-day timetables share (``**keywords: Unpack[DayKeywords]``): when and where a
    run starts and what it is, plus the calendar keywords (:class:`~airflow_smart_ext.calendars.CalendarKeywords`).

    Defaults: ``lag=0`` (T+0: at the end of day D), ``delay=timedelta(0)`` (wall-clock time after the day's
    end, or into the lag's business day), ``timezone="UTC"`` (an IANA name), ``partitioned=False`` and
    ``key_format=None`` (``"%Y-%m-%d"`` when partitioned; Airflow >= 3.2).
    """

    lag: int
    delay: datetime.timedelta
    timezone: Any
    partitioned: bool
    key_format: str | None


RUN_KEYWORDS: tuple[str, ...] = tuple(
    name for name in DayKeywords.__annotations__ if name not in CALENDAR_KEYWORDS
)


def split_day_keywords(keywords: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``**keywords`` -> (the run keywords, for :class:`LocalDayTimetable`; the rest, for the calendar)."""
    run = {name: value for name, value in keywords.items() if name in RUN_KEYWORDS}
    return run, {name: value for name, value in keywords.items() if name not in RUN_KEYWORDS}


@overload
def business_calendar_arg(
    calendar: BusinessDayCalendar | Mapping[str, Any] | None,
    keywords: Mapping[str, Any],
    *,
    required: Literal[True],
) -> BusinessDayCalendar: ...


@overload
def business_calendar_arg(
    calendar: BusinessDayCalendar | Mapping[str, Any] | None, keywords: Mapping[str, Any], *, required: bool
) -> BusinessDayCalendar | None: ...


def business_calendar_arg(
    calendar: BusinessDayCalendar | Mapping[str, Any] | None,
    keywords: Mapping[str, Any],
    *,
    required: bool,
) -> BusinessDayCalendar | None:
    """``calendar=`` (a :class:`BusinessCalendar`, a combination such as ``a & b``, or their dict form) or
    the calendar keywords (:class:`~airflow_smart_ext.calendars.CalendarKeywords`), not both; errors
    re-raised as :class:`InvalidTimetableParameter`."""
    unknown = sorted(k for k in keywords if k not in CALENDAR_KEYWORDS)
    if unknown:
        raise InvalidTimetableParameter(
            f"{', '.join(unknown)}: unknown argument; accepted calendar keywords: calendar, "
            f"{', '.join(CALENDAR_KEYWORDS)}."
        )
    given: CalendarKeywords = {k: v for k, v in keywords.items() if v is not None}  # type: ignore[assignment]
    try:
        if calendar is not None:
            if given:
                raise ValueError(
                    f"calendar: pass either calendar=BusinessCalendar(...) or the keyword arguments "
                    f"{sorted(given)}, not both."
                )
            if isinstance(calendar, Mapping):
                return business_calendar_from_dict(calendar)
            if not isinstance(calendar, BusinessDayCalendar):
                raise ValueError(
                    "calendar: expected airflow_smart_ext.calendars.BusinessCalendar, a combination of them "
                    f"(a & b, a | b, a - b) or None, got {calendar!r}."
                )
            return calendar
        if given or required:
            return BusinessCalendar(**given)
        return None
    except InvalidTimetableParameter:
        raise
    except ValueError as err:
        raise InvalidTimetableParameter(str(err)) from None


def format_time_of_day(delay: datetime.timedelta) -> str:
    """Run time label: '00:00', '02:30', '+1d 06:00' (wall clock after the end of the day)."""
    minutes, seconds = divmod(delay.seconds, 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds or delay.microseconds else "")
    return f"+{delay.days}d {clock}" if delay.days else clock


def to_pendulum(instant: datetime.datetime) -> pendulum.DateTime:
    """Aware UTC stdlib datetime -> pendulum DateTime in UTC (what Airflow stores)."""
    # The fields are written out here and in to_stdlib: both run on every timetable call, and a shared helper
    # added 4 of a call's ~70 Python calls (+6 %, docs/benchmarks.md §19).
    return pendulum.DateTime(
        instant.year,
        instant.month,
        instant.day,
        instant.hour,
        instant.minute,
        instant.second,
        instant.microsecond,
        tzinfo=_PENDULUM_UTC,
    )


def to_stdlib(instant: datetime.datetime) -> datetime.datetime:
    """pendulum DateTime -> plain aware datetime (pendulum's arithmetic is ~10x slower in hot paths)."""
    if type(instant) is datetime.datetime:
        return instant
    return datetime.datetime(
        instant.year,
        instant.month,
        instant.day,
        instant.hour,
        instant.minute,
        instant.second,
        instant.microsecond,
        tzinfo=instant.tzinfo,
        fold=instant.fold,
    )


class LocalDayTimetable(Timetable):
    """Base of the package's timetables: runs on local calendar days of an IANA time zone.

    Not used directly; see DelayedDailyTimetable, RollingWindowTimetable, BusinessDaysTimetable and
    MonthlyBusinessDayTimetable.
    """

    _noun: ClassVar[str] = "run"

    def __init__(
        self,
        *,
        calendar: DayCalendar,
        window_days: int | None,
        timezone: Any = "UTC",
        delay: datetime.timedelta = datetime.timedelta(0),
        lag: int = 0,
        lag_calendar: DayCalendar | None = None,
        partitioned: bool = False,
        key_format: str | None = None,
    ) -> None:
        self._key_format = check_key_format(partitioned, key_format)
        # Airflow >= 3.2 reads this: True makes the scheduler call next_dagrun_info_v2 and store the key
        self.partitioned = self._key_format is not None
        self._tz = load_zone(timezone)
        self._timezone_name = self._tz.key
        self._delay = check_delay(delay)
        self._lag = check_lag(lag, self._delay)
        self._calendar = calendar
        self._window_days = window_days
        self._pendulum_cache: dict[datetime.datetime, pendulum.DateTime] = {}
        self._engine = ScheduleEngine(
            tz=self._tz,
            calendar=calendar,
            window_days=window_days,
            delay=self._delay,
            lag=self._lag,
            lag_calendar=lag_calendar,
        )
        self.description = self._describe()[:DESCRIPTION_MAX_CHARS]

    @property
    def engine(self) -> ScheduleEngine:
        """The pure schedule computation behind this timetable (used by ``airflow_smart_ext.preview``)."""
        return self._engine

    # --- to implement in subclasses -------------------------------------------------------------------

    def _params(self) -> dict[str, Any]:
        """The subclass's own constructor arguments, JSON-able (timezone/delay are added here)."""
        raise NotImplementedError

    def _what(self) -> str:
        """Short label of the schedule without time and zone, e.g. 'NYSE business days'."""
        raise NotImplementedError

    def _covers(self) -> str:
        """What each run's data interval covers (phrase for the description)."""
        raise NotImplementedError

    @classmethod
    def _decode(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Serialized params -> constructor kwargs (inverse of ``_params`` for the subclass part)."""
        return dict(data)

    # --- Airflow Timetable API --------------------------------------------------------------------------

    def serialize(self) -> dict[str, Any]:
        # "lag" and "key_format" only when set: a timetable without them serializes exactly as in earlier
        # releases (DAGs serialized by a previous release keep loading, and vice versa)
        return {
            "timezone": self._timezone_name,
            "delay": units.seconds(self._delay),
            **({"lag": self._lag} if self._lag else {}),
            **({"key_format": self._key_format} if self._key_format is not None else {}),
            **self._params(),
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> Timetable:
        kwargs = cls._decode(
            {k: v for k, v in data.items() if k not in ("timezone", "delay", "lag", "key_format")}
        )
        if data.get("lag"):
            kwargs["lag"] = data["lag"]
        if data.get("key_format") is not None:
            kwargs["partitioned"] = True
            kwargs["key_format"] = data["key_format"]
        return cls(timezone=data["timezone"], delay=datetime.timedelta(seconds=data["delay"]), **kwargs)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.serialize() == other.serialize()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(sorted(self.serialize().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.serialize().items())
        return f"{type(self).__name__}({args})"

    def validate(self) -> None:
        """Re-check the stored configuration (Airflow calls this when it serializes the DAG).

        Also computes the run current now, so that holiday data problems surface at DAG parse, not in the
        scheduler.
        """
        load_zone(self._timezone_name)
        check_lag(self._lag, check_delay(self._delay))
        if self._window_days is not None:
            check_window_days(self._window_days)
        try:
            # the run current now: holiday data for this year exists, and a scheduled day can be found
            self._engine.manual_slot(datetime.datetime.now(_UTC))
        except (CalendarSearchError, ValueError, RuntimeError) as err:
            raise InvalidTimetableParameter(f"{type(self).__name__}: cannot compute runs: {err}") from err

    @property
    def summary(self) -> str:
        lag = f" T+{self._lag}" if self._lag else ""
        partitions = ", partitioned" if self._key_format is not None else ""
        return f"{self._what()}{lag} {format_time_of_day(self._delay)} {self._timezone_name}{partitions}"

    def _describe(self) -> str:
        if self._lag:
            nth = "next business day" if self._lag == 1 else f"{ordinal(self._lag)} business day after D"
            start = f"starts at {format_time_of_day(self._delay)} local time on the {nth} (T+{self._lag})"
        else:
            ended = "that interval" if self._key_format is None else "day D"
            start = (
                f"starts at {format_time_of_day(self._delay)} local time after {ended} ends"
                if self._delay
                else f"starts when {ended} ends (00:00 local time)"
            )
        if self._key_format is not None:
            return (
                f"One partitioned {self._noun} per {self._per()} in {self._timezone_name}: its partition key is "
                f"the day D as {self._key_format!r} (partition date D 00:00 local, no data interval); it {start}."
            )
        return (
            f"One {self._noun} per {self._per()} in {self._timezone_name}; each run covers {self._covers()} "
            f"(whole local days, so 23 h or 25 h across DST) and {start}."
        )

    def _per(self) -> str:
        return self._what()

    def infer_manual_data_interval(self, *, run_after: pendulum.DateTime) -> DataInterval:
        slot = self._engine.manual_slot(to_stdlib(run_after))
        return DataInterval(self._pendulum(slot.start), self._pendulum(slot.end))

    def next_dagrun_info(
        self,
        *,
        last_automated_data_interval: DataInterval | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        last = last_automated_data_interval
        slot = self._engine.next_slot(
            last_start=to_stdlib(last.start) if last is not None else None,
            last_end=to_stdlib(last.end) if last is not None else None,
            earliest=to_stdlib(restriction.earliest) if restriction.earliest is not None else None,
            latest=to_stdlib(restriction.latest) if restriction.latest is not None else None,
            catchup=restriction.catchup,
            now=datetime.datetime.now(_UTC),
        )
        return None if slot is None else self._dagrun_info(slot)

    # --- partitioned runs (Airflow >= 3.2 calls these; ``partitioned=True`` only) ------------------------
    # As CronPartitionTimetable: a run has a partition key and date and no data interval; the scheduler asks
    # next_dagrun_info_v2, backfill iter_partition_dagrun_infos, a manual run with a key resolve_partition_date.

    def partition_key(self, day: datetime.date) -> str:
        """The partition key of scheduled day D (``key_format`` applied to D)."""
        return day.strftime(self._key_format or DEFAULT_KEY_FORMAT)

    def _partition_info(self, day: datetime.date, run_after: datetime.datetime) -> DagRunInfo:
        return make_partition_dagrun_info(
            self._pendulum(run_after), self._pendulum(self._engine.day_start(day)), self.partition_key(day)
        )

    def next_dagrun_info_v2(
        self, *, last_dagrun_info: DagRunInfo | None, restriction: TimeRestriction
    ) -> DagRunInfo | None:
        if self._key_format is None:
            return self.next_dagrun_info(
                last_automated_data_interval=last_dagrun_info.data_interval if last_dagrun_info else None,
                restriction=restriction,
            )
        last_start = last_end = None
        if last_dagrun_info is not None:
            partition_date = getattr(last_dagrun_info, "partition_date", None)  # 3.2+ field
            if partition_date is not None:
                # a partitioned run stores no data interval: rebuild its day D's slot from the partition date
                last_day = self._engine.local_date(to_stdlib(partition_date))
                last_start, last_end = self._engine.slot(last_day)[1:3]
            elif last_dagrun_info.data_interval is not None:  # a run from before the DAG was partitioned
                last_start = to_stdlib(last_dagrun_info.data_interval.start)
                last_end = to_stdlib(last_dagrun_info.data_interval.end)
        slot = self._engine.next_slot(
            last_start=last_start,
            last_end=last_end,
            earliest=to_stdlib(restriction.earliest) if restriction.earliest is not None else None,
            latest=None,  # bounds the partition date below, not an interval start
            catchup=restriction.catchup,
            now=datetime.datetime.now(_UTC),
        )
        if slot is None:
            return None
        # end_date bounds the partition date (there is no data interval), as for CronPartitionTimetable
        if restriction.latest is not None and self._engine.day_start(slot.day) > to_stdlib(
            restriction.latest
        ):
            return None
        return self._partition_info(slot.day, slot.run_after)

    def iter_partition_dagrun_infos(
        self, *, earliest: datetime.datetime, latest: datetime.datetime
    ) -> Iterator[DagRunInfo]:
        """Backfill: one run per scheduled day D whose partition date (D 00:00 local) is in [earliest, latest]
        (wall clock read in the timetable's zone, as Airflow does). ``run_after`` is D's own run time, so a
        partition whose day is not over yet waits for it."""
        engine = self._engine
        lower = to_stdlib(self.localize_partition_datetime(earliest))
        upper = to_stdlib(self.localize_partition_datetime(latest))
        day = engine.next_day(engine.local_date(lower))
        while engine.day_start(day) <= upper:
            if engine.day_start(day) >= lower:
                yield self._partition_info(day, engine.run_after(day))
            day = engine.next_day(day + _ONE_DAY)

    def localize_partition_datetime(self, dt: datetime.datetime) -> pendulum.DateTime:
        """``dt``'s wall-clock reading as a moment in the timetable's zone (Airflow's partition-date bounds)."""
        return to_pendulum(self._engine.resolve_wall(to_stdlib(dt).replace(tzinfo=None)))

    def _decode_partition_date(self, partition_key: str) -> datetime.datetime | None:
        """A manual run's key -> its partition date D 00:00; a key that is not one of our days is refused
        (Airflow answers the trigger with the message) - holidays and weekends have no partition."""
        key_format = self._key_format or DEFAULT_KEY_FORMAT
        try:
            day = datetime.datetime.strptime(partition_key, key_format).date()
        except ValueError as err:
            raise InvalidPartitionKeyError(
                f"partition_key: {partition_key!r} does not match this timetable's key_format {key_format!r} "
                f"({err}); e.g. {self.partition_key(datetime.date(2026, 3, 2))!r}."
            ) from None
        if self.partition_key(day) != partition_key:
            raise InvalidPartitionKeyError(
                f"partition_key: write {partition_key!r} as {self.partition_key(day)!r} (key_format "
                f"{key_format!r}); keys must match the scheduled runs' keys exactly."
            )
        try:
            scheduled = self._engine.next_day(day) == day
            if not scheduled:
                why = self._engine.calendar.explain(day) or "not scheduled"
                nearest = f"{self.partition_key(self._engine.prev_day(day))!r} and " + repr(
                    self.partition_key(self._engine.next_day(day))
                )
        except (CalendarSearchError, ValueError, RuntimeError) as err:
            raise InvalidPartitionKeyError(f"partition_key: {partition_key!r}: {err}") from None
        if not scheduled:
            raise InvalidPartitionKeyError(
                f"partition_key: {partition_key!r} is {day:%a %Y-%m-%d} ({why}), not a day of {self.summary}; "
                f"the nearest partitions are {nearest}."
            )
        return self._pendulum(self._engine.day_start(day))

    def _dagrun_info(self, slot: Slot) -> DagRunInfo:
        return make_dagrun_info(
            self._pendulum(slot.start), self._pendulum(slot.end), self._pendulum(slot.run_after)
        )

    def _pendulum(self, instant: datetime.datetime) -> pendulum.DateTime:
        """Memoised :func:`to_pendulum` (consecutive runs share instants: one run's end is the next start)."""
        converted = self._pendulum_cache.get(instant)
        if converted is None:
            if len(self._pendulum_cache) >= 4096:
                self._pendulum_cache.clear()
            converted = self._pendulum_cache[instant] = to_pendulum(instant)
        return converted

    # --- helpers for docs and tests ------------------------------------------------------------------------

    def iter_runs(
        self, start: datetime.datetime, count: int, *, end: datetime.datetime | None = None
    ) -> list[DagRunInfo]:
        """The first ``count`` runs with catchup from ``start`` (what the scheduler would create in order)."""
        restriction = TimeRestriction(
            earliest=pendulum.instance(start), latest=pendulum.instance(end) if end else None, catchup=True
        )
        runs: list[DagRunInfo] = []
        last: DataInterval | None = None
        while len(runs) < count:
            info = self.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
            if info is None:
                break
            runs.append(info)
            last = info.data_interval
        return runs
