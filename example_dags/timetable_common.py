"""What the timetable example DAGs share (this module defines no DAG): a task that prints its run's data
interval in the DAG's time zone, so the task log shows what the timetable chose.

Modules in the DAGs folder are importable as top-level modules (here ``timetable_common``)::

    from timetable_common import show_interval

    with DAG(..., schedule=BusinessDaysTimetable(market="NYSE", timezone="America/New_York")):
        show_interval("America/New_York")
"""

from __future__ import annotations

from typing import Any

import pendulum

from airflow_smart_ext.compat.locations import task


def show_interval(zone: str, length_in: str | None = "days") -> Any:
    """The ``show_interval`` task of the DAG being defined: ``data interval <start> -> <end> (<length>)``,
    the length in ``"days"`` or ``"hours"`` (None: not shown)."""

    @task(task_id="show_interval")
    def show(data_interval_start: Any = None, data_interval_end: Any = None) -> None:
        start = pendulum.instance(data_interval_start).in_tz(zone)
        end = pendulum.instance(data_interval_end).in_tz(zone)
        lengths = {"days": f" ({(end - start).in_days()} days)", "hours": f" ({(end - start).in_hours()} h)"}
        print(f"data interval {start.isoformat()} -> {end.isoformat()}{lengths.get(length_in or '', '')}")

    return show()
