"""The per-waiter half of a check (its interpreter), built at a check instead of before the first one.

A ``selector`` / ``success`` / ``failure`` criterion or a sensor class imports at DAG parse but may fail to
import in the triggerer (a module missing from its image, a module that raises while importing). Built before
a trigger's error handling, that failure killed the trigger, and Airflow restarted a watcher ~20 times a minute,
each time with a stack trace. Built here, it is the error of the check that needed it: the same outcome, ride-out,
backoff and log lines as any other check error. Its traceback is logged once per distinct error (not per check),
and a later check imports again, so a watcher recovers by itself once a fixed module is deployed.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Mapping
from typing import Any

from airflow_smart_ext.conditions import make_interpreter
from airflow_smart_ext.conditions.outcomes import Outcome
from airflow_smart_ext.conditions.spec import Interpreter
from airflow_smart_ext.triggers import log_lines


class LazyInterpreter:
    """Call :meth:`failure` before each check: None when the interpreter is ready (then call this object
    with the raw observation), else the check's error outcome (make no check)."""

    def __init__(self, check: Mapping[str, Any], log: Any) -> None:
        self._check = check
        self._log = log
        self._interpret: Interpreter | None = None
        self._logged: str | None = None  # the error whose traceback was logged last

    async def failure(self) -> Outcome | None:
        if self._interpret is not None:
            return None
        if self._logged is not None:
            importlib.invalidate_caches()  # a module deployed since the last try must be found
        try:
            self._interpret = await make_interpreter(self._check)
        except Exception as err:
            message = f"{type(err).__name__}: {err}"
            if message != self._logged:
                self._logged = message
                log_lines.emit(
                    self._log,
                    "error",
                    "the check's code does not import here (each check imports it again until it does; this "
                    "traceback is logged once per distinct error):\n%s",
                    "".join(traceback.format_exception(err)).rstrip(),
                )
            return Outcome("error", message=message, error=err)
        if self._logged is not None:
            log_lines.emit(
                self._log, "info", "the check's code imports now (it failed with %s)", self._logged
            )
        return None

    def __call__(self, raw: Any) -> Outcome:
        assert self._interpret is not None, "failure() returned None first"
        return self._interpret(raw)
