"""BusinessDaysTimetable: one run per business day (holidays library + explicit lists)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables._base import (
    InvalidTimetableParameter,
    LocalDayTimetable,
    business_calendar_arg,
)

WINDOWS = ("day", "since_previous")


def check_window(window: Any) -> str:
    if window not in WINDOWS:
        raise InvalidTimetableParameter(
            f"window: expected one of {WINDOWS!r} ('day' = the scheduled day only, 'since_previous' = every "
            f"local day since the previous run's interval ended), got {window!r}."
        )
    return str(window)


class BusinessDaysTimetable(LocalDayTimetable):
    """One run per business day D (a weekday that is not a holiday), run at ``D+1 00:00 + delay``.

    Data interval: ``window="day"`` (default) → ``[D 00:00, D+1 00:00)``; ``window="since_previous"`` →
    from the end of the previous business day's interval to ``D+1 00:00`` — Monday's run covers Saturday,
    Sunday and Monday, so no data is left uncovered.

    Business days come from ``calendar=BusinessCalendar(...)`` or the same keyword arguments directly:
    ``country``/``subdivision``/``market``/``categories`` (``holidays`` library codes, e.g. ``market="NYSE"``
    or ``country="DE", subdivision="BY"``), ``extra_holidays``, ``extra_business_days``, ``weekend``.
    """

    def __init__(
        self,
        calendar: BusinessCalendar | Mapping[str, Any] | None = None,
        *,
        country: str | None = None,
        subdivision: str | None = None,
        market: str | None = None,
        categories: str | Iterable[str] | None = None,
        extra_holidays: Iterable[datetime.date | str] | None = None,
        extra_business_days: Iterable[datetime.date | str] | None = None,
        weekend: Iterable[int | str] | None = None,
        window: str = "day",
        delay: datetime.timedelta = datetime.timedelta(0),
        timezone: Any = "UTC",
    ) -> None:
        self._window = check_window(window)
        self._business = business_calendar_arg(
            calendar,
            {
                "country": country,
                "subdivision": subdivision,
                "market": market,
                "categories": categories,
                "extra_holidays": extra_holidays,
                "extra_business_days": extra_business_days,
                "weekend": weekend,
            },
            required=True,
        )
        assert self._business is not None  # required=True
        super().__init__(
            calendar=self._business,
            window_days=1 if self._window == "day" else None,
            timezone=timezone,
            delay=delay,
        )

    @classmethod
    def _decode(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {"calendar": data["calendar"], "window": data["window"]}

    def _params(self) -> dict[str, Any]:
        assert self._business is not None
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
            "(Monday's run covers the weekend)"
        )
