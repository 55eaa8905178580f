"""Which due time a task instance has said it is late for, kept where its retries read it: Airflow 3.3's task
state store (``compat.task_state``). Within a try, which check says it is the wait model's rule and needs no
record; a retry needs one: without it (before 3.3) a retry that starts after the due time cannot tell whether
an earlier try said it, and says nothing (``Timeline.tells_late``).

The record is written before the alert ("telling", with the try) and marked told after it. An earlier try
that left "telling" died between the two: the next check past the due time says it again, marked ``resent``.
This try's own "telling" is an alert said whose "told" could not be written: said."""

from __future__ import annotations

import logging
from typing import Any

from airflow_smart_ext import compat

log = logging.getLogger(__name__)

__all__ = ["CUT_SHORT", "KEY", "NOT_TOLD", "TOLD", "mark", "state"]

KEY = "smart_ext_late"  # the record's key in the task instance's state store
TOLD, CUT_SHORT, NOT_TOLD = "told", "cut short", "not told"


def state(context: Any, due: str, try_number: int) -> str | None:
    """Whether this task instance said it is late for ``due`` (the ISO due time): TOLD (by this try or an
    earlier one), CUT_SHORT (an earlier try began to and died) or NOT_TOLD; None where no store keeps it (before
    Airflow 3.3, or a store that cannot be read: logged)."""
    store = compat.task_state.task_state_store(context)
    if store is None:
        return None
    try:
        record = store.get(KEY)
    except Exception:  # the store unreachable: decide as without one (never the reason a wait fails)
        log.warning("Could not read the late-alert record of the task state store", exc_info=True)
        return None
    if not isinstance(record, dict) or record.get("due") != due:
        return NOT_TOLD
    earlier = int(record.get("try") or 0) < try_number
    return CUT_SHORT if record.get("telling") and earlier else TOLD


def mark(context: Any, due: str, try_number: int, *, telling: bool) -> None:
    """Record that try ``try_number`` is saying (``telling``) or said the alert for ``due``; nothing before
    3.3. A write that fails is logged: the alert is said all the same."""
    store = compat.task_state.task_state_store(context)
    if store is None:
        return
    try:
        store.set(KEY, {"due": due, "telling": telling, "try": try_number})
    except Exception:  # a record not kept may repeat an alert on a retry; it must not fail the wait
        log.warning("Could not write the late-alert record to the task state store", exc_info=True)
