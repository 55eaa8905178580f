"""Sensor classes and SQL criteria for the sensor/trigger integration tests (no DAGs in this module).

Kept in a module of the DAGs folder (imported by name as ``sn_sensors``) so the triggerer can import them
again: classes and functions defined inside a DAG file cannot be shipped to the triggerer.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from airflow_smart_ext.sensors import BackoffSensor

POKE_LOG_MARKER = "sn-poke"
#: A late-data wait of a DAG file a test writes (its due time is the test's): a check at least every 6 s, up to
#: 10 min; a retry would show as try 2.
LATE_WAIT: dict[str, Any] = {
    "path": "{{ dag_run.conf['path'] }}",
    "poke_interval": 3,
    "max_wait": 6,
    "jitter": "none",
    "splay": 0,
    "timeout": 600,
    "retries": 2,
    "retry_delay": 1,
}


class FileArrivedSensor(BackoffSensor):
    """A plain file sensor whose only change for backoff was its base class.

    ``counter_path`` (optional): every poke appends one JSON line ``{"at": epoch, "where": "worker" |
    "triggerer", "host": ...}``, so tests can count real checks (a poke in the triggerer has no ``ti`` in its
    context); ``host``: the Celery worker that made it (the harness names each worker), else null.
    """

    template_fields = ("path", "counter_path")

    def __init__(self, *, path: str, counter_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.counter_path = counter_path

    def poke(self, context: Any) -> bool:
        now = time.time()
        where = "worker" if "ti" in context else "triggerer"
        self.log.info("%s at=%.3f where=%s path=%s", POKE_LOG_MARKER, now, where, self.path)
        if self.counter_path:
            host = os.environ.get("SMART_EXT_HARNESS_HOSTNAME")  # airflow_harness/sqlite_connect.py
            line = json.dumps({"at": now, "where": where, "host": host}) + "\n"
            fd = os.open(self.counter_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())  # one O_APPEND write per line: safe across threads/processes
            finally:
                os.close(fd)
        return Path(self.path).exists()


class FailingTryFileSensor(FileArrivedSensor):
    """A file sensor whose try ``fail_try`` fails (a ValueError: not ridden out) at its first check, or, with
    ``fail_when_told``, at its first check after its late alert is in ``dag_run.conf["late_path"]``
    (``record_late``). The retry tests' way to end a try early, or after its alert. With ``fail_marker``, the
    first check that finds that file fails instead, and removes it (a check in the triggerer knows no try: the
    test makes the file; the next try's checks find none)."""

    def __init__(
        self,
        *,
        fail_try: int = 1,
        fail_when_told: bool = False,
        fail_marker: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fail_try = fail_try
        self.fail_when_told = fail_when_told
        self.fail_marker = fail_marker

    def poke(self, context: Any) -> bool:
        if self.fail_marker is not None:
            marker = Path(self.fail_marker)
            if marker.exists():
                marker.unlink(missing_ok=True)
                raise ValueError(f"{marker} existed: this check fails (the test's)")
        elif context["ti"].try_number == self.fail_try and (not self.fail_when_told or self._told(context)):
            raise ValueError(f"try {self.fail_try} fails here (the test's)")
        return super().poke(context)

    def _told(self, context: Any) -> bool:
        late_path = Path(context["dag_run"].conf["late_path"])
        lines = late_path.read_text().splitlines() if late_path.exists() else []
        return any(json.loads(line)["wait"] == f"{self.dag_id}.{self.task_id}" for line in lines)


def is_done(value: Any) -> bool:
    """SQL success criterion: a positive count or the status ``done``."""
    if isinstance(value, str):
        return value == "done"
    return bool(value) and value > 0


def is_error(value: Any) -> bool:
    """SQL failure criterion: the status ``error``."""
    return value == "error"


def record_late(context: Any) -> None:
    """An ``on_late`` callback: one JSON line (what the sensor said, the try, the time) appended to the file
    ``dag_run.conf["late_path"]`` names, so a test counts the alerts a wait sent."""
    late_path = context["dag_run"].conf.get("late_path")
    if late_path:
        line = {**context["late"], "try_number": context["ti"].try_number, "at": time.time()}
        fd = os.open(late_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
