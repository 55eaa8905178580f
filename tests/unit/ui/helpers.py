"""Live waits for the Waits view tests: check specs and worker-first waits."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.backoff import aligned_start
from airflow_smart_ext.triggers.worker_first import CLASSPATH as WORKER_FIRST
from airflow_smart_ext.ui.trigger_rows import LiveWait
from tests.unit.helpers import sql_check

__all__ = [
    "NOW",
    "NUMERIC_PARAMETERS",
    "POLICY",
    "REFUSED_NUMBERS",
    "sensor_check",
    "sql_check",
    "worker_first",
]

NOW = 1_790_000_000.0
#: every numeric parameter of the views (view, name) and values each must refuse (the one ASCII-only parser)
REFUSED_NUMBERS = ["٣٠", "５", "1_000", "1e3", "inf", "-1", "9999999999"]
NUMERIC_PARAMETERS = [
    ("waits", "due_within"),
    ("waits", "limit"),
    ("calendars", "runs"),
    ("calendars", "past"),
]
POLICY: dict[str, Any] = {"initial": 60.0, "factor": 2.0, "cap": 600.0, "jitter": "full", "splay": 0.0}


def sensor_check(**kwargs: Any) -> dict[str, Any]:
    return {
        "type": "sensor",
        "classpath": "airflow.providers.standard.sensors.filesystem.FileSensor",
        "kwargs": kwargs,
        "context": {"dag_id": "d", "task_id": "t", "run_id": "r", "ds": "2026-09-21"},
    }


def worker_first(
    check: dict[str, Any], *, dag_id: str = "d", task_id: str = "t", started: float = NOW - 900, **extra: Any
) -> LiveWait:
    kwargs = {
        "check": check,
        "policy": extra.pop("policy", POLICY),
        "seed": "seed-of-the-condition",
        "started_at": aligned_start(started, 60.0),
        "deadline": started + extra.pop("timeout", 3600.0),
        "after": 0,
        "share": True,
        "rate_limit": extra.pop("rate_limit", None),
    }
    return LiveWait(dag_id, "run", task_id, -1, 1, WORKER_FIRST, kwargs, started, started + 1, **extra)
