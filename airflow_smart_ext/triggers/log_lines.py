"""Trigger log lines written by one thread, so a full log socket never blocks the triggerer's event loop.

On Airflow 3 a trigger's lines reach the triggerer's supervisor over a socket. A burst of them (1,000 waits
starting or checking together) can fill it while the supervisor is itself blocked sending the runner a large
message; a write on the event loop then blocks the one thread that would read that message, and both
processes wait for each other for good (seen with 1,000 start-from-trigger sensors on 3.3.2: heartbeat
stopped, every trigger frozen). Here the loop only queues a line; one writer thread writes them in order.

The line keeps the trigger's context (Airflow routes it to the task's log by a context variable, on 2.11 and
3.x alike). One queue and one thread, not structlog's async methods: those cost a thread-pool future and a
loop wake-up per line: in the 10,000-wait fan-out benchmark only 2,000 of the waits finished in the window.
For the same reason the flushes written in one batch are announced to the loop with one wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

_lines: queue.SimpleQueue[tuple[contextvars.Context, Any, str, tuple[Any, ...]] | asyncio.Future[None]] = (
    queue.SimpleQueue()
)
_writer: threading.Thread | None = None


def queued() -> int:
    """Lines (and flush markers) not written yet (triggers/registries.py reports it)."""
    return _lines.qsize()


_writer_lock = threading.Lock()
# At most this many queued items are written before the flushes among them are announced: a flush does not
# wait for a whole backlog behind it.
WRITE_BATCH = 200


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


class Labelled:
    """A logger whose every line starts with ``label()``: who wrote it (a watcher and its assets)."""

    def __init__(self, logger: Any, label: Callable[[], str]) -> None:
        self._logger = logger
        self._label = label

    def __getattr__(self, level: str) -> Callable[..., Any]:
        write = getattr(self._logger, level)

        def labelled(message: str, *args: Any) -> Any:
            if not args:  # a line formatted already: its own % signs are text
                message = message.replace("%", "%%")
            return write("%s: " + message, self._label(), *args)

        return labelled


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
        # Everything queued so far in one go: the flushes of a burst (1,000 waits ending together) are then
        # announced with one loop wake-up, not one each. Each wake-up is a byte through the loop's self-pipe,
        # and the loop reads that pipe until it is empty: a stream of them holds the loop there.
        batch = [_lines.get()]
        while len(batch) < WRITE_BATCH:
            try:
                batch.append(_lines.get_nowait())
            except queue.Empty:
                break
        flushes: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for item in batch:
            if isinstance(item, asyncio.Future):
                flushes.setdefault(item.get_loop(), []).append(item)
                continue
            context, write, message, args = item
            try:
                context.run(write, message, *args)
            except Exception as exc:  # a broken handler must not stop the lines of every other trigger
                print(
                    f"airflow_smart_ext: could not write a trigger log line ({exc!r}): {message}",
                    file=sys.stderr,
                )
        for loop, futures in flushes.items():
            # RuntimeError: that loop closed (the triggerer is shutting down), nobody waits any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for done in futures:
        if not done.done():
            done.set_result(None)
