"""Sensor class for the HA-triggerer integration test (no DAGs in this module: the triggerer imports it).

In a module of the DAGs folder (imported by name as ``ha_sensors``) so the triggerer can import the class.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from airflow_smart_ext.sensors import BackoffSensor


class ConditionFileSensor(BackoffSensor):
    """Waits for a file. Every check appends ``{"at": epoch, "where": "worker" | "triggerer", "pid": ...}``
    to ``counter_path``: one file per condition counts its checks, and the pid says which process ran each."""

    template_fields = ("path", "counter_path")

    def __init__(self, *, path: str, counter_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.counter_path = counter_path

    def poke(self, context: Any) -> bool:
        where = "worker" if "ti" in context else "triggerer"
        line = json.dumps({"at": time.time(), "where": where, "pid": os.getpid()}) + "\n"
        fd = os.open(self.counter_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return Path(self.path).exists()


def record_late(context: Any) -> None:
    """``on_late`` of the late waits (ha_dags.py ``ha_late``): one JSON line per alert (the task, its try, the
    pid, the time) appended to ``late.alerts.jsonl`` in the test's folder, so the test counts the alerts."""
    late = context["late"]
    line = {
        "task_id": context["ti"].task_id,
        "try_number": context["ti"].try_number,
        "due": late["due"],
        "pid": os.getpid(),
        "at": time.time(),
    }
    folder = os.path.dirname(context["task"].counter_path)
    fd = os.open(os.path.join(folder, "late.alerts.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
