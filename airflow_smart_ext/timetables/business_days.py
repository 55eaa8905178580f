"""BusinessDaysTimetable: one run per business day (holidays library + explicit lists)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext.calendars import BusinessDayCalendar
from airflow_smart_ext.timetables.local_day import (
    DayKeywords,
    InvalidTimetableParameter,
    LocalDayTimetable,
    business_calendar_arg,
    split_day_keywords,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+

WINDOWS = ("day", "since_previous")


def check_window(window: Any) -> str:
    if window not in WINDOWS:
        raise InvalidTimetableParameter(
            f"window: expected one of {WINDOWS!r} ('day' = the scheduled day only, 'since_previous' = every "
            f"local day since the previous run's interval ended), got {window!r}."
        )
    return str(window)


def window_days(window: str) -> int | None:
    """A checked ``window`` -> the engine's ``window_days`` (None: since the previous run's interval ended)."""
    return 1 if window == "day" else None


class BusinessDaysTimetable(LocalDayTimetable):
    """One run per business day D of a calendar, run at ``D+1 00:00 + delay`` — or, with ``lag=k``, at
    ``00:00 + delay`` of the k-th business day after D (T+k; the data interval does not move).

    Data interval: ``window="day"`` (default) → ``[D 00:00, D+1 00:00)``; ``window="since_previous"`` →
    from the end of the previous business day's interval to ``D+1 00:00`` — Monday's run covers Saturday,
    Sunday and Monday, so no data is left uncovered.

    Business days come from ``calendar=`` (a ``BusinessCalendar``, a combination such as
    ``BusinessCalendar(market="NYSE") & BusinessCalendar(market="XLON")``, or their dict form) or the calendar
    keywords directly (:class:`~airflow_smart_ext.calendars.CalendarKeywords`: ``country``, ``subdivision``,
    ``market``, ``categories``, ``extra_holidays``, ``extra_business_days``, ``weekend``). ``lag``, ``delay``,
    ``timezone``, ``partitioned`` and ``key_format`` are the keywords every business-day timetable takes
    (:class:`~airflow_smart_ext.timetables.local_day.DayKeywords`, with their defaults).

    ``partitioned=True`` (Airflow >= 3.2): each run is the partition of its business day D — ``partition_key``
    is D as ``key_format`` (default ``"%Y-%m-%d"``), ``partition_date`` is D 00:00 local, and, as with
    Airflow's ``CronPartitionTimetable``, the run has no data interval (``window`` is then not used).
    """

    def __init__(
        self,
        calendar: BusinessDayCalendar | Mapping[str, Any] | None = None,
        *,
        window: str = "day",
        **keywords: Unpack[DayKeywords],
    ) -> None:
        self._window = check_window(window)
        run, calendar_keywords = split_day_keywords(keywords)
        self._business = business_calendar_arg(calendar, calendar_keywords, required=True)
        super().__init__(calendar=self._business, window_days=window_days(self._window), **run)

    @classmethod
    def _decode(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {"calendar": data["calendar"], "window": data["window"]}

    def _params(self) -> dict[str, Any]:
        return {"calendar": self._business.to_dict(), "window": self._window}

    def _what(self) -> str:
        suffix = " (incl. days off)" if self._window == "since_previous" else ""
        return self._calendar.label() + suffix

    def _per(self) -> str:
        return self._calendar.label().replace("days", "day")

    def _covers(self) -> str:
        if self._window == "day":
            return "its business day D [D 00:00, D+1 00:00)"
        return (
            "every local day since the previous business day's interval ended, through its business day D "
            "(the first run after days off covers them)"
        )
