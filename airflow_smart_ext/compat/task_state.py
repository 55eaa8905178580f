"""Airflow 3.3's task state store (AIP-103): key/value state of one task instance in one DAG run that its
retries share (``context["task_state_store"]``, scoped to dag run, task and map index). Before 3.3 there is
none: a worker cannot read what an earlier try of its task instance kept (3.x clears a task's XComs at each
try)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS

__all__ = ["TASK_STATE_STORE_SUPPORTED", "task_state_store"]

TASK_STATE_STORE_SUPPORTED = AIRFLOW_V_3_3_PLUS


def task_state_store(context: Any) -> Any | None:
    """The task instance's state store in a task's ``context`` (``get(key)``, ``set(key, value)``); None before
    Airflow 3.3 or outside a task's run."""
    if not TASK_STATE_STORE_SUPPORTED or not isinstance(context, Mapping):
        return None
    return context.get("task_state_store")
