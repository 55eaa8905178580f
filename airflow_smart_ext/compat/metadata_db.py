"""Metadata-DB reads of the web views (issue 26): the DagRun columns (2.11 has no ``run_after`` and calls the
logical date ``execution_date``; < 3.2 no ``partition_key``) and each DAG's latest serialized version (3.x
keeps every version; 2.11 one row per DAG)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from airflow_smart_ext.compat import partitions
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_2_PLUS

__all__ = [
    "dag_run_after",
    "dag_run_columns",
    "dag_run_logical_date",
    "latest_serialized_dag_hashes",
    "latest_serialized_dags",
    "stored_dag",
]


def dag_run_logical_date() -> Any:
    """The DagRun column of a run's logical date: 3.x ``logical_date``, 2.11 ``execution_date``."""
    from airflow.models.dagrun import DagRun

    return DagRun.logical_date if AIRFLOW_V_3_0_PLUS else DagRun.execution_date


def dag_run_after() -> Any:
    """The DagRun column of a run's ``run_after`` (3.x); 2.11 has none (a NULL of the same type)."""
    from airflow.models.dagrun import DagRun

    if AIRFLOW_V_3_0_PLUS:
        return DagRun.run_after
    from sqlalchemy import null

    return null()


def _latest_serialized(
    columns: Sequence[Any], dag_ids: Collection[str] | None, classpaths: Collection[str] | None
) -> Any:
    """A query of ``columns`` of each live DAG's latest serialized version (see :func:`latest_serialized_dags`)."""
    from airflow.models.dag import DagModel
    from airflow.models.serialized_dag import SerializedDagModel as Serialized
    from sqlalchemy import func, select

    query = select(*columns).join(DagModel, DagModel.dag_id == Serialized.dag_id)
    if AIRFLOW_V_3_0_PLUS:
        from airflow.models.dag_version import DagVersion

        latest = (
            select(DagVersion.dag_id, func.max(DagVersion.version_number).label("latest"))
            .group_by(DagVersion.dag_id)
            .subquery()
        )
        query = (
            query.join(DagVersion, DagVersion.id == Serialized.dag_version_id)
            .join(
                latest,
                (latest.c.dag_id == DagVersion.dag_id) & (latest.c.latest == DagVersion.version_number),
            )
            .where(DagModel.is_stale.is_(False))
        )
        if AIRFLOW_V_3_2_PLUS and classpaths is not None:
            query = query.where(DagModel.timetable_type.in_(list(classpaths)))
    else:
        query = query.where(DagModel.is_active.is_(True))
    if dag_ids is not None:
        query = query.where(Serialized.dag_id.in_(list(dag_ids)))
    return query.order_by(Serialized.dag_id)


def latest_serialized_dags(
    session: Any, dag_ids: Collection[str] | None, classpaths: Collection[str] | None = None
) -> Any:
    """(dag_id, stored JSON, compressed JSON) of each live DAG's latest serialized version (columns only: no
    ORM object, no DAG deserialized; :func:`stored_dag` reads them). 3.x keeps every version (the highest
    ``version_number`` is the latest) and marks deleted DAGs stale; 3.2+ also stores the timetable's class
    path, so with ``classpaths`` only DAGs of those timetables are read. 2.11: one row per DAG, deleted DAGs
    inactive."""
    from airflow.models.serialized_dag import SerializedDagModel as Serialized

    columns = (Serialized.dag_id, Serialized._data, Serialized._data_compressed)
    return session.execute(_latest_serialized(columns, dag_ids, classpaths))


def latest_serialized_dag_hashes(session: Any, dag_ids: Collection[str]) -> dict[str, str]:
    """Each live DAG's latest serialized version's ``dag_hash``, by DAG id (the same rows as
    :func:`latest_serialized_dags`, without the JSON: what a reader that caches per version asks first)."""
    from airflow.models.serialized_dag import SerializedDagModel as Serialized

    query = _latest_serialized((Serialized.dag_id, Serialized.dag_hash), dag_ids, None)
    return {dag_id: dag_hash for dag_id, dag_hash in session.execute(query)}


def stored_dag(stored: Any, compressed: bytes | None) -> Mapping[str, Any]:
    """A serialized DAG row's JSON (``[core] compress_serialized_dags`` stores it zlib-compressed)."""
    data = json.loads(zlib.decompress(compressed)) if stored is None and compressed else stored
    return json.loads(data) if isinstance(data, str) else data or {}  # type: ignore[no-any-return]


def dag_run_columns() -> dict[str, Any]:
    """The DagRun columns the Calendars view shows, by name (2.11 has no ``run_after``, < 3.2 no
    ``partition_key``), and the one that orders a DAG's runs (3.x ``run_after``, 2.11 the logical date)."""
    from airflow.models.dagrun import DagRun

    names = ("run_id", "run_type", "state", "data_interval_start", "data_interval_end", "start_date")
    columns = {name: getattr(DagRun, name) for name in names}
    columns["logical_date"] = dag_run_logical_date()
    if AIRFLOW_V_3_0_PLUS:
        columns["run_after"] = DagRun.run_after
    if partitions.PARTITIONS_SUPPORTED:
        columns["partition_key"] = DagRun.partition_key
    return columns
