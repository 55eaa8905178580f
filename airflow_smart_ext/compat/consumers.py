"""Watcher consumers (``airflow_smart_ext.consumers``): what a task reads and writes, Airflow 3.3+ only.

* A watcher's ``seq`` survives a triggerer restart only where its watermark lives in the asset state store
  (3.3+); on 3.0-3.2 it starts again at 1 after each restart, so ``(watcher, seq)`` names no value there and
  the helper refuses to run (``require_consumers``). 2.11 has no watchers.
* The task's context (``inlet_events``) and Variables through the Task SDK. 3.3's ``Variable.set`` raises when
  the write fails; 3.0-3.2's logged the error and returned, which would have made a failed mark look done.
"""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS, AIRFLOW_VERSION_STRING

__all__ = [
    "CONSUMERS_MIN_AIRFLOW",
    "CONSUMERS_SUPPORTED",
    "ConsumersUnsupported",
    "current_task_context",
    "read_variable",
    "require_consumers",
    "write_variable",
]

CONSUMERS_MIN_AIRFLOW = "3.3.0"
CONSUMERS_SUPPORTED = AIRFLOW_V_3_3_PLUS


class ConsumersUnsupported(RuntimeError):
    """The consumer helper was called on an Airflow where a watcher's ``seq`` does not survive a restart."""


def require_consumers(what: str) -> None:
    if CONSUMERS_SUPPORTED:
        return
    raise ConsumersUnsupported(
        f"{what} needs Airflow >= {CONSUMERS_MIN_AIRFLOW}: before it a watcher's seq starts again at 1 after "
        f"each triggerer restart (no asset state store), so it cannot tell a value already processed from a "
        f"new one; this is Airflow {AIRFLOW_VERSION_STRING}. Process every event of triggering_asset_events "
        "instead (docs/watchers.md, Consumers)."
    )


def current_task_context() -> Any:
    from airflow.sdk import get_current_context

    return get_current_context()


def read_variable(key: str) -> str | None:
    from airflow.sdk import Variable

    value = Variable.get(key, default=None)
    return None if value is None else str(value)


def write_variable(key: str, value: str) -> None:
    from airflow.sdk import Variable

    Variable.set(key, value)
