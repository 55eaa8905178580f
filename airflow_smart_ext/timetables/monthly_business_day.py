"""MonthlyBusinessDayTimetable: the nth / nth-from-last business day of each month (e.g. month-end close)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext.calendars import BusinessDayCalendar, MonthlyBusinessDay
from airflow_smart_ext.timetables.local_day import (
    DayKeywords,
    InvalidTimetableParameter,
    LocalDayTimetable,
    business_calendar_arg,
    split_day_keywords,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+
from airflow_smart_ext.timetables.business_days import check_window, window_days


class MonthlyBusinessDayTimetable(LocalDayTimetable):
    """One run per month, on its ``n``-th business day (``n=1`` first, ``n=-1`` last, ``n=-2`` second to
    last ...), at ``D+1 00:00 + delay``. A month with fewer than ``abs(n)`` business days uses its last
    (``n > 0``) / first (``n < 0``) one.

    Data interval: ``window="since_previous"`` (default) → from the end of the previous month's interval to
    ``D+1 00:00``, so the intervals tile time with no gap (for ``n=-1``: roughly the month, shifted to the
    business-day boundaries); ``window="day"`` → only the scheduled day ``[D 00:00, D+1 00:00)``.

    ``lag=k`` runs at ``00:00 + delay`` of the k-th business day after D instead (e.g. month-end close
    processed on the 2nd business day of the next month); the data interval does not move.

    Business days: ``calendar=`` or the calendar keywords, as for :class:`BusinessDaysTimetable`.

    ``partitioned=True`` / ``key_format`` (Airflow >= 3.2): as for :class:`BusinessDaysTimetable` - one
    partition per month, keyed by its scheduled day D.
    """

    def __init__(
        self,
        n: int,
        calendar: BusinessDayCalendar | Mapping[str, Any] | None = None,
        *,
        window: str = "since_previous",
        **keywords: Unpack[DayKeywords],
    ) -> None:
        self._window = check_window(window)
        run, calendar_keywords = split_day_keywords(keywords)
        business = business_calendar_arg(calendar, calendar_keywords, required=True)
        try:
            self._monthly = MonthlyBusinessDay(business, n)
        except ValueError as err:
            raise InvalidTimetableParameter(str(err)) from None
        super().__init__(
            calendar=self._monthly, window_days=window_days(self._window), lag_calendar=business, **run
        )

    @classmethod
    def _decode(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {"n": data["n"], "calendar": data["calendar"], "window": data["window"]}

    def _params(self) -> dict[str, Any]:
        return {"n": self._monthly.n, "calendar": self._monthly.calendar.to_dict(), "window": self._window}

    def _what(self) -> str:
        return self._monthly.label()

    def _per(self) -> str:
        return "month, on the " + self._monthly.label().removesuffix(" of the month")

    def _covers(self) -> str:
        if self._window == "day":
            return "its scheduled day D [D 00:00, D+1 00:00)"
        return "every local day since the previous monthly run's interval ended, through its scheduled day D"
