"""Which due time a task instance has said it is late for, kept where its retries read it: Airflow 3.3's task
state store (``compat.task_state``; the record: ``wait_model.late_told``). Within a try, which check says it
is the wait model's rule and needs no record; a retry needs one: without it (before 3.3) a retry that starts
after the due time cannot tell whether an earlier try said it, and says nothing (``Timeline.tells_late``). An
earlier try's alert cut short is said again, marked ``resent``."""

from __future__ import annotations

import logging
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.wait_model import late_told

log = logging.getLogger(__name__)

__all__ = ["mark", "state"]


def state(context: Any, due: str, try_number: int) -> str | None:
    """Whether this task instance said it is late for ``due`` (the ISO due time): ``late_told.TOLD`` (by this
    try or an earlier one), ``CUT_SHORT`` (an earlier try began to and died) or ``NOT_TOLD``; None where no
    store keeps it (before Airflow 3.3, or a store that cannot be read: logged)."""
    store = compat.task_state.task_state_store(context)
    if store is None:
        return None
    try:
        stored = store.get(late_told.KEY)
    except Exception:  # the store unreachable: decide as without one (never the reason a wait fails)
        log.warning("Could not read the late-alert record of the task state store", exc_info=True)
        return None
    return late_told.state_of(stored, due, try_number)


def mark(context: Any, due: str, try_number: int, *, telling: bool) -> None:
    """Record that try ``try_number`` is saying (``telling``) or said the alert for ``due``; nothing before
    3.3. A write that fails is logged: the alert is said all the same."""
    store = compat.task_state.task_state_store(context)
    if store is None:
        return
    try:
        store.set(late_told.KEY, late_told.record(due, try_number, telling=telling))
    except Exception:  # a record not kept may repeat an alert on a retry; it must not fail the wait
        log.warning("Could not write the late-alert record to the task state store", exc_info=True)
