"""Which due time a task instance has said it is late for, kept where its retries read it: Airflow 3.3's task
state store (``compat.task_state``). Within a try, which check says it is the wait model's rule and needs no
record; a retry needs one: without it (before 3.3) a retry that starts after the due time cannot tell whether
an earlier try said it, and says nothing (``Timeline.tells_late``).

The record is written before the alert ("telling") and marked told after it: a try that died between the two
left "telling", and the next check past the due time says it again, marked ``resent``."""

from __future__ import annotations

import logging
from typing import Any

from airflow_smart_ext import compat

log = logging.getLogger(__name__)

__all__ = ["KEY", "TELLING", "TOLD", "mark", "state"]

KEY = "smart_ext_late"  # the record's key in the task instance's state store
TOLD, TELLING, NOT_TOLD = "told", "telling", "not told"


def state(context: Any, due: str) -> str | None:
    """Whether this task instance (any try) said it is late for ``due`` (the ISO due time): TOLD, TELLING (an
    alert begun and not known to be done) or NOT_TOLD; None where no store keeps it (before Airflow 3.3)."""
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
    return TELLING if record.get("telling") else TOLD


def mark(context: Any, due: str, *, telling: bool) -> None:
    """Record that the alert for ``due`` is being said (``telling``) or was said; nothing before 3.3."""
    store = compat.task_state.task_state_store(context)
    if store is None:
        return
    try:
        store.set(KEY, {"due": due, "telling": telling})
    except Exception:  # a record not kept may repeat an alert on a retry; it must not fail the wait
        log.warning("Could not write the late-alert record to the task state store", exc_info=True)
