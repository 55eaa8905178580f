"""DelayedDailyTimetable: one run per local day, started ``delay`` after the day ends."""

from __future__ import annotations

import datetime
from typing import Any

from airflow_smart_ext.calendars import EveryDay
from airflow_smart_ext.timetables.local_day import LocalDayTimetable


class DelayedDailyTimetable(LocalDayTimetable):
    """One run per local calendar day D: data interval ``[D 00:00, D+1 00:00)`` in ``timezone``, run at
    wall-clock ``D+1 00:00 + delay`` (e.g. ``delay=timedelta(hours=2)``: yesterday's data at 02:00).

    :param delay: how long after the end of the day the run starts (>= 0, wall clock; default 0).
    :param timezone: IANA time zone name (default ``"UTC"``).
    :param partitioned: Airflow >= 3.2: each run is the partition of its day D (key ``D`` as ``key_format``,
        default ``"%Y-%m-%d"``; no data interval), as with ``BusinessDaysTimetable(partitioned=True)``.
    """

    def __init__(
        self,
        *,
        delay: datetime.timedelta = datetime.timedelta(0),
        timezone: Any = "UTC",
        partitioned: bool = False,
        key_format: str | None = None,
    ) -> None:
        super().__init__(
            calendar=EveryDay(),
            window_days=1,
            timezone=timezone,
            delay=delay,
            partitioned=partitioned,
            key_format=key_format,
        )

    def _params(self) -> dict[str, Any]:
        return {}

    def _what(self) -> str:
        return "daily"

    def _per(self) -> str:
        return "local calendar day"

    def _covers(self) -> str:
        return "one whole local day [D 00:00, D+1 00:00)"
