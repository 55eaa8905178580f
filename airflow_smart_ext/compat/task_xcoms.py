"""An XCom of a deferred task instance, written by its trigger in the triggerer, and the XCom table the view
reads it from.

* 3.0-3.3: the trigger runs in the triggerer's runner subprocess, which has no database; its supervisor
  channel (``SUPERVISOR_COMMS``) carries ``SetXCom`` (jobs/triggerer_job_runner.py ``ToTriggerSupervisor``),
  which the supervisor stores through the execution API (the same in 3.0, 3.1, 3.2 and 3.3). The value goes as
  JSON, as the SDK's ``XCom.aset`` sends a plain dict (its default serializer leaves one unchanged).
* 2.11: the triggerer has the metadata database: ``BaseXCom.set`` with the ORM, in one thread of its own
  (off the loop, one write at a time: never holding the loop's default executor, which connection lookups use).

The table: ``XComModel`` on 3.x (a JSON ``value``), ``BaseXCom`` on 2.11 (JSON bytes); the same columns.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS

__all__ = ["aset_task_xcom", "xcom_table"]

_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smart-ext-xcom")  # 2.11; no thread until used


async def aset_task_xcom(task_instance: Any, key: str, value: Any) -> None:
    """Store ``value`` (JSON-able) as ``task_instance``'s XCom ``key``, from a trigger in the triggerer."""
    where = {
        "dag_id": task_instance.dag_id,
        "run_id": task_instance.run_id,
        "task_id": task_instance.task_id,
        "map_index": task_instance.map_index,
    }
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import SetXCom

        comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
        if comms is None:
            raise RuntimeError("not in the triggerer: no supervisor channel to send the XCom through")
        # never cancelled half-way: 3.0-3.2 read the reply in order on one channel
        await comms.asend(SetXCom(key=key, value=value, **where))
        return

    def write() -> None:
        from airflow.models.xcom import BaseXCom

        BaseXCom.set(key=key, value=value, **where)

    await asyncio.get_running_loop().run_in_executor(_WRITER, write)


def xcom_table() -> Any:
    """The ORM class of the ``xcom`` table (``dag_run_id``, ``task_id``, ``map_index``, ``key``, ``value``)."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.models.xcom import XComModel  # type: ignore[attr-defined,unused-ignore]

        return XComModel
    from airflow.models.xcom import BaseXCom

    return BaseXCom
