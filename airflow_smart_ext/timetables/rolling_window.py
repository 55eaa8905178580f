"""RollingWindowTimetable: one run per local day (or business day) over the last N local days."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_smart_ext.calendars import BusinessCalendar, EveryDay
from airflow_smart_ext.timetables._base import LocalDayTimetable, business_calendar_arg, check_window_days


class RollingWindowTimetable(LocalDayTimetable):
    """One run per local day D with data interval ``[D-(days-1) 00:00, D+1 00:00)``: the last ``days``
    local calendar days ending at the run's day boundary, so consecutive intervals overlap.

    :param days: window length in local calendar days (>= 1; not 24-hour multiples: DST-safe).
    :param calendar: a :class:`~airflow_smart_ext.calendars.BusinessCalendar` to run only on its business
        days (e.g. ``BusinessCalendar(market="NYSE")``), or the same keyword arguments directly
        (``market="NYSE"``, ``country``/``subdivision``/``categories``, ``extra_holidays``,
        ``extra_business_days``, ``weekend``), as for ``BusinessDaysTimetable``. Neither (default): every day.
    :param delay: how long after the end of day D the run starts (>= 0, wall clock; default 0).
    :param timezone: IANA time zone name (default ``"UTC"``).
    """

    def __init__(
        self,
        days: int,
        *,
        calendar: BusinessCalendar | Mapping[str, Any] | None = None,
        country: str | None = None,
        subdivision: str | None = None,
        market: str | None = None,
        categories: str | Iterable[str] | None = None,
        extra_holidays: Iterable[datetime.date | str] | None = None,
        extra_business_days: Iterable[datetime.date | str] | None = None,
        weekend: Iterable[int | str] | None = None,
        delay: datetime.timedelta = datetime.timedelta(0),
        timezone: Any = "UTC",
    ) -> None:
        self._business = business = business_calendar_arg(
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
            required=False,
        )
        self._days = check_window_days(days)
        super().__init__(
            calendar=business if business is not None else EveryDay(),
            window_days=self._days,
            timezone=timezone,
            delay=delay,
        )

    def _params(self) -> dict[str, Any]:
        return {
            "days": self._days,
            "calendar": self._business.to_dict() if self._business is not None else None,
        }

    def _what(self) -> str:
        return f"{self._days}-day window, {self._calendar.label()}"

    def _per(self) -> str:
        return "local day" if self._business is None else self._calendar.label().replace("days", "day")

    def _covers(self) -> str:
        return f"the {self._days} local days [D-{self._days - 1} 00:00, D+1 00:00) ending with its day D"
