"""Check type ``"sensor"``: re-create a sensor in the triggerer and call its ``poke`` / ``apoke``.

Spec: ``{"type": "sensor", "classpath": "pkg.mod.MySensor", "kwargs": {...}, "context": {...}}`` where
``kwargs`` are the sensor's own (rendered) constructor arguments and ``context`` the reduced context a poke
gets (ids and the run's dates as ISO strings).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import pendulum

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.conditions.outcomes import (
    NEGATIVE,
    Outcome,
    outcome_from_exception,
    outcome_from_result,
)
from airflow_smart_ext.conditions.runtime import import_object
from airflow_smart_ext.conditions.spec import CheckType, Interpreter, SharedCheck

# Context values the sensor side ships as ISO strings; pokes get them back as datetimes, like on a worker.
DATETIME_CONTEXT_KEYS = ("logical_date", "data_interval_start", "data_interval_end")
# The shipped context keys that say *which data* a poke is about; they are part of a sensor check's identity.
SHARED_CONTEXT_KEYS = ("ds", "ts", *DATETIME_CONTEXT_KEYS)


def build_spec(classpath: str, kwargs: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """The ``"sensor"`` spec of a poke of ``classpath(**kwargs)`` in the run described by ``context``."""
    ti = context["ti"]

    def iso(key: str) -> str | None:
        value = context.get(key)
        if value is None:
            return None
        return value.isoformat() if hasattr(value, "isoformat") else str(value)

    map_index = getattr(ti, "map_index", -1)
    return {
        "type": "sensor",
        "classpath": classpath,
        "kwargs": dict(kwargs),
        "context": {
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": -1 if map_index is None else int(map_index),
            "try_number": int(getattr(ti, "try_number", 1) or 1),
            "ds": context.get("ds"),
            "ts": context.get("ts"),
            "logical_date": iso("logical_date"),
            "data_interval_start": iso("data_interval_start"),
            "data_interval_end": iso("data_interval_end"),
        },
    }


def run_dates(logical: Any, start: Any, end: Any) -> dict[str, str | None]:
    """A run's dates as a ``"sensor"`` check ships them (``ds``, ``ts``, ``logical_date``, the interval)."""
    return {
        "ds": logical.strftime("%Y-%m-%d") if logical is not None else None,
        "ts": _iso_or_none(logical),
        "logical_date": _iso_or_none(logical),
        "data_interval_start": _iso_or_none(start),
        "data_interval_end": _iso_or_none(end),
    }


def _iso_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def sensor_concurrency_key(classpath: str, kwargs: Mapping[str, Any]) -> str:
    """A sensor's bound: its connection when its kwargs name one, else its class.

    A string-valued constructor argument whose name ends with ``conn_id`` (``conn_id``, ``aws_conn_id``,
    ``http_conn_id``, ...) keys the bound by that connection (``conn_id:<value>``, shared with SQL checks
    on it), so hung pokes against one system do not block the same class's checks against another. With
    several such arguments the first name in sorted order decides. Otherwise ``sensor:<classpath>``.
    """
    conn_id = sensor_conn_id(kwargs)
    return f"sensor:{classpath}" if conn_id is None else f"conn_id:{conn_id}"


def sensor_conn_id(kwargs: Mapping[str, Any]) -> str | None:
    """The connection a sensor's kwargs name (:func:`sensor_concurrency_key`'s rule), or None."""
    for name in sorted(kwargs):
        value = kwargs[name]
        if name.endswith("conn_id") and isinstance(value, str) and value:
            return value
    return None


_PARSED_DATETIMES: dict[str, Any] = {}  # ISO string -> parsed value; shipped dates repeat every check


def parsed_datetime_count() -> int:
    """Dates parsed and kept (bounded; triggers/registries.py reports it)."""
    return len(_PARSED_DATETIMES)


def _parse_datetime_cached(value: str) -> Any:
    parsed = _PARSED_DATETIMES.get(value)
    if parsed is None:
        if len(_PARSED_DATETIMES) >= 4096:  # bounded: a long-lived triggerer sees ever new run dates
            _PARSED_DATETIMES.clear()
        parsed = _PARSED_DATETIMES[value] = pendulum.parse(value)  # aware, as contexts hold them everywhere
    return parsed


