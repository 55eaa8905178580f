"""The sensor's parameters: defaults, accepted values and the checks shared by the constructor and ``.partial()``.

A mapped sensor's constructor runs only when the task runs, so every check the constructor makes on its
arguments also runs here on the arguments known at DAG parse (``.partial()`` and the literal values of
``.expand()`` / ``.expand_kwargs()``), with the same messages.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import JITTER_STRATEGIES, BackoffPolicy
from airflow_smart_ext.errors import resolve_error_types
from airflow_smart_ext.sensors import shipping

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.base import BackoffSensor

# Defaults (see docs/sensors.md "Defaults and why"). Change them here, in one place.
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_JITTER = "full"
#: ``splay=None`` means "one poke_interval": enough to spread a herd over the first interval.
DEFAULT_SPLAY: float | None = None
DEFAULT_POKE_INTERVAL = 60.0  # BaseSensorOperator's own default
DEFERRABLE_FALLBACKS = (None, "reschedule")
#: Largest accepted ``backoff_factor``: beyond it the second interval already jumps to the cap.
MAX_BACKOFF_FACTOR = 10.0
#: ``jitter="decorrelated"`` is replayed check by check (a cold replay is O(n) and runs under a lock):
#: accepted when ``timeout / poke_interval`` stays below this (the default 7-day timeout at 60 s fits).
MAX_DECORRELATED_SENSOR_CHECKS = 20_000
#: Without ``max_wait``, no interval exceeds ``DEFAULT_MAX_WAIT_FACTOR * poke_interval`` and never one hour
#: (docs/backoff.md "The default cap"): a swapped-in base class keeps detection latency bounded.
DEFAULT_MAX_WAIT_FACTOR = 10.0
DEFAULT_MAX_WAIT_CEILING = 3600.0


def _to_seconds(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    """Seconds from a number or a ``timedelta``; a clear ValueError naming ``name`` otherwise."""
    if value is None and allow_none:
        return None
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    accepted = "a number of seconds or a datetime.timedelta" + (" or None" if allow_none else "")
    raise ValueError(f"{name} must be {accepted}; got {value!r}")


def check_timeout_seconds(value: Any) -> float | None:
    """``check_timeout`` in seconds (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    seconds = _to_seconds(value, "check_timeout", allow_none=True)
    if seconds is not None and seconds <= 0:
        raise ValueError(f"check_timeout must be > 0 seconds (or None for the default); got {value!r}")
    return seconds


def rate_limit_value(value: Any) -> float | None:
    """``rate_limit`` in checks per second (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"rate_limit must be a number of checks per second > 0, or None; got {value!r}")
    return float(value)


def deferrable_value(deferrable: Any) -> bool:
    """``deferrable`` (None: ``[operators] default_deferrable``); ``ValueError`` unless a bool."""
    if deferrable is None:
        deferrable = compat.airflow_conf.getboolean("operators", "default_deferrable", fallback=False)
    if not isinstance(deferrable, bool):
        raise ValueError(f"deferrable must be True or False; got {deferrable!r}")
    return deferrable


def check_deferrable_fallback(deferrable_fallback: Any) -> None:
    if deferrable_fallback not in DEFERRABLE_FALLBACKS:
        raise ValueError(
            f"deferrable_fallback must be one of {DEFERRABLE_FALLBACKS}; got {deferrable_fallback!r}"
        )


def check_start_from_trigger(start_from_trigger: Any) -> None:
    if start_from_trigger not in (None, True, False):
        raise ValueError(f"start_from_trigger must be None, True or False; got {start_from_trigger!r}")


def default_max_wait(poke_interval: float) -> float:
    """The cap on intervals when ``max_wait`` is not given: 10x ``poke_interval``, at most one hour (and
    never below ``poke_interval`` itself)."""
    return max(poke_interval, min(DEFAULT_MAX_WAIT_FACTOR * poke_interval, DEFAULT_MAX_WAIT_CEILING))


def backoff_policy_for(
    *,
    task_id: str,
    poke_interval: Any,
    max_wait: Any = None,
    timeout: Any,
    backoff_factor: Any = DEFAULT_BACKOFF_FACTOR,
    jitter: Any = DEFAULT_JITTER,
    splay: Any = DEFAULT_SPLAY,
) -> BackoffPolicy:
    """The policy of a sensor with these arguments; ``ValueError`` naming the parameter when one is invalid.

    Accepts the forms a DAG file passes (seconds or ``timedelta``), so ``.partial()`` can check a mapped
    sensor at parse time before any instance exists.
    """
    initial = _to_seconds(poke_interval, "poke_interval")
    assert initial is not None
    if initial <= 0:
        raise ValueError(
            f"poke_interval must be > 0 seconds (the first backoff interval); got {poke_interval!r}"
        )
    factor = backoff_factor
    if (
        isinstance(factor, bool)
        or not isinstance(factor, (int, float))
        or not math.isfinite(factor)
        or factor < 1
        or factor > MAX_BACKOFF_FACTOR
    ):
        raise ValueError(
            f"backoff_factor must be a finite number >= 1 and <= {MAX_BACKOFF_FACTOR:g} "
            f"(1 = fixed interval); got {factor!r}"
        )
    if jitter not in JITTER_STRATEGIES:
        raise ValueError(f"jitter must be one of {', '.join(JITTER_STRATEGIES)}; got {jitter!r}")
    cap = _to_seconds(max_wait, "max_wait", allow_none=True)
    if cap is not None and cap < initial:
        raise ValueError(
            f"max_wait ({cap:g}s) must be >= poke_interval ({initial:g}s): it caps the interval that "
            f"starts at poke_interval"
        )
    deadline = _to_seconds(timeout, "timeout")
    assert deadline is not None
    seconds = _to_seconds(splay, "splay", allow_none=True)
    if seconds is None:
        seconds = initial  # the default; the first check never comes after the deadline anyway
    elif seconds < 0:
        raise ValueError(f"splay must be >= 0 seconds; got {splay!r}")
    elif seconds > deadline:
        raise ValueError(
            f"splay ({seconds:g}s) must be <= timeout ({deadline:g}s): a larger splay would leave only the "
            f"final check at the deadline"
        )
    if cap is None:
        cap = default_max_wait(initial)
    if jitter == "decorrelated" and deadline / initial >= MAX_DECORRELATED_SENSOR_CHECKS:
        raise ValueError(
            f"jitter='decorrelated' is replayed check by check and supports at most "
            f"{MAX_DECORRELATED_SENSOR_CHECKS:,} checks, but timeout ({deadline:g}s) / poke_interval "
            f"({initial:g}s) allows more; raise poke_interval, lower timeout, or use jitter 'full', "
            f"'equal' or 'none' (computed in O(1))"
        )
    try:
        return BackoffPolicy(initial=initial, factor=float(factor), cap=cap, jitter=jitter, splay=seconds)
    except ValueError as err:  # backstop: the policy's own message names its parameter
        raise ValueError(f"Task {task_id!r}: invalid backoff settings: {err}") from err


def check_static_arguments(cls: type[BackoffSensor], known: Mapping[str, Any]) -> None:
    """Every constructor check on the arguments known at DAG parse (XComArg values are skipped)."""
    static = {name: value for name, value in known.items() if not compat.is_runtime_value(value)}
    task_id = known.get("task_id")
    deferrable = deferrable_value(static.get("deferrable"))
    fallback = static.get("deferrable_fallback")
    check_deferrable_fallback(fallback)
    check_start_from_trigger(static.get("start_from_trigger"))
    cls._check_own_arguments(static)
    resolve_error_types(static.get("transient_errors"), "transient_errors")
    check_timeout_seconds(static.get("check_timeout"))
    rate_limit_value(static.get("rate_limit"))
    arguments = {
        name: known[name]
        for name in ("poke_interval", "max_wait", "timeout", "backoff_factor", "jitter", "splay")
        if known.get(name) is not None  # None means "the default", as in the constructor
    }
    if not any(compat.is_runtime_value(value) for value in arguments.values()):
        fixed = known.get("exponential_backoff") is False
        arguments.setdefault("backoff_factor", 1.0 if fixed else DEFAULT_BACKOFF_FACTOR)
        arguments.setdefault("jitter", "none" if fixed else DEFAULT_JITTER)
        arguments.setdefault("poke_interval", DEFAULT_POKE_INTERVAL)
        arguments.setdefault(
            "timeout", compat.airflow_conf.getfloat("sensors", "default_timeout", fallback=7 * 86400)
        )
        backoff_policy_for(task_id=str(task_id), **arguments)
    if deferrable and fallback != "reschedule":
        framework = shipping.framework_parameters()
        own = {name: value for name, value in static.items() if name not in framework}
        problem = shipping.transient_errors_problem(
            resolve_error_types(static.get("transient_errors"), "transient_errors")
        ) or cls._shipping_problem(own)
        if problem is not None:
            raise ValueError(shipping.unshippable_message(task_id, problem))


class CheckedPartial:
    """What ``BackoffSensor.partial()`` returns: Airflow's partial, whose ``expand`` / ``expand_kwargs`` first
    check every literal mapped value as the constructor would (each value with the partial's arguments)."""

    def __init__(self, partial: Any, sensor_class: type[BackoffSensor], known: Mapping[str, Any]) -> None:
        self._partial = partial
        self._sensor_class = sensor_class
        self._known = dict(known)

    def _check(self, where: str, arguments: Mapping[str, Any]) -> None:
        try:
            self._sensor_class._check_static_arguments({**self._known, **arguments})
        except ValueError as err:
            raise ValueError(f"Task {self._known.get('task_id')!r}, {where}: {err}") from None

    def expand(self, **mapped_kwargs: Any) -> Any:
        for name, values in mapped_kwargs.items():
            if isinstance(values, (list, tuple)):  # literal lists; XComArgs resolve when the task runs
                for position, value in enumerate(values):
                    self._check(f".expand({name}=...) item {position}", {name: value})
        return self._partial.expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *args: Any, **options: Any) -> Any:
        if isinstance(kwargs, (list, tuple)):
            for position, entry in enumerate(kwargs):
                if isinstance(entry, dict):
                    self._check(f".expand_kwargs(...) item {position}", entry)
        return self._partial.expand_kwargs(kwargs, *args, **options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_partial", "_sensor_class", "_known"):
            raise AttributeError(name)  # copy/pickle probe these before __init__ ran
        return getattr(self._partial, name)
