"""Parsing DAG files: Airflow's ``DagContext`` and its parsing context live in the Task SDK on 3.x, in core on
2.11."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS

__all__ = ["dag_context", "partial_default_args", "parsing_for_a_task"]


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


def partial_default_args(dag: Any = None, task_group: Any = None) -> dict[str, Any]:
    """The ``default_args`` a mapped task's ``.partial()`` gets from its DAG and task group (those of the DAG
    being defined when none is given), merged as Airflow merges them; Airflow applies them when it unmaps the
    task at run time."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.bases.operator import get_merged_defaults
        from airflow.sdk.definitions._internal.contextmanager import TaskGroupContext

        dag = dag or dag_context().get_current()
        group = task_group or (TaskGroupContext.get_current(dag) if dag else None)
        return dict(get_merged_defaults(dag, group, None, None)[0])
    from airflow.models.baseoperator import get_merged_defaults as legacy_merged_defaults  # 2.11
    from airflow.utils.task_group import TaskGroupContext as LegacyTaskGroupContext

    dag = dag or dag_context().get_current_dag()
    group = task_group or (LegacyTaskGroupContext.get_current_task_group(dag) if dag else None)
    return dict(legacy_merged_defaults(dag, group, None, None)[0])
