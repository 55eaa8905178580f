"""Asset events as Airflow stores a condition watcher's, for the consumer tests."""

from __future__ import annotations

from typing import Any


def event(
    event_id: int, seq: int, value: Any, *, watcher: str | None = None, redelivered: bool = False
) -> Any:
    """An asset event as Airflow stores a watcher's: ``extra = {"from_trigger": True, "payload": ...}``."""
    payload: dict[str, Any] = {"value": value, "seq": seq, "previous": None, "redelivered": redelivered}
    if watcher is not None:
        payload["watcher"] = watcher
    return (event_id, {"from_trigger": True, "payload": payload})
