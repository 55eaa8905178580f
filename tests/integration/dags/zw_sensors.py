"""Sensor classes and callbacks for the zero-worker integration tests (no DAGs in this module).

In a module of the DAGs folder (imported by name as ``zw_sensors``) so the triggerer can import the class.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from airflow_smart_ext.compat.locations import AirflowSkipException, PokeReturnValue
from airflow_smart_ext.sensors import BackoffSensor


class MarkerFileSensor(BackoffSensor):
    """A plain custom sensor whose only change for backoff was its base class: waits for a file.

    The file's text is the XCom (``PokeReturnValue``); the text ``skip`` makes the poke skip the task.
    ``counter_path``: every poke appends ``{"at": epoch, "where": "worker" | "triggerer"}``.
    """

    template_fields = ("path", "counter_path")

    def __init__(self, *, path: str, counter_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.counter_path = counter_path

    def poke(self, context: Any) -> PokeReturnValue:
        now = time.time()
        if self.counter_path:
            where = "worker" if "ti" in context else "triggerer"
            line = json.dumps({"at": now, "where": where}) + "\n"
            fd = os.open(self.counter_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        target = Path(self.path)
        if not target.exists():
            return PokeReturnValue(False)
        text = target.read_text().strip()
        if text == "skip":
            raise AirflowSkipException(f"{self.path} says skip")
        return PokeReturnValue(True, xcom_value={"content": text})


def record_success(context: Any) -> None:
    """on_success_callback: write a marker file named by the run's conf (proves callbacks still run)."""
    path = (context["dag_run"].conf or {}).get("callback_path")
    if path:
        Path(path).write_text(f"success {context['ti'].task_id}\n")
