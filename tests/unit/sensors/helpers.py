"""Importable helpers for the sensor tests: a fake TI and module-level sensors and criteria.

They live in an importable module (not in a test function) because deferrable shipping requires that
the triggerer can import the sensor class and SQL criteria by name.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.sensors import BackoffSensor


class FakeTI:
    def __init__(self, dag_id: str = "dag", task_id: str = "task", run_id: str = "run", try_number: int = 1):
        self.dag_id, self.task_id, self.run_id = dag_id, task_id, run_id
        self.map_index = -1
        self.try_number = try_number
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def make_context(ti: FakeTI | None = None) -> dict[str, Any]:
    ti = ti or FakeTI()
    return {"ti": ti, "ds": "2026-01-01", "ts": "2026-01-01T00:00:00+00:00", "logical_date": None}


class ScriptedSensor(BackoffSensor):
    """Returns the scripted results in order (the last one repeats) and records each poke's clock time."""

    template_fields = ("target",)

    def __init__(
        self, *, target: str = "x", results: list[Any] | None = None, clock: Any = None, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.target = target
        self.results = list(results or [False])
        self.clock = clock
        self.poke_times: list[float] = []

    def poke(self, context: Any) -> Any:
        self.poke_times.append(self.clock.time() if self.clock else 0.0)
        result = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(result, BaseException):
            raise result
        return result


class PathSensor(BackoffSensor):
    """A minimal custom sensor with JSON-able constructor arguments (deferrable-shippable)."""

    template_fields = ("path",)

    def __init__(self, *, path: str, min_size: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.min_size = min_size

    def poke(self, context: Any) -> bool:
        return False


class RenamedFieldSensor(BackoffSensor):
    """Its template field is not named after the constructor argument it comes from."""

    template_fields = ("filepath",)

    def __init__(self, *, path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filepath = path

    def poke(self, context: Any) -> bool:
        return False


def is_positive(value: Any) -> bool:
    return bool(value) and value > 0


def is_negative(value: Any) -> bool:
    return value is not None and value < 0


def second_cell(row: Any) -> Any:
    return row[1]


def poke_value(value: Any) -> Any:
    return compat.locations.PokeReturnValue(is_done=True, xcom_value=value)


class Deferred(Exception):
    """Raised by ``capture_defer`` in place of Airflow's deferral: carries ``defer``'s arguments."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("deferred")
        self.kwargs = kwargs


def capture_defer(sensor: BackoffSensor, monkeypatch: pytest.MonkeyPatch) -> None:
    def defer(**kwargs: Any) -> None:
        raise Deferred(**kwargs)

    monkeypatch.setattr(sensor, "defer", defer)
