"""Riding out a failing check: one rule for every trigger that polls a condition (``BackoffTrigger`` and
``ConditionWatcher``), so an outage is "not yet" in both and is logged and counted the same way."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import Ending, Outcome
from airflow_smart_ext.conditions.outcomes import outcome_ending
from airflow_smart_ext.triggers import log_lines

METRIC_TRANSIENT_ERRORS = "smart_ext.trigger.transient_errors"


class ErrorRideOut:
    """Turns a transient error (or any error with ``silent_fail``) into "not yet", counting errors in a row.

    ``transient_types``: extra exception types the user calls transient (``errors.classify`` decides for
    the rest, through ``conditions.outcomes.outcome_ending``: the rule a poke on a worker follows too).
    """

    def __init__(self, transient_types: tuple[type[BaseException], ...], silent_fail: bool = False) -> None:
        self.transient_types = transient_types
        self.silent_fail = silent_fail
        self.consecutive_errors = 0
        #: why the last error ridden out was (``errors.classify``'s words, or ``silent_fail=True``)
        self.last_reason: str | None = None

    def __call__(self, logger: Any, index: int, outcome: Outcome) -> Outcome:
        """``outcome`` unchanged unless it is an error to ride out; that one is logged with its count in a
        row, counted in Stats and becomes a negative outcome."""
        if outcome.status != "error":
            self.consecutive_errors = 0
            return outcome
        ending, error_class = outcome_ending(outcome, self.transient_types, silent_fail=self.silent_fail)
        if ending is not Ending.NOT_YET:
            return outcome
        self.consecutive_errors += 1
        compat.locations.Stats.incr(METRIC_TRANSIENT_ERRORS)
        reason = (
            error_class.reason if error_class is not None and error_class.transient else "silent_fail=True"
        )
        self.last_reason = reason
        log_lines.emit(
            logger,
            "warning",
            "check #%d failed (%s, %d in a row): %s; not yet, the schedule continues",
            index,
            reason,
            self.consecutive_errors,
            outcome.message,
        )
        return Outcome("negative", message=f"error #{self.consecutive_errors} in a row ridden out: {reason}")
