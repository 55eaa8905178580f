"""The fixtures Airflow's sensor tests use from its devel-common plugin, written for this harness.

``run_task`` runs a task the way a worker does (the Task SDK's ``task_runner.run``) on a task instance built
in memory, with the supervisor replaced by ``mock_supervisor_comms``: no API server, no metadata DB. Only on
Airflow 3 (the Task SDK); Airflow 2's sensor tests need a metadata DB (``dag_maker``).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest


@pytest.fixture
def mock_supervisor_comms(monkeypatch: pytest.MonkeyPatch) -> Iterator[mock.MagicMock]:
    from airflow.sdk.execution_time import task_runner

    comms = mock.MagicMock(name="SUPERVISOR_COMMS")
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    yield comms


def _task_instance(
    task: Any,
    *,
    dag_id: str,
    run_id: str,
    logical_date: datetime.datetime,
    start_date: datetime.datetime,
    run_type: str,
    try_number: int,
    map_index: int | None,
    ti_id: uuid.UUID | None,
    max_tries: int | None,
) -> Any:
    from airflow.sdk import DAG
    from airflow.sdk.api.datamodels._generated import DagRun, TaskInstance, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    if not task.has_dag():
        task.dag = DAG(
            dag_id=dag_id, schedule=None, start_date=datetime.datetime(2024, 12, 3, tzinfo=datetime.UTC)
        )
    retries = task.retries or 0
    fields = DagRun.model_fields
    dag_run = DagRun.model_validate(
        {
            "dag_id": task.dag.dag_id,
            "run_id": run_id,
            "logical_date": logical_date,
            "data_interval_start": None,
            "data_interval_end": None,
            "run_after": logical_date,
            "start_date": start_date,
            "end_date": None,
            "run_type": run_type,
            "state": "running",
            "conf": None,
            "consumed_asset_events": [],
            **({"partition_key": None} if "partition_key" in fields else {}),
        }
    )
    context = TIRunContext(
        dag_run=dag_run,
        task_reschedule_count=0,
        max_tries=retries if max_tries is None else max_tries,
        should_retry=try_number <= retries,
    )
    model = TaskInstance(
        id=ti_id or uuid.uuid4(),
        task_id=task.task_id,
        dag_id=task.dag.dag_id,
        run_id=run_id,
        try_number=try_number,
        map_index=map_index,
        dag_version_id=uuid.uuid4(),
    )
    return RuntimeTaskInstance.model_construct(
        **model.model_dump(exclude_unset=True),
        task=task,
        _ti_context_from_server=context,
        max_tries=context.max_tries,
        start_date=start_date,
    )


@pytest.fixture
def run_task(mock_supervisor_comms: mock.MagicMock) -> Any:
    """``run_task(task, ..., context_update=...)`` -> ``(state, message to the supervisor, error)``."""
    import structlog
    from airflow.sdk import timezone
    from airflow.sdk.execution_time.task_runner import run

    def _run(
        task: Any,
        dag_id: str = "test_dag",
        run_id: str = "test_run",
        logical_date: datetime.datetime | None = None,
        start_date: datetime.datetime | None = None,
        run_type: str = "manual",
        try_number: int = 1,
        map_index: int | None = -1,
        ti_id: uuid.UUID | None = None,
        max_tries: int | None = None,
        context_update: dict[str, Any] | None = None,
    ) -> tuple[Any, Any, BaseException | None]:
        now = timezone.utcnow()
        ti = _task_instance(
            task,
            dag_id=dag_id,
            run_id=run_id,
            logical_date=logical_date or now,
            start_date=start_date or now,
            run_type=run_type,
            try_number=try_number,
            map_index=map_index,
            ti_id=ti_id,
            max_tries=max_tries,
        )
        context = ti.get_template_context()
        context.update(context_update or {})
        return run(ti, context, structlog.get_logger(logger_name="task"))

    return _run
