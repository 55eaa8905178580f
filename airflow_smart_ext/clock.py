"""The package's one clock seam: the wall-clock time every wait's schedule is computed against, and the ways to
wait for it — a worker's blocking sleep (poke mode), the triggerer's sleep and its wake-up timers.

Every module reads time and waits through these functions, so a test fakes this module alone (the unit tier's
``clock`` fixture) and runs a wait of hours on a virtual clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Cancellable(Protocol):
    def cancel(self) -> Any: ...


def now() -> float:
    """Epoch seconds."""
    return time.time()


def sleep(seconds: float) -> None:
    """Block the calling thread (a worker in poke mode)."""
    time.sleep(max(0.0, seconds))


def asleep(seconds: float) -> Awaitable[Any]:
    """Sleep on the event loop. A plain function, not a coroutine: the sleep starts at the call, not when a
    task wrapping it first runs (a virtual clock may have moved on by then)."""
    return asyncio.sleep(max(0.0, seconds))


def call_later(seconds: float, callback: Callable[[], None]) -> Cancellable:
    """Run ``callback`` on the event loop after ``seconds`` (cheaper than racing a sleep task against an event)."""
    return asyncio.get_running_loop().call_later(max(0.0, seconds), callback)
