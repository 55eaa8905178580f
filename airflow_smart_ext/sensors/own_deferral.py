"""Whether a sensor subclass defers on its own (the ``TimeSensor`` / ``*Async`` pattern), decided at DAG parse.

Such a subclass sets ``self.deferrable`` (or ``start_from_trigger`` / ``start_trigger_args``) and calls its own
``self.defer(...)`` with its own trigger: ``BackoffSensor`` then leaves its deferral alone (no shipping check, no
zero-worker start, Airflow's own resume wrapper), and the backoff schedule governs only the waits that
``BackoffSensor.execute`` runs (poke and reschedule mode). A subclass that merely inherits ``execute`` and passes
``deferrable=True`` is deferred by ``BackoffSensor`` (its check runs in ``BackoffTrigger``).
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

#: Class attributes by which a subclass declares its own start in the triggerer (Airflow's ``StartTriggerArgs``).
_OWN_START_ATTRIBUTES = ("start_trigger_args",)


def _names(code: types.CodeType) -> set[str]:
    """Attribute and global names a function's code (nested functions included) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _function_code(value: Any) -> types.CodeType | None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    if isinstance(value, functools.partialmethod):
        value = value.func
    if callable(value):  # Airflow wraps execute (ExecutorSafeguard) and __init__ (apply_defaults)
        value = inspect.unwrap(value)
    return getattr(value, "__code__", None)


#: (class, BackoffSensor class) -> own_deferral_reason: a class is read once, however many tasks it makes.
_REASONS: dict[tuple[type, type], str | None] = {}


def own_deferral_reason(cls: type, backoff_class: type) -> str | None:
    """Why ``cls`` (a ``backoff_class`` subclass) defers on its own, or None when ``backoff_class`` defers it."""
    key = (cls, backoff_class)
    if key not in _REASONS:
        _REASONS[key] = _read_reason(cls, backoff_class)
    return _REASONS[key]


def _read_reason(cls: type, backoff_class: type) -> str | None:
    """Why ``cls`` (a ``backoff_class`` subclass) defers on its own, or None when ``backoff_class`` defers it.

    Its own classes (those before ``backoff_class`` in the MRO) are read: a method whose code calls ``defer``
    (``self.defer(...)``), or a ``start_trigger_args`` class attribute of its own (the zero-worker start of
    ``TimeSensor`` / ``DateTimeSensorAsync``).
    """
    mro = cls.__mro__
    for klass in mro[: mro.index(backoff_class)]:
        for name in _OWN_START_ATTRIBUTES:
            if name in klass.__dict__:
                return f"{klass.__name__} declares its own {name}"
        for name, value in klass.__dict__.items():
            code = _function_code(value)
            if code is not None and "defer" in _names(code):
                return f"{klass.__name__}.{name} calls self.defer(...) with its own trigger"
    return None
