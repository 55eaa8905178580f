"""Starting and ending a task in the triggerer (the zero-worker path): what 2.11 and 3.3+ offer, why 3.0-3.2
start on a worker, and what each line persists, renders and keeps for a start-from-trigger task.

A deferrable sensor can skip the worker entirely: the scheduler defers it from the operator's *static*
``start_trigger_args`` (``DagRun.schedule_tis`` -> ``TaskInstance.defer_task``), and the trigger ends it with
``TaskSuccessEvent``. What each line offers (read from the 3.3.2 and 2.11.2 wheels, verified live):

* 3.3+: the triggerer builds a RuntimeTaskInstance for such a task, renders the trigger's attributes that
  are both operator template fields and ``trigger_kwargs`` keys, and sets ``timeout_after`` to the TI's
  persisted ``trigger_timeout``. The trigger's task instance carries no ``start_date``.
  Mapped tasks always start on a worker (``SerializedMappedOperator.expand_start_from_trigger`` returns
  False, "unsupported", GH-52141 / apache/airflow#48009).
* 3.0-3.2: the scheduler path was disabled upstream (apache/airflow#53744) until 3.3 re-enabled it with
  triggerer-side rendering (apache/airflow#55068): worker-first there.
* 2.11: the scheduler starts the task in the triggerer but nothing renders templates; the trigger's
  ``task_instance`` is the ORM row (``start_date`` = start of the try). Mapped tasks: the mapped operator
  reads the *class* attribute ``start_trigger_args`` (None for our sensors), so they start on a worker.
"""

from __future__ import annotations

import datetime
from typing import Any

from packaging.version import Version

from airflow_smart_ext import units
from airflow_smart_ext.compat import locations
from airflow_smart_ext.compat.versions import (
    AIRFLOW_BASE_VERSION,
    AIRFLOW_V_3_0_PLUS,
    AIRFLOW_V_3_3_PLUS,
    AIRFLOW_VERSION_STRING,
)

__all__ = [
    "START_CONTEXT_RELEASABLE",
    "START_FROM_TRIGGER_RENDERS_TEMPLATES",
    "START_FROM_TRIGGER_SUPPORTED",
    "mapped_start_problem",
    "release_start_context",
    "start_from_trigger_problem",
    "trigger_end_runs_success_callbacks",
    "trigger_run_dates",
    "trigger_template_env",
    "trigger_try_started_at",
]

#: Whether the scheduler can start a (non-mapped) task in the triggerer on this Airflow line.
START_FROM_TRIGGER_SUPPORTED = AIRFLOW_V_3_3_PLUS or not AIRFLOW_V_3_0_PLUS
#: Whether the triggerer renders a start-from-trigger task's template fields (3.3+; not 2.11).
START_FROM_TRIGGER_RENDERS_TEMPLATES = AIRFLOW_V_3_3_PLUS


def trigger_end_runs_success_callbacks() -> bool:
    """Whether Airflow runs ``on_success_callback`` for a task a trigger ended with ``TaskSuccessEvent``.

    The triggerer only stores a callback request in the DB. 3.3.2: the dag-processor runs only *failure*
    task callbacks ("Task callback requested but is not a failure callback", dag_processing/processor.py).
    2.11: DB callback requests are fetched only by a standalone DAG processor
    (``[scheduler] standalone_dag_processor``; DagFileProcessorManager). Where this is False, a sensor with
    success callbacks ends on a worker.
    """
    if AIRFLOW_V_3_0_PLUS:
        return False
    return bool(locations.airflow_conf.getboolean("scheduler", "standalone_dag_processor", fallback=False))


def start_from_trigger_problem(*, templated: bool) -> str | None:
    """Why this Airflow cannot start a (non-mapped) task in the triggerer, or None when it can.

    ``templated``: the task's arguments contain Jinja templates that must be rendered before check #0.
    """
    if not START_FROM_TRIGGER_SUPPORTED:
        return (
            f"Airflow {AIRFLOW_VERSION_STRING} does not start tasks in the triggerer (the scheduler path is "
            f"disabled on 3.0-3.2; available on 2.11 and 3.3+)"
        )
    if templated and not START_FROM_TRIGGER_RENDERS_TEMPLATES:
        return (
            f"its arguments are templated and Airflow {AIRFLOW_VERSION_STRING} does not render templates in "
            f"the triggerer (3.3+ does)"
        )
    return None


def mapped_start_problem() -> str:
    """Why a mapped task instance started on a worker although it asked for the triggerer."""
    return (
        f"mapped tasks cannot start in the triggerer on Airflow {AIRFLOW_VERSION_STRING} (the scheduler "
        f"starts every mapped task instance on a worker: apache/airflow#48009)"
    )


def _epoch_of(value: Any) -> float | None:
    # 2.11 stores trigger_timeout naive (UTC): units.epoch reads a naive value as UTC
    return units.epoch(value) if isinstance(value, datetime.datetime) else None


