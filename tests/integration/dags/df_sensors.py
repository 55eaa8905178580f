"""The scripted condition of the differential matrix (issue 23; no DAGs in this module).

In a module of the DAGs folder (imported by name as ``df_sensors``) so the triggerer can import the class
and the SQL selector. Every check appends one line to ``<AIRFLOW_HOME>/df_checks/<key>`` BEFORE it runs:
the matrix counts the checks the condition actually received, in every mode, also for a check that hangs
or raises. The line count so far (not the try, not the schedule index) picks the step of the script.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from df_scenarios import LATE_SUFFIX

from airflow_smart_ext.compat.locations import AirflowSkipException, PokeReturnValue
from airflow_smart_ext.sensors import BackoffSensor

CHECKS_DIR = Path(__file__).resolve().parent.parent / "df_checks"
#: ``<key>`` here: the test has cleared that cell's task (the ``W`` step turns true).
CLEARED_DIR = Path(__file__).resolve().parent.parent / "df_cleared"
#: How long an ``H`` step blocks (the hung-check scenario's ``check_timeout`` is below it).
HANG_SECONDS = 6.0


class ScriptedPermanentError(RuntimeError):
    """The ``P`` step: an error no classifier calls transient."""


def record_check(key: str) -> int:
    """Append this check to the key's counter file; returns how many checks came before it."""
    CHECKS_DIR.mkdir(parents=True, exist_ok=True)
    path = CHECKS_DIR / key
    before = len(path.read_text().splitlines()) if path.exists() else 0
    line = json.dumps({"at": time.time(), "pid": os.getpid()}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one O_APPEND write per line: safe across threads/processes
    finally:
        os.close(fd)
    return before


class ScriptedSensor(BackoffSensor):
    """Check n follows ``script[n]`` (the last step repeats): ``F`` not yet, ``T`` true, ``X`` true with
    the XCom ``{"scenario": <key without the mode>}`` (``PokeReturnValue``), ``E`` a transient error (connection reset), ``P`` a
    permanent error, ``S`` ``AirflowSkipException``, ``H`` block ``HANG_SECONDS`` then not yet, ``W`` not yet
    until the test has cleared the task (``CLEARED_DIR/<key>``), then true."""

    def __init__(self, *, key: str, script: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.script = script

    def poke(self, context: Any) -> Any:
        step = self.script[min(record_check(self.key), len(self.script) - 1)]
        if step == "T":
            return True
        if step == "X":  # the same value in every mode: the key without its "<mode>." prefix
            return PokeReturnValue(True, xcom_value={"scenario": self.key.split(".", 1)[-1]})
        if step == "E":
            raise ConnectionResetError(f"{self.key}: scripted transient error")
        if step == "P":
            raise ScriptedPermanentError(f"{self.key}: scripted permanent error")
        if step == "S":
            raise AirflowSkipException(f"{self.key}: scripted skip")
        if step == "H":
            time.sleep(HANG_SECONDS)
        if step == "W":
            return (CLEARED_DIR / self.key).exists()
        return False


def count_late(context: Any) -> None:
    """``on_late`` of a scenario with a due time: counts the alert under the cell's key."""
    record_check(context["task"].key + LATE_SUFFIX)


def counted_status(row: Any) -> Any:
    """SQL ``selector``: the row is ``(status, key)``; counts the check under ``key``, returns the status."""
    record_check(str(row[1]))
    return row[0]
