"""Helpers of the watcher tests: the 3.3 asset state store fake and event collection on the fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from airflow_smart_ext.wait_model.last_check import STATE_KEY_SUFFIX
from tests.unit.clock import START, FakeClock


class StoredAsset:
    """One asset's accessor, shaped like Airflow's ``AssetStateStoreAccessor`` (async ``aget`` / ``aset``)."""

    def __init__(self, rows: dict[tuple[str, str], Any], name: str) -> None:
        self.rows = rows
        self.name = name

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.rows.get((self.name, key), default)

    async def aset(self, key: str, value: Any) -> None:
        self.rows[(self.name, key)] = json.loads(json.dumps(value))  # JSON, as the API stores it


class StateStore:
    """The ``asset_state_store`` the 3.3 triggerer injects (``AssetStateStoreAccessors``: per-asset accessors)."""

    def __init__(self, *assets: str) -> None:
        self.rows: dict[tuple[str, str], Any] = {}
        self._by_name = {name: StoredAsset(self.rows, name) for name in assets}
        self._by_uri: dict[str, Any] = {}

    def watermarks(self) -> dict[tuple[str, str], Any]:
        """The rows but the watchers' last-check records (kept beside each watermark)."""
        return {key: value for key, value in self.rows.items() if not key[1].endswith(STATE_KEY_SUFFIX)}

    def last_checks(self) -> dict[tuple[str, str], Any]:
        return {key: value for key, value in self.rows.items() if key[1].endswith(STATE_KEY_SUFFIX)}


async def collect(
    clock: FakeClock, events: AsyncIterator[Any], until: float, stop_after: int | None = None
) -> list[tuple[float, dict[str, Any]]]:
    """Events (virtual second, payload) until ``START + until``, or until ``stop_after`` events: then the
    generator is closed right after handing over its last one (a crash before anything else it would do)."""
    seen: list[tuple[float, dict[str, Any]]] = []

    async def consume() -> None:
        async for event in events:
            seen.append((clock.now - START, event.payload))
            if stop_after is not None and len(seen) >= stop_after:
                break
        await events.aclose()  # type: ignore[attr-defined]

    task = asyncio.ensure_future(consume())
    stopper = asyncio.ensure_future(clock.asleep(START + until - clock.now))
    await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return seen


def values(events: list[tuple[float, dict[str, Any]]]) -> list[tuple[Any, ...]]:
    return [
        (payload["value"], payload["seq"], payload["previous"], payload["redelivered"])
        for _, payload in events
    ]
