"""RollingWindowTimetable: one run per local day (or business day) over the last N local days."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext.calendars import BusinessDayCalendar, EveryDay
from airflow_smart_ext.timetables.local_day import (
    DayKeywords,
    InvalidTimetableParameter,
    LocalDayTimetable,
    business_calendar_arg,
    check_window_days,
    split_day_keywords,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+


class RollingWindowTimetable(LocalDayTimetable):
    """One run per local day D with data interval ``[D-(days-1) 00:00, D+1 00:00)``: the last ``days``
    local calendar days ending at the run's day boundary, so consecutive intervals overlap.

    :param days: window length in local calendar days (>= 1; not 24-hour multiples: DST-safe).
    :param calendar: a business-day calendar to run only on its business days (e.g.
        ``BusinessCalendar(market="NYSE")`` or a combination ``a & b``), or the calendar keywords directly
        (``market="NYSE"``, ...), as for ``BusinessDaysTimetable``. Neither (default): every day.
    :param lag: with a calendar: run at the start of the ``lag``-th business day after D (T+lag); default 0.
    :param delay: how long after the end of day D (or into the lag's business day) the run starts (>= 0).
    :param timezone: IANA time zone name (default ``"UTC"``).
    :param partitioned: / ``key_format``: not supported (only ``False`` / ``None``): a partitioned run has no data interval, so no window.
    """

    def __init__(
        self,
        days: int,
        *,
        calendar: BusinessDayCalendar | Mapping[str, Any] | None = None,
        **keywords: Unpack[DayKeywords],
    ) -> None:
        run, calendar_keywords = split_day_keywords(keywords)
        partitioned, key_format = run.pop("partitioned", False), run.pop("key_format", None)
        if partitioned is not False or key_format is not None:
            raise InvalidTimetableParameter(
                f"partitioned: RollingWindowTimetable cannot be partitioned (got partitioned={partitioned!r}, "
                f"key_format={key_format!r}): a "
                "partitioned run has no data interval, and the N-day window is this timetable's point. Use "
                "BusinessDaysTimetable(partitioned=True) (or DelayedDailyTimetable) for one partition per day "
                "and read the last N partitions downstream."
            )
        self._business = business = business_calendar_arg(calendar, calendar_keywords, required=False)
        self._days = check_window_days(days)
        lag = run.get("lag", 0)
        if lag and business is None:
            raise InvalidTimetableParameter(
                f"lag: counts business days, so it needs a calendar (calendar= or market=/country=...), got "
                f"lag={lag!r} without one; use delay= to shift an every-day window."
            )
        super().__init__(
            calendar=business if business is not None else EveryDay(),
            window_days=self._days,
            **run,
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