def trigger_try_started_at(trigger: Any, backstop_seconds: float) -> float | None:
    """When the current try started (epoch seconds), from what Airflow persisted for it; None if unknown.

    ``backstop_seconds``: the trigger timeout the scheduler applied (``StartTriggerArgs.timeout``, capped by
    ``execution_timeout`` as ``defer_task`` does). A rebuilt trigger (triggerer restart, reassignment) gets
    the same answer, so its schedule and deadline do not move.

    3.3+: ``timeout_after`` is the TI's ``trigger_timeout`` = the moment ``defer_task`` started the try +
    ``backstop_seconds`` (the TI's ``start_date`` is stamped the same instant; the task instance a trigger
    sees does not carry it). 2.11: the ORM task instance's ``start_date``, stamped by the scheduler.
    """
    ti = getattr(trigger, "task_instance", None)
    if AIRFLOW_V_3_0_PLUS:
        timeout_after = _epoch_of(getattr(trigger, "timeout_after", None))
        return None if timeout_after is None else timeout_after - backstop_seconds
    return _epoch_of(getattr(ti, "start_date", None))


def trigger_template_env(native: bool) -> Any:
    """The Jinja environment a worker renders with (native or sandboxed, StrictUndefined), for rendering in
    the triggerer (3.3+: the triggerer's DAG is the scheduler-side ``SerializedDAG``, which has no
    ``get_template_env``). User-defined macros/filters are not serialized: sensors of such DAGs start on a
    worker (``sensors/start_plan.start_problem``). None before 3.3: no triggerer renders a start trigger's
    fields there (2.11 and 3.0-3.2 start a templated sensor on a worker), and 3.0-3.2 lack this function."""
    if not AIRFLOW_V_3_3_PLUS:
        return None
    from airflow.sdk.definitions._internal.templater import create_template_env

    return create_template_env(native=native)


async def trigger_run_dates(trigger: Any, render_context: Any) -> dict[str, Any]:
    """A start-from-trigger task's run instants: ``logical_date``, ``data_interval_start``,
    ``data_interval_end`` and ``run_after`` (None where the run has none).

    3.3+: from the template context the triggerer rendered with (``dag_run``). 2.11: nothing is rendered;
    the run's dates come from the metadata DB (2.x triggers may use the ORM), read off the event loop; a 2.x
    run always has a logical date, and no ``run_after``.
    """
    names = ("logical_date", "data_interval_start", "data_interval_end", "run_after")
    if render_context is not None:
        dag_run = render_context.get("dag_run")
        return {name: getattr(dag_run, name, None) for name in names}
    if AIRFLOW_V_3_0_PLUS:
        return dict.fromkeys(names)
    import asyncio

    ti = trigger.task_instance

    def read() -> dict[str, Any]:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            row = session.execute(
                select(DagRun.execution_date, DagRun.data_interval_start, DagRun.data_interval_end).where(
                    DagRun.dag_id == ti.dag_id, DagRun.run_id == ti.run_id
                )
            ).first()
        return dict(zip(names, (*row, None), strict=True)) if row else dict.fromkeys(names)

    return await asyncio.to_thread(read)


# Memory per zero-worker wait (issue 25).
# 3.3.2 (jobs/triggerer_job_runner.py): for a start-from-trigger task, ``create_triggers`` deserializes the
# whole DAG per trigger (``create_runtime_ti``: ``DagSerialization.from_dict(dag_data).get_task(...)``, no
# cache), sets the runtime task instance (``task`` -> the DAG with all its tasks) as ``task_instance`` and
# builds the template context (cached on that task instance; it holds the DAG, the task, the TI, the params
# and the accessors). ``run_trigger`` keeps both for as long as the trigger runs (its local ``ti`` and its
# ``context`` argument) although it reads them only before ``run()`` starts: the log context and the span
# take the TI's ids, ``render_template_fields`` takes the context; after an event it reads neither (the
# event goes to the supervisor, which ends the task from the database). A trigger dropping its own
# references frees nothing; emptying that context and detaching the task from that task instance does.
# Bounded to the 3.3 line read above: a later runner might read the context or ``ti.task`` after ``run()``
# starts; extend the bound once its ``run_trigger`` is read again.
START_CONTEXT_RELEASABLE = AIRFLOW_V_3_3_PLUS and Version("3.4.0") > AIRFLOW_BASE_VERSION


def release_start_context(trigger: Any, context: Any) -> None:
    """Let go of the template context and the DAG Airflow built to render a start-from-trigger task, once the
    trigger has taken what it needs from them (plain values). The task instance keeps its ids, try and run
    data. A no-op where Airflow builds neither (2.11 renders nothing; 3.0-3.2 start on a worker)."""
    if not START_CONTEXT_RELEASABLE:
        return
    if context is not None:
        context.clear()
    ti = getattr(trigger, "task_instance", None)
    if ti is not None and getattr(ti, "task", None) is not None:
        ti.task = None
