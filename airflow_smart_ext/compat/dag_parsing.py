"""Parsing DAG files: Airflow's ``DagContext`` and its parsing context live in the Task SDK on 3.x, in core on
2.11."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS

__all__ = ["dag_context", "parsing_for_a_task"]


def dag_context() -> Any:
    """Airflow's ``DagContext``: its ``autoregistered_dags`` collect every ``with DAG(...)`` of a module being
    imported (how Airflow's DagBag finds DAGs that no variable holds)."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.definitions._internal.contextmanager import DagContext

        return DagContext
    from airflow.models.dag import DagContext as LegacyDagContext  # 2.11

    return LegacyDagContext


def parsing_for_a_task() -> bool:
    """True while a worker parses the DAG file to run one task (Airflow's parsing context), not while the
    dag-processor parses it to schedule."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import get_parsing_context

        return get_parsing_context().task_id is not None
    from airflow.utils.dag_parsing_context import get_parsing_context as legacy_parsing_context  # 2.11

    return legacy_parsing_context().task_id is not None
