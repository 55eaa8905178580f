"""Every difference between Airflow 2.11 and Airflow 3.x lives here.

No other module of this package looks at ``airflow.__version__`` or picks an import location by
version: they import the names below. Keep each branch small and say which versions it serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow import __version__ as _AIRFLOW_VERSION_STRING
from packaging.version import Version

if TYPE_CHECKING:
    from pendulum import DateTime

_AIRFLOW_BASE_VERSION = Version(Version(_AIRFLOW_VERSION_STRING).base_version)

AIRFLOW_V_3_0_PLUS = _AIRFLOW_BASE_VERSION >= Version("3.0.0")
AIRFLOW_V_3_1_PLUS = _AIRFLOW_BASE_VERSION >= Version("3.1.0")
AIRFLOW_V_3_3_PLUS = _AIRFLOW_BASE_VERSION >= Version("3.3.0")

# --- Timetables ---------------------------------------------------------------------------------
# Timetables subclass the *core* Timetable on every version: a Task-SDK BaseTimetable subclass cannot be
# serialized (see shared AIRFLOW-NOTES).
from airflow.timetables.base import (  # noqa: E402
    DagRunInfo,
    DataInterval,
    Timetable,
    TimeRestriction,
)

try:  # Airflow 2.11 and 3.x both have it; the name moved nowhere, but keep the failure explicit.
    from airflow.exceptions import AirflowTimetableInvalid
except ImportError:  # pragma: no cover - defensive
    AirflowTimetableInvalid = ValueError  # type: ignore[assignment,misc]


def make_dagrun_info(start: DateTime, end: DateTime, run_after: DateTime) -> DagRunInfo:
    """Build a ``DagRunInfo`` that works on 2.11 and every 3.x.

    ``DagRunInfo(run_after=..., data_interval=...)`` raises TypeError on 3.2.x (partition fields had no
    defaults) and the scheduler swallows it; ``interval()._replace`` works everywhere.
    """
    return DagRunInfo.interval(start, end)._replace(run_after=run_after)


__all__ = [
    "AIRFLOW_V_3_0_PLUS",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AirflowTimetableInvalid",
    "DagRunInfo",
    "DataInterval",
    "TimeRestriction",
    "Timetable",
    "make_dagrun_info",
]


def __getattr__(name: str) -> Any:  # pragma: no cover - helpful error for typos in internal imports
    raise AttributeError(f"airflow_smart_ext.compat has no attribute {name!r}")
