"""Memory per zero-worker wait (issue 25): once ``BackoffStartTrigger.run`` has taken what it needs (check #0
has run), neither the trigger nor what Airflow keeps while it runs holds the template context or the DAG.

3.3+: Airflow's ``run_trigger`` keeps the runtime task instance and the context for the whole wait
(``compat.start_in_triggerer.release_start_context``); the tests hold them the same way.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import uuid
import weakref
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger
from tests.unit.clock import START
from tests.unit.triggers.helpers import POKES, ArgSensor, _first_event, _trigger


class _Heavy:
    """Stands for the DAG: weak-referenceable, so the test sees when nothing holds it any more."""


class _Context(dict):  # type: ignore[type-arg]
    """A template context (a dict, as Airflow's) that can be weakly referenced."""


def _no_dates() -> Any:
    return SimpleNamespace(logical_date=None, data_interval_start=None, data_interval_end=None)


async def _past_check_zero(trigger: BackoffStartTrigger, name: str) -> asyncio.Future[Any]:
    wait = asyncio.ensure_future(_first_event(trigger))
    await seam.asleep(3)  # virtual clock: check #0 ran (within the splay), the condition is false
    assert POKES[name] and not wait.done()
    gc.collect()
    return wait


async def _end(wait: asyncio.Future[Any]) -> None:
    wait.cancel()
    await asyncio.gather(wait, return_exceptions=True)


async def test_the_trigger_lets_go_of_the_context_after_check_zero(clock: Any) -> None:
    trigger = _trigger("ctx", START, timeout=60)
    context = _Context(dag_run=_no_dates())
    trigger._render_context = context  # what render_template_fields keeps (3.3+)
    context_ref = weakref.ref(context)
    del context
    wait = await _past_check_zero(trigger, "ctx")
    assert context_ref() is None
    await _end(wait)


async def test_the_dag_is_freed_while_airflow_holds_the_task_instance_and_context(clock: Any) -> None:
    trigger = _trigger("dag", START, timeout=60)
    dag = _Heavy()
    ti = trigger.task_instance
    ti.task = SimpleNamespace(dag=dag, iter_mapped_dependants=lambda: iter(()))  # type: ignore[union-attr]
    context = _Context(dag=dag, task=ti.task, ti=ti, dag_run=_no_dates())  # type: ignore[union-attr]
    trigger._render_context = context
    dag_ref = weakref.ref(dag)
    del dag
    held_by_airflow = (ti, context)  # run_trigger's local ``ti`` and ``context`` argument
    wait = await _past_check_zero(trigger, "dag")
    # 2.11 builds neither a context nor a task instance holding the DAG: nothing to release there.
    assert (dag_ref() is None) is compat.start_in_triggerer.START_CONTEXT_RELEASABLE
    assert held_by_airflow[0].dag_id == "d"  # the task instance keeps its ids (logs, metrics)
    assert trigger._metric_tags == {"dag_id": "d", "task_id": "wait", "sensor": "ArgSensor"}
    await _end(wait)


@pytest.mark.skipif(
    not compat.start_in_triggerer.START_FROM_TRIGGER_RENDERS_TEMPLATES,
    reason="only 3.3+ builds a runtime TI from the DAG",
)
async def test_airflows_runtime_task_instance_lets_the_dag_go(clock: Any) -> None:
    # Airflow's own objects, built as its triggerer builds them (TriggerRunner.create_runtime_ti).
    from airflow import DAG
    from airflow.executors.workloads.task import TaskInstanceDTO
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("d", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)) as dag:
        sensor = ArgSensor(task_id="wait", name="real-{{ ds }}", deferrable=True, poke_interval=2, timeout=60)
        for number in range(199):
            sensor >> EmptyOperator(task_id=f"after_{number}")
    assert sensor.start_from_trigger
    dag_data = DagSerialization.to_dict(dag)
    kwargs = sensor.start_trigger_args.trigger_kwargs
    del dag, sensor
    now = dt.datetime.fromtimestamp(START, dt.timezone.utc)
    dto = TaskInstanceDTO(
        id=uuid.uuid4(),
        task_id="wait",
        dag_id="d",
        run_id="r",
        try_number=1,
        map_index=-1,
        pool_slots=1,
        priority_weight=1,
        queue="default",
        dag_version_id=uuid.uuid4(),
    )
    run_data = {"dag_id": "d", "run_id": "r", "logical_date": now, "data_interval_start": now}
    run_data |= {"data_interval_end": now, "run_after": now, "start_date": now, "end_date": None}
    run_data |= {"clear_number": 0, "run_type": "manual", "state": "running", "conf": {}}
    run_data |= {"consumed_asset_events": [], "partition_key": None}
    ti = TriggerRunner.create_runtime_ti(dto, dag_data, run_data)
    context = ti.get_template_context()
    trigger = BackoffStartTrigger(**kwargs)
    trigger.task_instance = ti
    trigger.timeout_after = now + dt.timedelta(seconds=120)
    trigger.render_template_fields(context)
    assert trigger.name == "real-2023-11-14"  # type: ignore[attr-defined]  # rendered from the context
    dag_ref = weakref.ref(ti.task.dag)
    wait = await _past_check_zero(trigger, "real-2023-11-14")
    assert dag_ref() is None, [type(r).__name__ for r in gc.get_referrers(dag_ref())]
    assert (ti.dag_id, ti.task_id, ti.try_number) == ("d", "wait", 1) and not context
    await _end(wait)
