"""Partitioned runs (Airflow >= 3.2; none on 2.11, 3.0 and 3.1).

3.2 added ``partition_key`` / ``partition_date`` on ``DagRunInfo`` and ``Timetable.partitioned`` (the
scheduler then calls ``next_dagrun_info_v2`` and stores the key on the run). Earlier versions have neither:
asking a timetable for partitions there fails at DAG parse (see :func:`partitions_problem`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from packaging.version import Version

from airflow_smart_ext.compat.timetables import DagRunInfo
from airflow_smart_ext.compat.versions import AIRFLOW_BASE_VERSION, AIRFLOW_VERSION_STRING

if TYPE_CHECKING:
    from pendulum import DateTime

__all__ = [
    "PARTITIONS_MIN_AIRFLOW",
    "PARTITIONS_SUPPORTED",
    "InvalidPartitionKeyError",
    "make_partition_dagrun_info",
    "partitions_problem",
]

PARTITIONS_MIN_AIRFLOW = "3.2.0"
PARTITIONS_SUPPORTED = Version(PARTITIONS_MIN_AIRFLOW) <= AIRFLOW_BASE_VERSION

try:  # 3.3 (ValueError subclass; the REST API answers 400 with its message); 3.2: a plain ValueError
    from airflow.exceptions import InvalidPartitionKeyError  # type: ignore[attr-defined,unused-ignore]
except ImportError:
    InvalidPartitionKeyError = ValueError  # type: ignore[assignment,misc]


def partitions_problem() -> str | None:
    """Why this Airflow cannot run partitioned timetables, or None when it can (reads the flag at call time)."""
    if PARTITIONS_SUPPORTED:
        return None
    return (
        f"partitioned runs need Airflow >= {PARTITIONS_MIN_AIRFLOW} (partition_key / partition_date on DAG "
        f"runs); this is Airflow {AIRFLOW_VERSION_STRING}. Leave partitioned=False here (e.g. "
        "partitioned=airflow_smart_ext.compat.PARTITIONS_SUPPORTED) or upgrade Airflow."
    )


def make_partition_dagrun_info(
    run_after: DateTime, partition_date: DateTime, partition_key: str
) -> DagRunInfo:
    """A partitioned run (no data interval, as ``CronPartitionTimetable`` makes them), built without keyword
    construction (3.2.x: see ``compat.timetables.make_dagrun_info``)."""
    # the partition fields are 3.2+: passed as a mapping, so mypy also passes against 2.11's DagRunInfo
    fields: dict[str, Any] = {
        "data_interval": None,
        "partition_date": partition_date,
        "partition_key": partition_key,
    }
    return DagRunInfo.exact(run_after)._replace(**fields)
