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
    session: Any, task_instances: Iterable[tuple[str, str, str, int]], key: str
) -> dict[tuple[str, str, str, int], Any]:
    """3.3+: the value each task instance (dag_id, run_id, task_id, map_index) keeps under ``key`` in its state
    store, as the configured ``[state_store] backend`` returns it (JSON-decoded; None: no such key). One the
    backend cannot read is left out, logged. {} before 3.3 (no store)."""
    if not TASK_STATE_STORE_SUPPORTED:
        return {}
    from airflow.state import TaskScope, get_state_backend

    backend, values = get_state_backend(), {}
    for dag_id, run_id, task_id, map_index in task_instances:
        scope = TaskScope(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
        try:
            text = backend.get(scope, key, session=session)
            values[(dag_id, run_id, task_id, map_index)] = None if text is None else json.loads(text)
        except Exception:  # a page must show the other waits: this one's record is "not known"
            log.warning("Could not read %r of %s from the task state store", key, scope, exc_info=True)
    return values
