"""Airflow 3.3's task state store (AIP-103): key/value state of one task instance in one DAG run that its
retries share (``context["task_state_store"]``, scoped to dag run, task and map index). Before 3.3 there is
none: a worker cannot read what an earlier try of its task instance kept (3.x clears a task's XComs at each
try)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS

__all__ = ["TASK_STATE_STORE_SUPPORTED", "task_state_store", "task_state_values"]

log = logging.getLogger(__name__)

TASK_STATE_STORE_SUPPORTED = AIRFLOW_V_3_3_PLUS


def task_state_store(context: Any) -> Any | None:
    """The task instance's state store in a task's ``context`` (``get(key)``, ``set(key, value)``); None before
    Airflow 3.3 or outside a task's run."""
    if not TASK_STATE_STORE_SUPPORTED or not isinstance(context, Mapping):
        return None
    return context.get("task_state_store")


def task_state_values(
    task_instances: Iterable[tuple[str, str, str, int]], key: str
) -> dict[tuple[str, str, str, int], Any]:
    """3.3+: the value each task instance (dag_id, run_id, task_id, map_index) keeps under ``key`` in its state
    store, JSON-decoded (None: no such key), as the configured ``[state_store] backend`` keeps it: a query per
    500 for Airflow's own (the metadata DB), one read per task instance for another. Read in sessions of their
    own (a failed read must not end the caller's transaction); one that cannot be read is left out, logged. {}
    before 3.3 (no store)."""
    wanted = list(task_instances)
    if not TASK_STATE_STORE_SUPPORTED or not wanted:
        return {}
    try:
        from airflow.state import TaskScope, get_state_backend
        from airflow.state.metastore import MetastoreBackend

        backend = get_state_backend()
        if type(backend) is MetastoreBackend:  # (a subclass may keep values elsewhere: read as another)
            return _metastore_values(wanted, key)
    except Exception:  # a page must show its waits: their records are "not known"
        log.warning("Could not read %r from the task state store", key, exc_info=True)
        return {}
    from airflow.utils.session import create_session

    values = {}
    for dag_id, run_id, task_id, map_index in wanted:
        scope = TaskScope(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
        try:  # in a session of its own, not the thread's (the caller may hold that one)
            with create_session(scoped=False) as session:  # type: ignore[call-arg,unused-ignore]  # 3.3+
                text = backend.get(scope, key, session=session)
            values[(dag_id, run_id, task_id, map_index)] = None if text is None else json.loads(text)
        except Exception:  # this one's record is "not known"; the others are read
            log.warning("Could not read %r of %s from the task state store", key, scope, exc_info=True)
    return values


def _metastore_values(
    wanted: list[tuple[str, str, str, int]], key: str
) -> dict[tuple[str, str, str, int], Any]:
    """The metadata DB's ``task_state_store`` rows of ``key`` for ``wanted``, a query per 500 (bound parameters
    stay far below SQLite's limit; ``MetastoreBackend`` keeps each value as JSON text)."""
    from airflow.models.task_state_store import TaskStateStoreModel as Row
    from airflow.utils.session import create_session
    from sqlalchemy import select, tuple_

    values: dict[tuple[str, str, str, int], Any] = dict.fromkeys(wanted)
    columns = (Row.dag_id, Row.run_id, Row.task_id, Row.map_index)
    chunks = [wanted[start : start + 500] for start in range(0, len(wanted), 500)]
    # a session of its own, not the thread's (the caller may hold that one)
    with create_session(scoped=False) as session:  # type: ignore[call-arg,unused-ignore]  # 3.3+
        rows = [
            row
            for chunk in chunks
            for row in session.execute(
                select(*columns, Row.value).where(Row.key == key, tuple_(*columns).in_(chunk))
            )
        ]
        for row in rows:
            instance = (row.dag_id, row.run_id, row.task_id, row.map_index)
            try:
                values[instance] = json.loads(row.value)
            except ValueError:  # not JSON: not ours to read
                log.warning("The task state store's %r of %s is not JSON", key, instance)
                del values[instance]
    return values
