"""Check targets for the trigger benchmarks: sensors the triggerer re-creates by classpath and counts.

Kept in their own module so ``BackoffTrigger`` can import them by classpath (``bench_checks.…``) inside the
benchmark process, exactly as it imports a user's sensor in a real triggerer.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    # One import location on 2.11 and 3.x (Airflow's own shim on 3.x): no version check needed.
    from airflow.sensors.base import BaseSensorOperator

_POKES = itertools.count()  # itertools.count is atomic under the GIL: safe from worker threads
_poke_total = 0


def pokes_so_far() -> int:
    """Number of ``poke`` calls made by every :class:`CountingNeverTrueSensor` in this process."""
    return _poke_total


class CountingNeverTrueSensor(BaseSensorOperator):
    """A sensor whose condition never arrives and which counts every poke (one poke = one check)."""

    def __init__(self, *, key: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key

    def poke(self, context: Any) -> bool:
        global _poke_total
        _poke_total = next(_POKES) + 1
        return False


WINDOW_START: list[float] = []  # set by the benchmark when its measured window opens


class ReadyAfterSensor(BaseSensorOperator):
    """True ``ready_after`` seconds after the measured window opened: a condition that completes in it."""

    def __init__(self, *, key: Any = None, ready_after: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.ready_after = ready_after

    def poke(self, context: Any) -> bool:
        global _poke_total
        _poke_total = next(_POKES) + 1
        import time

        return bool(WINDOW_START) and time.time() >= WINDOW_START[0] + self.ready_after


CHECK_TIMES: list[tuple[Any, float]] = []  # (key, time) of every ConnectionNeverTrueSensor poke
CLOCK: list[Any] = []  # the benchmark's clock function (a virtual one), set before pokes run


class ConnectionNeverTrueSensor(BaseSensorOperator):
    """Never true; one condition per ``key`` on the connection ``conn_id`` (the rate limit's key)."""

    def __init__(self, *, key: Any = None, conn_id: str = "warehouse", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.conn_id = conn_id

    def poke(self, context: Any) -> bool:
        CHECK_TIMES.append((self.key, CLOCK[0]()))
        return False
