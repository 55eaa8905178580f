"""Importable sensors for the fault tests (the trigger re-creates them by classpath) and their check spec."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import defaultdict
from typing import Any

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat

POKES: dict[str, list[float]] = defaultdict(list)
OUTAGE_UNTIL: dict[str, float] = {}
READY_AT: dict[str, float] = {}
RELEASE = threading.Event()  # hung pokes block until the test ends
RECOVERED = threading.Event()  # a "recovers" poke blocks until this is set, then its condition is true


class OutageSensor(compat.locations.BaseSensorOperator):
    """'database is locked' until OUTAGE_UNTIL[name], then done from READY_AT[name] on."""

    def __init__(
        self, *, name: str, conn_id: str = "warehouse", error: str = "locked", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.name, self.conn_id, self.error = name, conn_id, error

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(seam.now())
        if seam.now() < OUTAGE_UNTIL.get(self.name, float("-inf")):
            if self.error == "locked":
                raise sqlite3.OperationalError("database is locked")
            raise RuntimeError("permanent: bad configuration")
        return seam.now() >= READY_AT.get(self.name, float("inf"))


class HungSensor(compat.locations.BaseSensorOperator):
    """A poke that never returns (until the test releases it)."""

    def __init__(self, *, name: str, conn_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name, self.conn_id = name, conn_id

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(time.time())
        RELEASE.wait(120)
        return False


def check(cls: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "type": "sensor",
        "classpath": f"{__name__}.{cls}",
        "kwargs": kwargs,
        "context": {"dag_id": "d", "task_id": "wait", "run_id": "r", "ds": "2026-01-02"},
    }


class ProbeSensor(compat.locations.BaseSensorOperator):
    """``behaviour``: "hang" (never returns until the test ends), "recovers" (its first poke hangs until
    RECOVERED, then the condition is true), "never" or "ready". Without ``conn_id`` it is bounded by its class."""

    def __init__(self, *, name: str, behaviour: str, **kwargs: Any) -> None:
        conn_id = kwargs.pop("conn_id", None)
        super().__init__(**kwargs)
        self.name, self.behaviour = name, behaviour
        if conn_id is not None:
            self.conn_id = conn_id

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(time.time())
        if self.behaviour == "hang":
            RELEASE.wait(120)
            return False
        if self.behaviour == "recovers":
            RECOVERED.wait(120)
            return True
        return self.behaviour == "ready"


class OtherProbeSensor(ProbeSensor):
    """Another class: another concurrency key when no connection is named."""
