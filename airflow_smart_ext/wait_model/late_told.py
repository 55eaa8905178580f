"""Whether a task instance said it is late for a due time: the record its tries share. The sensor keeps it in
Airflow 3.3's task state store (``sensors.late_record``); the Waits view reads it for a wait checked in a
worker (``ui.worker_rows``). One record per task instance: ``{"due": ISO, "telling": bool, "try": n}``.

It is written before the alert ("telling", with the try) and marked told after it. An earlier try that left
"telling" died between the two: the next check past the due time says it again. This try's own "telling" is
an alert said whose "told" could not be written: said."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CUT_SHORT", "KEY", "NOT_READ", "NOT_TOLD", "TOLD", "record", "state_of"]

KEY = "smart_ext_late"  # the record's key in the task instance's state store
TOLD = "told"  # by this try or an earlier one
CUT_SHORT = "cut short"  # an earlier try began to and died
NOT_TOLD = "not told"
#: what a reader keeps for a record its store could not give (:func:`state_of`: not known)
NOT_READ: Mapping[str, Any] = {"not_read": True}


def record(due: str, try_number: int, *, telling: bool) -> dict[str, Any]:
    """The record of try ``try_number`` saying (``telling``) or having said the alert for ``due``."""
    return {"due": due, "telling": telling, "try": try_number}


def state_of(stored: Any, due: str, try_number: int) -> str | None:
    """For try ``try_number`` and ``due`` (the ISO due time), what ``stored`` (the record, or None) says: TOLD
    (by this try or an earlier one), CUT_SHORT (an earlier try began to and died) or NOT_TOLD. None: a value
    that is not a record (:data:`NOT_READ`, or a reference a worker's external state backend keeps: not
    readable here)."""
    if stored is None:
        return NOT_TOLD
    if not isinstance(stored, Mapping) or "due" not in stored:
        return None
    if stored.get("due") != due:
        return NOT_TOLD
    earlier = int(stored.get("try") or 0) < try_number
    return CUT_SHORT if stored.get("telling") and earlier else TOLD
