"""The event that ends a ``BackoffTrigger``'s wait: which check outcome ends it, its payload, and
when it may be yielded.

Every payload value comes from the schedule or the observation, never the current clock, so a check gives the
same payload whenever its event is built or redelivered.
"""

from __future__ import annotations

from typing import Any

from airflow_smart_ext import clock, compat, units
from airflow_smart_ext.backoff import ScheduledCheck
from airflow_smart_ext.conditions import EVENT_STATUS, Outcome
from airflow_smart_ext.conditions.check_threads import PreviousCheckStillRunning
from airflow_smart_ext.conditions.outcomes import error_class_path
from airflow_smart_ext.triggers import log_lines
from airflow_smart_ext.wait_model.timeline import LATE_EVENT


def iso(epoch: float | None) -> str:
    """How a time reads in events' messages and the triggers' log lines (``units.iso``; "none" for none)."""
    return units.iso(epoch) or "none"


class WaitEvents:
    """The events of one trigger run, with the count of checks it made (``checks`` in the event).

    :param started_at: epoch seconds the schedule is anchored to (``waited_seconds`` counts from it).
    :param deadline: epoch seconds of the sensor timeout, or None for no deadline.
    :param checks_complete: False when slots passed before this run started: a predecessor (triggerer restart)
        may have made checks this run cannot count, so ``checks`` is a lower bound.
    """

    def __init__(self, started_at: float, deadline: float | None, checks_complete: bool = True) -> None:
        self.started_at = started_at
        self.deadline = deadline
        self.checks_complete = checks_complete
        self.checks = 0

    def count(self, outcome: Outcome) -> None:
        """Count a check the condition received (an answer, whatever it said), not one refused before it ran."""
        if not isinstance(outcome.error, PreviousCheckStillRunning):
            self.checks += 1

    def event(self, status: str, index: int, outcome: Outcome | None, message: str, checked_at: float) -> Any:
        """The event of check ``index``.

        ``waited_seconds`` is ``checked_at - started_at``: the check's scheduled time (the deadline for a
        timeout), or the observation's time for an early completion.
        """
        return compat.locations.TriggerEvent(
            {
                "status": status,
                "checks": self.checks,
                "checks_complete": self.checks_complete,
                "waited_seconds": round(max(0.0, checked_at - self.started_at), 3),
                "xcom_value": outcome.xcom_value if outcome is not None and status == "success" else None,
                # A check's error text may quote an opened secret (a URL with a token): the event is stored
                # in the task instance's next_kwargs, unencrypted on Airflow 3.
                "message": compat.locations.redact_secrets(message),
                "check_index": index,
                # so the worker raises the check's own class, as poke mode does (retry policies read it)
                "error_class": error_class_path(outcome.error) if outcome and outcome.error else None,
            }
        )

    def timeout(self, index: int, checked_at: float) -> Any:
        event = self.event(
            "timeout",
            index,
            None,
            f"condition not met by the deadline {iso(self.deadline)} "
            f"({self.checks} checks by this trigger since {iso(self.started_at)})",
            checked_at,
        )
        # This trigger's own deadline, not a check that raised a timeout: only this one can be the try's
        # execution deadline (AirflowTaskTimeout, as poke mode raises there).
        event.payload["deadline_reached"] = True
        return event

    def late(
        self, index: int, outcome: Outcome, checked_at: float, due_at: float, timeout: Any = None
    ) -> Any:
        """Check ``index`` was the first at or after ``due_at`` and found the condition not met: the wait is
        late (``wait_model.timeline.LATE_EVENT``); a worker says so and defers again. After the last check
        (``timeout``: its event), the timeout says it too: the worker says it, then times out."""
        if timeout is not None:
            event = timeout
        else:
            message = outcome.message if outcome.error is not None else "condition not met"
            event = self.event(LATE_EVENT, index, outcome, message or "condition not met", checked_at)
        event.payload["due_at"] = due_at
        event.payload["checked_at"] = round(checked_at, 3)
        return event

    def after_check(self, scheduled: ScheduledCheck, outcome: Outcome, checked_at: float, last: bool) -> Any:
        """The event check ``scheduled`` ends the wait with, or None while the schedule goes on: a terminal
        outcome's own (at the observation's time), else a timeout after the ``last`` check (at its slot)."""
        if outcome.is_terminal:
            message = "condition met" if outcome.status == "positive" else outcome.message
            return self.event(EVENT_STATUS[outcome.status], scheduled.index, outcome, message, checked_at)
        if last:
            return self.timeout(scheduled.index, scheduled.at)
        return None


async def before_yield(run_started: float) -> None:
    """Wait until the event may be yielded: the minimum delay has passed and the run's log lines are written.

    Airflow 3.3.2 executor race: ``compat.deferral.TRIGGER_MIN_EVENT_DELAY_SECONDS`` (5 s on Airflow 3, 0 on 2.11) —
    a trigger that fires within ~5 s of the deferral can make the scheduler fail the task (apache/airflow
    #71580). The task's log must hold every line before the event ends the task.
    """
    remaining = run_started + compat.deferral.TRIGGER_MIN_EVENT_DELAY_SECONDS - clock.now()
    if remaining > 0:
        await clock.asleep(remaining)
    await log_lines.flushed()
