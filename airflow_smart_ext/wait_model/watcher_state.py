"""Where a condition watcher keeps its watermark (the asset state store, 3.3+), read by the watcher and by the
Waits view: the key it is stored under and the record's shape. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

#: The asset state store key prefix of a watcher's watermark (``<prefix>:<state_key>``).
STATE_KEY_PREFIX = "airflow_smart_ext.watcher"
WATERMARK_FORMAT = 1


def default_state_key(check: Mapping[str, Any], value_key: str | None, every_value: bool = False) -> str:
    """Which watermark a watcher keeps when no ``state_key`` is given: a digest of what it watches (the check
    spec, the value it reports and, when set, ``every_value``: its watermark is one value, not the latest list),
    so a schedule change keeps the watermark and a query change starts anew."""
    watched: dict[str, Any] = {"check": check, "value_key": value_key}
    if every_value:  # only when set: the latest-value watchers' keys stay as they were
        watched["every_value"] = True
    identity = json.dumps(watched, sort_keys=True, default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def watcher_name(
    check: Mapping[str, Any], value_key: str | None, state_key: str | None, every_value: bool = False
) -> str:
    """The name a watcher's events and watermark carry: its ``state_key``, else the digest of what it watches
    (from its kwargs of those names). Consumers tell watchers apart by it (``payload["watcher"]``)."""
    return state_key or default_state_key(check, value_key, every_value)


def state_store_key(
    check: Mapping[str, Any], value_key: str | None, state_key: str | None, every_value: bool = False
) -> str:
    """The asset state store key of a watcher's watermark."""
    return f"{STATE_KEY_PREFIX}:{watcher_name(check, value_key, state_key, every_value)}"


class StoredMark(NamedTuple):
    """A stored watermark: the last value reported and confirmed, how many were reported, and a value whose
    event was being handed over when it was written (None: none)."""

    value: Any
    seq: int
    pending: Any


def read_record(record: Any) -> StoredMark | None:
    """The watermark of a stored record; None when it is none or not ours."""
    if not isinstance(record, Mapping) or record.get("format") != WATERMARK_FORMAT:
        return None
    seq = record.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        return None
    return StoredMark(record.get("value"), seq, record.get("pending"))
