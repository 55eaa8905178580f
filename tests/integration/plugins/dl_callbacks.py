"""A deadline alert's callback for tests/integration/test_deadlines_live.py: Airflow runs an ``AsyncCallback``
in the triggerer, which imports it by name; the harness copies this file into the plugins folder (on every
component's sys.path). It appends one JSON line per call to the file ``path`` names."""

from __future__ import annotations

import json
import os
import time
from typing import Any


async def record_missed(path: str, context: Any = None) -> str:
    """Append the call (its time, the DAG run and the deadline the scheduler's context names) to ``path``."""
    context = context or {}
    deadline = context.get("deadline") or {}
    line = json.dumps(
        {
            "at": time.time(),
            "run_id": (context.get("dag_run") or {}).get("dag_run_id"),
            "deadline_time": str(deadline.get("deadline_time")),
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    return line
