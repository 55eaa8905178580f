"""The core timetable API on 2.11 and every 3.x, and building a ``DagRunInfo`` that 3.2.x accepts.

Timetables subclass the *core* Timetable on every version: a Task-SDK BaseTimetable subclass cannot be
serialized (see shared AIRFLOW-NOTES).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable

if TYPE_CHECKING:
    from pendulum import DateTime

try:  # Airflow 2.11 and 3.x both have it; the name moved nowhere, but keep the failure explicit.
    from airflow.exceptions import AirflowTimetableInvalid
except ImportError:  # pragma: no cover - defensive
    AirflowTimetableInvalid = ValueError  # type: ignore[assignment,misc]

__all__ = [
    "AirflowTimetableInvalid",
    "DagRunInfo",
    "DataInterval",
    "TimeRestriction",
    "Timetable",
    "make_dagrun_info",
]


def make_dagrun_info(start: DateTime, end: DateTime, run_after: DateTime) -> DagRunInfo:
    """Build a ``DagRunInfo`` that works on 2.11 and every 3.x.

    ``DagRunInfo(run_after=..., data_interval=...)`` raises TypeError on 3.2.x (partition fields had no
    defaults) and the scheduler swallows it; ``interval()._replace`` works everywhere.
    """
    return DagRunInfo.interval(start, end)._replace(run_after=run_after)