def poke_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The reduced context a poke gets in the triggerer: the shipped keys, datetimes parsed back.

    A fresh dict each call (a poke may modify it); the parsed datetimes are immutable and cached.
    """
    result = dict(context)
    for key in DATETIME_CONTEXT_KEYS:
        value = result.get(key)
        if isinstance(value, str) and value:
            result[key] = _parse_datetime_cached(value)
    return result


class SensorSharedCheck(SharedCheck):
    """Re-create the sensor once per group and call its ``poke`` (thread) or ``apoke`` (awaited)."""

    def __init__(self, classpath: str, kwargs: Mapping[str, Any], task_id: str) -> None:
        self.classpath = classpath
        self.kwargs = dict(kwargs)
        self.task_id = task_id
        self.concurrency_key = sensor_concurrency_key(classpath, self.kwargs)
        self._sensor: Any = None

    def _build(self) -> Any:
        if self._sensor is None:
            sensor_class = import_object(self.classpath)
            self._sensor = sensor_class(task_id=self.task_id, **self.kwargs)
        return self._sensor

    def _poke(self, context: dict[str, Any]) -> Any:
        return self._build().poke(context)

    async def run(self, context: Mapping[str, Any]) -> Outcome:
        ctx = poke_context(context)
        key = self.concurrency_key
        try:
            sensor = self._sensor
            if sensor is None:
                sensor = await runtime.run_blocking(self._build, key=key)
            apoke = getattr(sensor, "apoke", None)
            if apoke is not None and inspect.iscoroutinefunction(apoke):
                async with runtime.connection_slot(key):  # a coroutine: cancelling it frees the slot
                    result = await apoke(ctx)
            else:
                result = await runtime.run_blocking(self._poke, ctx, key=key)
        except compat.locations.CHECK_ERRORS as err:
            return outcome_from_exception(err)
        # PokeReturnValue is truthy when done and carries the XCom value; a bare bool works too.
        if not bool(result):
            return NEGATIVE
        return outcome_from_result(result)


def _same_outcome(raw: Outcome) -> Outcome:
    return raw


class SensorCheck(CheckType):
    name: ClassVar[str] = "sensor"
    keys: ClassVar[tuple[str, ...]] = ("type", "classpath", "kwargs", "context")

    def validate(self, check: Mapping[str, Any]) -> None:
        if not isinstance(check["classpath"], str) or "." not in check["classpath"]:
            raise ValueError(
                f"check['classpath'] must be a dotted 'module.Class' path, got {check['classpath']!r}"
            )
        for key in ("kwargs", "context"):
            if not isinstance(check[key], Mapping):
                raise ValueError(f"check[{key!r}] must be a dict, got {type(check[key]).__name__}")
        if not check["context"].get("task_id"):
            raise ValueError("check['context'] must contain 'task_id' (the sensor is re-created with it)")

    def shared_identity(self, check: Mapping[str, Any]) -> dict[str, Any]:
        # A poke may read the run's dates from its context (``ds``, the data interval): only waits for the
        # same dates are identical. Task identity (dag/task/run id, try) stays out, so runs of many DAGs
        # waiting on the same thing for the same day still share.
        return {
            "classpath": check["classpath"],
            "kwargs": check["kwargs"],
            "dates": {key: check["context"].get(key) for key in SHARED_CONTEXT_KEYS},
        }

    def concurrency_key(self, check: Mapping[str, Any]) -> str:
        return sensor_concurrency_key(check["classpath"], check["kwargs"])

    def conn_id(self, check: Mapping[str, Any]) -> str | None:
        return sensor_conn_id(check["kwargs"])

    def sensor_class(self, check: Mapping[str, Any]) -> str | None:
        return str(check["classpath"])

    def describe(self, check: Mapping[str, Any]) -> str:
        arguments = ", ".join(f"{name}={value!r}" for name, value in sorted(check["kwargs"].items()))
        words = f"{check['classpath'].rpartition('.')[2]}({arguments})"
        day = check["context"].get("ds") or check["context"].get("data_interval_start")
        return words + (f" for {day}" if day else "")

    def shared_check(self, check: Mapping[str, Any]) -> SharedCheck:
        return SensorSharedCheck(check["classpath"], check["kwargs"], check["context"]["task_id"])

    async def interpreter(self, check: Mapping[str, Any]) -> Interpreter:
        # Imported before any poke (as a SQL check's criteria are): a class that does not import in the
        # triggerer is then reported as such (triggers/interpreters.py), not as the poke's error. Once it is
        # imported, no thread hop per wait (a thousand waits start together).
        module, _, name = check["classpath"].rpartition(".")
        if not hasattr(sys.modules.get(module), name):
            await runtime.run_blocking(import_object, check["classpath"])
        return _same_outcome  # the poke's outcome is everybody's: nothing per waiter
