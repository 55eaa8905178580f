"""Check targets of the soak benchmark (``bench_soak.py``): sensors the triggerer re-creates by classpath.

Stateless: each one's answer depends only on its kwargs and the wall clock, so 100,000 waits leave nothing
behind in this module (the soak measures what *our* code keeps).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from airflow.sensors.base import BaseSensorOperator


class _Keyed(BaseSensorOperator):
    """``key`` names the condition (waits with equal kwargs share one check group)."""

    def __init__(self, *, key: Any = None, at: float = 0.0, conn_id: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.at = at  # the moment this condition comes true / recovers
        self.conn_id = conn_id


class FlipSensor(_Keyed):
    """False until ``at``, then true."""

    def poke(self, context: Any) -> bool:
        return time.time() >= self.at


class NeverSensor(_Keyed):
    """Never true (its waits time out or are cancelled)."""

    def poke(self, context: Any) -> bool:
        return False


class BrokenSensor(_Keyed):
    """Raises a permanent error (``ValueError``): the wait ends with an error event at its first check."""

    def poke(self, context: Any) -> bool:
        raise ValueError(f"condition {self.key} is misconfigured")


class FlakySensor(_Keyed):
    """Raises a transient error (``ConnectionError``) until ``at``, then true: the errors are ridden out."""

    def poke(self, context: Any) -> bool:
        if time.time() < self.at:
            raise ConnectionError(f"condition {self.key}: connection refused")
        return True


class HangingSensor(_Keyed):
    """Until ``at`` a poke blocks ``hang`` seconds (beyond its check's time limit), then true."""

    def __init__(self, *, hang: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hang = hang

    def poke(self, context: Any) -> bool:
        if time.time() < self.at:
            time.sleep(self.hang)
            return False
        return True
