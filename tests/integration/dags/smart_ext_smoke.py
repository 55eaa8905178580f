"""Harness smoke DAG: one plain task and one task that defers once (Airflow's own SuccessTrigger).

Used by tests/integration/test_harness.py to prove the harness sees runs, logs and the ``deferred`` state.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow import DAG
from airflow.triggers.testing import SuccessTrigger

from airflow_smart_ext.compat.locations import BaseSensorOperator


class EchoConf(BaseSensorOperator):
    """Prints the run conf and finishes on its first poke."""

    def poke(self, context: Any) -> bool:
        print(f"smoke conf: {context['dag_run'].conf}")
        return True


class DeferOnce(BaseSensorOperator):
    """Defers to a trigger that fires at once, then succeeds in ``execute_complete``."""

    def execute(self, context: Any) -> None:
        self.defer(trigger=SuccessTrigger(), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Any = None) -> str:
        print(f"smoke resumed after deferral with event {event!r}")
        return "resumed"


with DAG(
    dag_id="smart_ext_smoke",
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["airflow-smart-ext", "harness"],
    doc_md=__doc__,
):
    EchoConf(task_id="echo_conf", poke_interval=1, timeout=60) >> DeferOnce(task_id="defer_once", timeout=120)
