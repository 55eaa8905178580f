"""The unit tests' fake clock (the ``clock`` fixture of tests/unit/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
from typing import Any

from airflow_smart_ext.conditions import runtime

START = 1_700_000_000.0  # where the fake clock starts


class FakeClock:
    """The fake of the package's clock seam (``airflow_smart_ext/clock.py``), whose waits come in two styles:

    * a worker's blocking ``sleep``: moves time at once;
    * the triggerer's awaited ``asleep`` and ``call_later``: return (or fire) only when ``drive`` moves time to
      them, which it does once every task and check thread waits.

    ``sleeps`` records the blocking sleeps (what a sensor slept, in order).
    """

    def __init__(self, start: float = START) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._threads_busy = 0
        self._lock = threading.Lock()
        self._idle = asyncio.Event()  # no thread busy
        self._idle.set()
        self._slept = asyncio.Event()  # a sleeper was added

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds

    def asleep(self, seconds: float) -> asyncio.Future[None]:
        # Not a coroutine: the wake time is fixed at the call, even when the caller wraps the sleep in a
        # task that only starts after the driver has moved time on.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._seq), future))
        self._slept.set()
        return future

    def call_later(self, seconds: float, callback: Any) -> asyncio.Future[None]:
        future = self.asleep(seconds)
        future.add_done_callback(lambda done: None if done.cancelled() else callback())
        return future  # .cancel() disarms it, like a TimerHandle

    async def run_blocking(self, func: Any, *args: Any, key: str | None = None) -> Any:
        if key is not None:  # the key's slots, as the real run_blocking takes them
            async with runtime.connection_slot(key):
                return await self.run_blocking(func, *args)
        with self.busy():
            return await asyncio.to_thread(func, *args)

    @contextlib.contextmanager
    def busy(self) -> Any:
        """Real work outside the loop (a thread, the supervisor): virtual time stands still meanwhile."""
        # Entered and left on the event loop (around an awaited thread or supervisor call), so the events
        # below are only ever touched from the loop.
        with self._lock:
            self._threads_busy += 1
            self._idle.clear()
        try:
            yield
        finally:
            with self._lock:
                self._threads_busy -= 1
                if not self._threads_busy:
                    self._idle.set()

    async def drive(self) -> None:
        while True:
            # Settle: let every runnable task (and every worker-thread check) finish before moving time. Three
            # quiet rounds in a row, each ending with a short real sleep: on a loaded machine a thread's result
            # can reach the loop a moment after the thread count drops, and moving time then is a false timeout.
            # (Those sleeps are a grace for work nothing announces, e.g. the log writer's wake-ups; the waits
            # that can be announced, threads done and a new sleeper, are events.)
            quiet = 0
            while quiet < 3:
                for _ in range(50):
                    await asyncio.sleep(0)
                if self._threads_busy:
                    quiet = 0
                    await self._idle.wait()
                else:
                    quiet += 1
                    await asyncio.sleep(0.0005)
            while self._sleepers and self._sleepers[0][2].done():
                heapq.heappop(self._sleepers)
            if not self._sleepers:
                self._slept.clear()
                await self._slept.wait()
                continue
            wake, _, future = heapq.heappop(self._sleepers)
            self.now = max(self.now, wake)
            future.set_result(None)
