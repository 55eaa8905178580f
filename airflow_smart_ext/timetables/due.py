"""``DueTime``: when a wait's data is due, on the timetables' calendars and with their names.

A due time is a wall-clock time of day (``at``, in ``timezone``) on a business day of ``calendar``: with
``lag=0`` the first such time at or after the DAG run's ``reference`` instant (``data_interval_end`` by
default), with ``lag=k`` the same time k business days later (T+k). An interval that ends at local midnight is
due at ``at`` on that day if it is a business day; one that ends after ``at`` (a UTC-midnight interval seen
from New York ends at 19:00) is due the next business day. Without a calendar every day counts. The engine is the
timetables' own (:class:`~airflow_smart_ext.timetables.engine.ScheduleEngine`), so holidays, make-up working
days, a day the zone skips and the DST gap/fold rules are the ones the timetables follow: 09:30 local stays
09:30 local across a clock change.

``DueTime(after=timedelta(...))`` is a plain offset from the reference instant instead (no calendar).

A due time is computed from the run each time it is needed, never remembered; it serializes as
:meth:`DueTime.to_dict` (what a mapped task's ``.expand()`` may pass too) and is rebuilt by :meth:`DueTime.from_dict`.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import units
from airflow_smart_ext.calendars import BusinessDayCalendar, EveryDay
from airflow_smart_ext.timetables.engine import ScheduleEngine
from airflow_smart_ext.timetables.local_day import (
    InvalidTimetableParameter,
    business_calendar_arg,
    format_time_of_day,
    load_zone,
    zone_name,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+

    from airflow_smart_ext.calendars import CalendarKeywords

#: The run instants a due time may count from (each a key of the task's context).
REFERENCES = ("data_interval_end", "data_interval_start", "logical_date")
#: A sensor's key in the serialized DAG holding its due time (:func:`serialized_due`): the Calendars view reads it.
SERIALIZED_KEY = "smart_ext_due"
_ONE_DAY = datetime.timedelta(days=1)
_AT = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?$")
_KEYS = ("at", "after", "lag", "timezone", "calendar", "reference")


class InvalidDueTime(InvalidTimetableParameter):
    """A ``DueTime`` argument is invalid; the message names it (``due.<name>``) and what it accepts."""


def _time_of_day(at: Any) -> datetime.timedelta:
    accepted = "a time of day: 'HH:MM' or 'HH:MM:SS' (24-hour), or a naive datetime.time"
    if isinstance(at, str):
        match = _AT.match(at)
        if match is None:
            raise InvalidDueTime(f"due.at: expected {accepted}, got {at!r}.")
        hours, minutes, seconds = (int(part or 0) for part in match.groups())
        return datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if isinstance(at, datetime.time) and at.tzinfo is None:
        return datetime.timedelta(
            hours=at.hour, minutes=at.minute, seconds=at.second, microseconds=at.microsecond
        )
    raise InvalidDueTime(f"due.at: expected {accepted} (the zone is due.timezone), got {at!r}.")


def _offset(after: Any) -> datetime.timedelta:
    value = units.seconds(after) if isinstance(after, (int, float, datetime.timedelta)) else None
    if isinstance(after, bool) or value is None or not value >= 0 or value == float("inf"):
        raise InvalidDueTime(
            f"due.after: expected a duration >= 0 (a datetime.timedelta or seconds), got {after!r}."
        )
    return datetime.timedelta(seconds=value)


class DueTime:
    """When a wait's data is due: the first ``at`` (local time of day in ``timezone``) on a business day of
    ``calendar`` at or after the reference instant, ``lag`` business days later; or ``after`` (a duration)
    from the reference instant.

    :param at: ``"HH:MM"``, ``"HH:MM:SS"`` or a naive ``datetime.time``: wall clock in ``timezone``.
    :param after: instead of ``at``: a ``timedelta`` (or seconds) after the reference instant.
    :param calendar: a :class:`~airflow_smart_ext.calendars.BusinessCalendar`, a combination, or their dict
        form; or the calendar keywords directly (``market="NYSE"``, ``country="GB"``, ...). None: every day.
    :param lag: business days after the first ``at`` on a business day at or after the reference (T+k), >= 0.
    :param timezone: IANA time zone name of ``at`` and of the business days (default ``"UTC"``).
    :param reference: the run instant the due time counts from: one of :data:`REFERENCES`.
    """

    __slots__ = ("_after", "_at", "_business", "_engine", "_first", "_reference", "_zone", "lag")

    def __init__(
        self,
        at: str | datetime.time | None = None,
        *,
        after: datetime.timedelta | float | None = None,
        calendar: BusinessDayCalendar | Mapping[str, Any] | None = None,
        lag: int = 0,
        timezone: Any = "UTC",
        reference: str = "data_interval_end",
        **calendar_keywords: Unpack[CalendarKeywords],
    ) -> None:
        if reference not in REFERENCES:
            raise InvalidDueTime(f"due.reference: expected one of {REFERENCES!r}, got {reference!r}.")
        self._reference = reference
        if (at is None) == (after is None):
            raise InvalidDueTime(
                "due: pass exactly one of at= (a time of day on a calendar's business day, e.g. "
                "DueTime('09:30', market='NYSE', timezone='America/New_York')) and after= (a duration after "
                f"the reference instant, e.g. DueTime(after=timedelta(hours=2))); got at={at!r}, after={after!r}."
            )
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
            raise InvalidDueTime(f"due.lag: expected an integer >= 0 (business days, T+k), got {lag!r}.")
        self.lag = lag
        self._after = _offset(after) if after is not None else None
        if self._after is not None:
            given = {"lag": lag or None, "calendar": calendar, **calendar_keywords}
            given.update({"timezone": None if timezone == "UTC" else timezone})
            extra = sorted(name for name, value in given.items() if value is not None)
            if extra:
                raise InvalidDueTime(
                    f"due: after= is a plain offset from the reference instant; {', '.join(extra)} apply "
                    "only with at= (a time of day on a calendar)."
                )
        self._at = _time_of_day(at) if at is not None else None
        try:
            self._zone = load_zone(timezone)
            self._business = business_calendar_arg(calendar, calendar_keywords, required=False)
        except InvalidTimetableParameter as err:
            raise InvalidDueTime(f"due.{err}") from None
        self._engine = self._engine_with_lag(self._at, lag) if self._at is not None else None
        # T+0: which day the first ``at`` at or after the reference is on (the lag counts from that day)
        self._first = self._engine_with_lag(self._at, 0) if self._at is not None and lag else self._engine

    def _engine_with_lag(self, at: datetime.timedelta, lag: int) -> ScheduleEngine:
        """``run_after(day)``: ``at`` on the ``lag``-th business day after the first one after ``day``."""
        return ScheduleEngine(
            tz=self._zone,
            calendar=EveryDay(),
            window_days=1,
            delay=at,
            lag=lag + 1,  # from the day before a day: the first business day on or after that day, then T+lag
            lag_calendar=self._business or EveryDay(),
        )

    @property
    def timezone(self) -> datetime.tzinfo:
        """The zone of ``at`` and of the business days (UTC for an ``after=`` offset)."""
        return self._zone

    @property
    def reference(self) -> str:
        """The context key of the run instant the due time counts from."""
        return self._reference

    def reference_in(self, instants: Mapping[str, Any]) -> datetime.datetime | None:
        """The run instant the due time counts from, out of a run's ``instants`` (a task's context, a DAG run's
        columns): the one :attr:`reference` names; for a run without it (a 3.x manual run has no logical date),
        its ``run_after``; None if neither is an aware datetime."""
        for value in (instants.get(self._reference), instants.get("run_after")):
            if isinstance(value, datetime.datetime) and value.tzinfo is not None:
                return value
        return None

    def due_epoch(self, instants: Mapping[str, Any], try_started_at: float) -> float:
        """The due time (epoch seconds) of a wait in a run with these ``instants``: from :meth:`reference_in`,
        else (no such instant) from the start of the try. Sensor, zero-worker trigger and Waits view all ask it."""
        reference = self.reference_in(instants) or units.utc(try_started_at)
        return units.epoch(self.due_at(reference))

    def due_at(self, reference: datetime.datetime) -> datetime.datetime:
        """The due time (aware UTC) of a wait whose reference instant is ``reference`` (aware)."""
        if self._engine is None:
            assert self._after is not None
            return reference.astimezone(datetime.timezone.utc) + self._after
        assert self._first is not None
        day = self._engine.local_date(reference)
        if self._first.run_after(day - _ONE_DAY) < reference:  # ``at`` on the reference's own day has passed
            day += _ONE_DAY
        return self._engine.run_after(day - _ONE_DAY)

    def latest_at_or_before(self, instant: datetime.datetime) -> datetime.datetime | None:
        """The last ``at`` on a business day at or before ``instant`` (aware), searching back up to a year (None:
        none in that time, or a due time of ``after=`` form, which has no days). A condition watcher's due times
        are these: one per business day."""
        if self._engine is None:
            return None
        for back in (7, 31, 366):  # a long holiday (Golden Week) needs more than a week
            due = self.due_at(instant - datetime.timedelta(days=back))
            if due > instant:
                continue
            while True:
                following = self.due_at(due + datetime.timedelta(seconds=1))
                if following > instant:
                    return due
                due = following
        return None

    def describe(self, daily: bool = False) -> str:
        """In words, e.g. "the first 09:30 America/New_York on a NYSE business day at or after
        data_interval_end"; ``daily``: as a watcher's due times, e.g. "09:30 America/New_York on each NYSE
        business day"."""
        if self._after is not None:
            return f"{units.duration_text(units.seconds(self._after))} after {self._reference}"
        assert self._at is not None
        days = self._business.label() if self._business is not None else "days"
        day = days.replace("days", "day")
        at = f"{format_time_of_day(self._at)} {zone_name(self._zone)}"
        if daily:
            return f"{at} on each {day}"
        first = f"the first {at} on a {day} at or after {self._reference}"
        later = day if self.lag == 1 else days
        return first if self.lag == 0 else f"{first}, then {self.lag} {later} later (T+{self.lag})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the timetables' own calendar form inside), rebuilt by :meth:`from_dict`."""
        return {
            "at": format_time_of_day(self._at) if self._at is not None else None,
            "after": units.seconds(self._after) if self._after is not None else None,
            "lag": self.lag,
            "timezone": zone_name(self._zone),
            "calendar": self._business.to_dict() if self._business is not None else None,
            "reference": self._reference,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DueTime:
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise InvalidDueTime(f"due: unknown key(s) {unknown}; accepted: {list(_KEYS)}.")
        return cls(
            data.get("at"),
            after=data.get("after"),
            calendar=data.get("calendar"),
            lag=data.get("lag", 0),
            timezone=data.get("timezone", "UTC"),
            reference=data.get("reference", "data_interval_end"),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DueTime) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(repr(sorted(self.to_dict().items(), key=lambda item: item[0])))

    def __repr__(self) -> str:
        return f"DueTime({self.describe()})"


def due_time_arg(due: Any) -> DueTime | None:
    """``due=`` as a sensor takes it: a :class:`DueTime`, its dict form, or None; ``InvalidDueTime`` otherwise."""
    if due is None or isinstance(due, DueTime):
        return due
    if isinstance(due, Mapping):
        return DueTime.from_dict(due)
    raise InvalidDueTime(
        f"due: expected airflow_smart_ext.timetables.DueTime, its dict form (DueTime.to_dict()) or None, "
        f"got {due!r}."
    )


def serialized_due(due: DueTime | None) -> str | None:
    """A due time as the serialized DAG keeps it (:data:`SERIALIZED_KEY`): its JSON form as text, which Airflow
    stores unchanged on 2.11 and 3.x (a nested dict would gain its type markers); None: no due time."""
    return None if due is None else json.dumps(due.to_dict(), sort_keys=True)
