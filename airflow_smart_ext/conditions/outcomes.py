"""One outcome vocabulary for every check, in every mode, and its two mappings.

* exception -> outcome (:func:`outcome_from_exception`), result -> outcome (:func:`outcome_from_result`):
  what one check concluded, the same on a worker (poke / reschedule) and in the triggerer;
* outcome -> how the task ends (:func:`task_ending`), given the sensor's ``soft_fail`` / ``never_fail`` /
  ``silent_fail``: the same table for a poke on a worker and for a trigger event; a check that raised is
  classified on the way (:func:`outcome_ending`), so an outage is "not yet" on a worker and in a trigger alike.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.errors import ErrorClass, classify

# The XCom a successful wait leaves beside ``return_value`` (pokes, waited seconds, mode), whether a worker or
# a trigger ends the task.
STATS_XCOM_KEY = "backoff_sensor_stats"


@dataclass(frozen=True)
class Outcome:
    """What one check means for one waiter.

    ``status``: ``positive`` (done), ``negative`` (not yet), ``failure`` (a failure criterion: fail without
    retries), ``timeout`` (the check itself said time is up), ``skip`` (the check asked to skip), ``error``
    (the check raised; ``error`` holds the exception, kept for classification, never serialized).
    """

    status: str
    xcom_value: Any = None
    message: str = ""
    error: BaseException | None = field(default=None, compare=False, repr=False)
    #: What a positive check observed, for a condition watcher's edge: a SQL check's selected value (its
    #: first cell by default), else the XCom value. Never sent in a sensor's event.
    value: Any = field(default=None, compare=False, repr=False)

    @property
    def is_terminal(self) -> bool:
        return self.status != "negative"


NEGATIVE = Outcome("negative")

# Trigger event status of each terminal outcome (the contract between BackoffTrigger and the sensor).
EVENT_STATUS = {
    "positive": "success",
    "failure": "failure",
    "timeout": "timeout",
    "skip": "skip",
    "error": "error",
}


def outcome_from_exception(err: BaseException) -> Outcome:
    """Map what a check raises to its outcome (as poke mode treats it)."""
    if isinstance(err, compat.locations.AirflowSkipException):
        # The worker raises the skip again with this text: the poke's own, as poke mode's log shows it.
        return Outcome("skip", message=str(err))
    message = f"{type(err).__name__}: {err}"
    if isinstance(err, compat.locations.SENSOR_TIMEOUT_ERRORS):
        return Outcome("timeout", message=message, error=err)
    if isinstance(err, compat.locations.AirflowFailException):
        return Outcome("failure", message=message, error=err)
    return Outcome("error", message=message, error=err)


def error_class_path(err: BaseException) -> str:
    """``module:qualname`` of a check's exception: the event names it so the worker can raise the same class."""
    return f"{type(err).__module__}:{type(err).__qualname__}"


def rebuild_error(class_path: Any, message: str) -> Exception | None:
    """The check's exception class raised again with its message (as poke mode raises it, so retry
    policies and callbacks see the same class), or None when that cannot be done faithfully.

    Only a class already imported in this process is used (never an import named by event data), only an
    ``Exception`` subclass, and only when it can be built from the message alone.
    """
    if not isinstance(class_path, str) or ":" not in class_path:
        return None
    module_name, _, qualname = class_path.partition(":")
    target: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if not (isinstance(target, type) and issubclass(target, Exception)):
        return None
    prefix = f"{target.__name__}: "
    text = message[len(prefix) :] if message.startswith(prefix) else message
    try:
        return target(text)
    except Exception:  # a constructor that needs more than a message: the caller's generic error instead
        return None


def outcome_from_result(result: Any) -> Outcome:
    """A check's return value (``PokeReturnValue``, a bool, a SQL ``FirstRowOutcome``) as an outcome.

    Truthy means done; ``xcom_value`` and ``message`` are taken when the result carries them. A positive
    whose XCom value is not JSON becomes an error: it could not travel in a trigger event.
    """
    message = str(getattr(result, "message", "") or "")
    if not bool(result):
        return Outcome("negative", message=message)
    xcom_value = getattr(result, "xcom_value", None)
    outcome = Outcome(
        "positive", xcom_value=xcom_value, message=message, value=getattr(result, "value", xcom_value)
    )
    try:
        json.dumps(outcome.xcom_value)
    except (TypeError, ValueError) as err:
        return Outcome(
            "error",
            message=f"the check's XCom value ({type(outcome.xcom_value).__name__}) is not JSON-serializable "
            f"and cannot travel in a trigger event: {err}",
        )
    return outcome


class Ending(enum.Enum):
    """How a task ends (or goes on) after a check's outcome."""

    SUCCEED = "succeed"
    NOT_YET = "not yet"  # keep waiting on the same schedule and deadline
    SKIP = "skip"
    TIMEOUT = "timeout"  # AirflowSensorTimeout: never retried
    FAIL = "fail"  # AirflowFailException: never retried
    ERROR = "error"  # a plain failure: retried when the task has retries left


def task_ending(
    status: str,
    *,
    soft_fail: bool = False,
    never_fail: bool = False,
    silent_fail: bool = False,
    transient: bool = False,
) -> Ending:
    """The one table from an outcome (or event) status to how the task ends, as Airflow's sensors do.

    ``transient``: the error is one the system may recover from (``errors.classify``): "not yet" whatever
    the flags, so an outage never costs a try.
    """
    if status in ("positive", "success"):
        return Ending.SUCCEED
    if status == "negative":
        return Ending.NOT_YET
    if status == "skip":
        return Ending.SKIP
    if status in ("failure", "timeout"):
        if soft_fail or never_fail:
            return Ending.SKIP
        return Ending.FAIL if status == "failure" else Ending.TIMEOUT
    if status == "error":
        if transient or silent_fail:
            return Ending.NOT_YET
        return Ending.SKIP if never_fail else Ending.ERROR
    raise ValueError(f"unknown outcome status {status!r}")


def outcome_ending(
    outcome: Outcome,
    transient_errors: Iterable[type[BaseException]] = (),
    *,
    soft_fail: bool = False,
    never_fail: bool = False,
    silent_fail: bool = False,
) -> tuple[Ending, ErrorClass | None]:
    """How the task ends after ``outcome`` (:func:`task_ending`), with the error classified first when the
    check raised (``errors.classify``; ``transient_errors``: the types the user adds): the ending and that
    class (None when nothing was classified)."""
    error = outcome.error if outcome.status == "error" else None
    error_class = classify(error, transient_errors) if error is not None else None
    ending = task_ending(
        outcome.status,
        soft_fail=soft_fail,
        never_fail=never_fail,
        silent_fail=silent_fail,
        transient=error_class is not None and error_class.transient,
    )
    return ending, error_class
