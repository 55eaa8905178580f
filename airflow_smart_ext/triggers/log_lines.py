"""Trigger log lines written by one thread, so a full log socket never blocks the triggerer's event loop.

On Airflow 3 a trigger's lines reach the triggerer's supervisor over a socket. A burst of them (1,000 waits
starting or checking together) can fill it while the supervisor is itself blocked sending the runner a large
message; a write on the event loop then blocks the one thread that would read that message, and both
processes wait for each other for good (seen with 1,000 start-from-trigger sensors on 3.3.2: heartbeat
stopped, every trigger frozen). Here the loop only queues a line; one writer thread writes them in order.

The line keeps the trigger's context (Airflow routes it to the task's log by a context variable, on 2.11 and
3.x alike). One queue and one thread, not structlog's async methods: those cost a thread-pool future and a
loop wake-up per line: in the 10,000-wait fan-out benchmark only 2,000 of the waits finished in the window.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import sys
import threading
from typing import Any

_lines: queue.SimpleQueue[tuple[contextvars.Context, Any, str, tuple[Any, ...]] | asyncio.Future[None]] = (
    queue.SimpleQueue()
)
_writer: threading.Thread | None = None
_writer_lock = threading.Lock()


def emit(logger: Any, level: str, message: str, *args: Any) -> None:
    """Queue ``logger.<level>(message, *args)``; it is written soon after, in the caller's context."""
    _ensure_writer()
    _lines.put((contextvars.copy_context(), getattr(logger, level), message, args))


async def flushed() -> None:
    """Return once every line queued before this call is written (before a trigger yields its last event)."""
    _ensure_writer()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    _lines.put(done)
    await done


def _ensure_writer() -> None:
    global _writer
    if _writer is not None and _writer.is_alive():
        return
    with _writer_lock:
        if _writer is None or not _writer.is_alive():  # also after a fork: the thread did not come along
            _writer = threading.Thread(target=_write_lines, name="smart-ext-trigger-log", daemon=True)
            _writer.start()


def _write_lines() -> None:
    while True:
        item = _lines.get()
        if isinstance(item, asyncio.Future):
            loop = item.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, item)
            continue
        context, write, message, args = item
        try:
            context.run(write, message, *args)
        except Exception as exc:  # a broken handler must not stop the lines of every other trigger
            print(
                f"airflow_smart_ext: could not write a trigger log line ({exc!r}): {message}", file=sys.stderr
            )


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
