"""What every check type provides, and the registry of check types.

A check type is one module of this package defining one :class:`CheckType` subclass: how its spec is
validated, which waits are identical (sharing key), which checks compete for one connection (concurrency
key), the shared I/O half (:class:`SharedCheck`) and the per-waiter half (an interpreter). Modules are
discovered, so a new check type (say HTTP) is one new file here.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from airflow_smart_ext.conditions.outcomes import Outcome

Interpreter = Callable[[Any], Outcome]


class SharedCheck:
    """The I/O half of a check; one instance per sharing group. ``run`` returns a raw observation."""

    concurrency_key: str

    async def run(self, context: Mapping[str, Any]) -> Any:
        raise NotImplementedError


class CheckType:
    """One kind of check spec (``{"type": name, ...}``). Subclasses register themselves by ``name``."""

    name: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]  # exactly the keys of a spec of this type

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _TYPES[cls.name] = cls()

    def validate(self, check: Mapping[str, Any]) -> None:
        """Type-specific checks (the keys are already known to be exactly ``keys``)."""

    def shared_identity(self, check: Mapping[str, Any]) -> dict[str, Any]:
        """The parts of the spec that decide what the shared I/O does."""
        raise NotImplementedError

    def concurrency_key(self, check: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def conn_id(self, check: Mapping[str, Any]) -> str | None:
        """The Airflow connection the check reads, if one is known (None: none)."""
        return None

    def sensor_class(self, check: Mapping[str, Any]) -> str | None:
        """The dotted path of the sensor class the check re-creates (None: not a sensor's poke)."""
        return None

    def describe(self, check: Mapping[str, Any]) -> str:
        """The condition in words for people; shows ``check`` as given (redact its secrets first)."""
        raise NotImplementedError

    def shared_check(self, check: Mapping[str, Any]) -> SharedCheck:
        raise NotImplementedError

    async def interpreter(self, check: Mapping[str, Any]) -> Interpreter:
        """The per-waiter half: raw observation -> this waiter's outcome."""
        raise NotImplementedError


_TYPES: dict[str, CheckType] = {}
_discovered = False


def check_types() -> dict[str, CheckType]:
    """Every check type, by name (the modules of this package, imported once)."""
    global _discovered
    if not _discovered:
        package = importlib.import_module("airflow_smart_ext.conditions")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
        _discovered = True
    return _TYPES


def check_type(check: Mapping[str, Any]) -> CheckType:
    return check_types()[check["type"]]


def validate_check_spec(check: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the offending key and the accepted values."""
    names = tuple(check_types())
    if not isinstance(check, Mapping):
        raise ValueError(f"check must be a dict with a 'type' key in {names}, got {type(check).__name__}")
    kind = _TYPES.get(check.get("type"))  # type: ignore[arg-type]
    if kind is None:
        raise ValueError(f"check['type'] must be one of {names}, got {check.get('type')!r}")
    missing = [key for key in kind.keys if key not in check]
    unknown = sorted(set(check) - set(kind.keys))
    if missing or unknown:
        raise ValueError(
            f"check of type {kind.name!r} must have exactly the keys {kind.keys}; "
            f"missing {missing}, unknown {unknown}"
        )
    kind.validate(check)
    try:
        json.dumps(dict(check), sort_keys=True)
    except (TypeError, ValueError) as err:
        raise ValueError(f"check spec must be JSON-serializable: {err}") from err


def place_template_fields(
    check: Mapping[str, Any], fields: Mapping[str, list[Any]], values: Mapping[str, Any]
) -> dict[str, Any]:
    """A zero-worker start spec's check with each template field's value put back at its path (``fields``:
    name -> path of keys into the check). Copies only along the paths: ``check`` itself is left as it is."""
    placed = dict(check)
    for name, path in fields.items():
        target = placed
        for key in path[:-1]:
            target[key] = target = dict(target[key])
        target[path[-1]] = values[name]
    return placed


def sharing_key(check: Mapping[str, Any]) -> str:
    """Identical waits have equal keys."""
    shared = {"type": check["type"], **check_type(check).shared_identity(check)}
    return json.dumps(shared, sort_keys=True, separators=(",", ":"), default=str)


def concurrency_key(check: Mapping[str, Any]) -> str:
    """Checks with the same key compete for one set of slots (one connection, or one sensor class)."""
    return check_type(check).concurrency_key(check)


def make_shared_check(check: Mapping[str, Any]) -> SharedCheck:
    return check_type(check).shared_check(check)


async def make_interpreter(check: Mapping[str, Any]) -> Interpreter:
    return await check_type(check).interpreter(check)
