"""The sensor's parameters: one table of accepted values, shared by the constructor and ``.partial()``.

Each row names a parameter (ours or Airflow's sensor's), says in words what it accepts (that text is the
error message) and checks a value; cross-parameter rules are rows too. The plain constructor and a mapped
sensor's ``.partial()`` / ``.expand()`` / ``.expand_kwargs()`` literals all run :func:`check_arguments` on the
same table, so both reject the same values at DAG parse with the same message. A mapped sensor's constructor
runs only when the task runs; values from an upstream task's XCom are checked then.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import (  # the schedule defaults live with the schedule (watchers share them)
    DEFAULT_BACKOFF_FACTOR,
    DEFAULT_JITTER,
    DEFAULT_POKE_INTERVAL,
    JITTER_STRATEGIES,
    BackoffPolicy,
    default_max_wait,
)
from airflow_smart_ext.conditions.sql import resolve_criterion
from airflow_smart_ext.errors import resolve_error_types
from airflow_smart_ext.sensors import shipping

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor

# Defaults (see docs/sensors.md "Defaults and why"). Change them here, in one place (the schedule's own:
# airflow_smart_ext/backoff.py).
#: ``splay=None`` means "one poke_interval": enough to spread a herd over the first interval.
DEFAULT_SPLAY: float | None = None
DEFERRABLE_FALLBACKS = (None, "reschedule")
#: Largest accepted ``backoff_factor``: beyond it the second interval already jumps to the cap.
MAX_BACKOFF_FACTOR = 10.0
#: ``jitter="decorrelated"`` is replayed check by check (a cold replay is O(n) and runs under a lock):
#: accepted when ``timeout / poke_interval`` stays below this (the default 7-day timeout at 60 s fits).
MAX_DECORRELATED_SENSOR_CHECKS = 20_000


@dataclass(frozen=True)
class Parameter:
    """One row: a parameter, what it accepts (in words: the message says it) and the check of one value.

    ``valid`` returns whether the value is accepted; it may raise ``ValueError`` with a detail (e.g. which
    dotted path did not import), appended to the message.
    """

    name: str
    accepts: str
    valid: Callable[[Any], bool]

    def problem(self, value: Any) -> str | None:
        try:
            if self.valid(value):
                return None
            detail = ""
        except ValueError as err:
            detail = f" ({err})"
        return f"{self.name} must be {self.accepts}; got {value!r}{detail}"


@dataclass(frozen=True)
class Rule:
    """A rule across parameters (each already valid on its own), judged on their effective values (the
    defaults filled in, durations in seconds). ``message`` is formatted with those values."""

    names: tuple[str, ...]
    valid: Callable[..., bool]
    message: str

    def problem(self, effective: Mapping[str, Any]) -> str | None:
        values = [effective.get(name) for name in self.names]
        if self.valid(*values):
            return None
        return self.message.format(**{name: effective.get(name) for name in self.names})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _seconds(value: Any) -> float | None:
    """Seconds from a number or a ``timedelta``; None for anything else."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return float(value) if _number(value) else None


def _duration(minimum: float, *, strict: bool = False, none: bool = False) -> Callable[[Any], bool]:
    def valid(value: Any) -> bool:
        if value is None:
            return none
        seconds = _seconds(value)
        return seconds is not None and (seconds > minimum if strict else seconds >= minimum)

    return valid


def _one_of(*choices: Any) -> Callable[[Any], bool]:
    return lambda value: any(
        value is choice or (value == choice and type(value) is type(choice)) for choice in choices
    )


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _backoff_factor(value: Any) -> bool:
    return value is None or (_number(value) and 1 <= value <= MAX_BACKOFF_FACTOR)


def _rate(value: Any) -> bool:
    return value is None or (_number(value) and value > 0)


def _error_types(value: Any) -> bool:
    if value is not None and not isinstance(value, (str, type, list, tuple)):
        return False
    spec: Any = value
    resolve_error_types(spec, "transient_errors")  # ValueError with the detail
    return True


_MODES = tuple(compat.BaseSensorOperator.valid_modes)

#: Every parameter of ``BackoffSensor`` and of Airflow's ``BaseSensorOperator`` (one row each).
PARAMETERS: tuple[Parameter, ...] = (
    Parameter("mode", "one of " + ", ".join(repr(m) for m in _MODES), _one_of(*_MODES)),
    Parameter("soft_fail", "True or False", _is_bool),
    Parameter("never_fail", "True or False", _is_bool),
    Parameter("silent_fail", "True or False", _is_bool),
    Parameter("exponential_backoff", "True or False", _is_bool),
    Parameter(
        "poke_interval",
        "> 0 seconds (a number or a datetime.timedelta; the first backoff interval)",
        _duration(0, strict=True),
    ),
    Parameter(
        "timeout",
        ">= 0 seconds (a number or a datetime.timedelta)"
        + (", or None for [sensors] default_timeout" if compat.SENSOR_TIMEOUT_ACCEPTS_NONE else ""),
        _duration(0, none=compat.SENSOR_TIMEOUT_ACCEPTS_NONE),
    ),
    Parameter(
        "max_wait",
        ">= 0 seconds (a number or a datetime.timedelta), or None for the default cap",
        _duration(0, none=True),
    ),
    Parameter(
        "backoff_factor",
        f"a finite number >= 1 and <= {MAX_BACKOFF_FACTOR:g} (1 = fixed interval), or None for the default",
        _backoff_factor,
    ),
    Parameter(
        "jitter",
        "one of " + ", ".join(JITTER_STRATEGIES) + ", or None for the default",
        _one_of(None, *JITTER_STRATEGIES),
    ),
    Parameter(
        "splay",
        ">= 0 seconds (a number or a datetime.timedelta), or None for one poke_interval",
        _duration(0, none=True),
    ),
    Parameter(
        "deferrable", "True or False, or None for [operators] default_deferrable", _one_of(None, True, False)
    ),
    Parameter("deferrable_fallback", "one of None, 'reschedule'", _one_of(*DEFERRABLE_FALLBACKS)),
    Parameter(
        "transient_errors",
        "exception classes or their dotted paths, or None",
        _error_types,
    ),
    Parameter(
        "check_timeout",
        "> 0 seconds (a number or a datetime.timedelta), or None for the default",
        _duration(0, strict=True, none=True),
    ),
    Parameter("rate_limit", "a number of checks per second > 0, or None", _rate),
    Parameter("start_from_trigger", "None, True or False", _one_of(None, True, False)),
)


def _template(value: Any) -> bool:
    """A template field's Jinja string: its rendered value is what the sensor uses (checked when it runs)."""
    return isinstance(value, str) and shipping.has_template(value)


def _non_empty_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _criterion(name: str) -> Callable[[Any], bool]:
    def valid(value: Any) -> bool:
        resolve_criterion(value, name)  # ValueError with the detail (a dotted path that does not import)
        return True

    return valid


#: ``BackoffSqlSensor``'s own parameters (those of common-sql's ``SqlSensor``).
SQL_PARAMETERS: tuple[Parameter, ...] = (
    Parameter("conn_id", "a non-empty connection id (str)", _non_empty_text),
    Parameter("sql", "a non-empty query (str, or a .sql/.hql file name)", _non_empty_text),
    Parameter(
        "parameters",
        "a dict or a list/tuple of bound values, a Jinja template rendering to one, or None",
        lambda value: value is None or isinstance(value, (dict, list, tuple)) or _template(value),
    ),
    *(
        Parameter(name, "None, a callable or a dotted path 'package.module.function'", _criterion(name))
        for name in ("success", "failure", "selector")
    ),
    Parameter("fail_on_empty", "True or False", _is_bool),
    Parameter(
        "hook_params",
        "a dict, a Jinja template rendering to one, or None",
        lambda value: value is None or isinstance(value, dict) or _template(value),
    ),
)

#: Rules across parameters (Airflow's own soft_fail/never_fail rule included).
RULES: tuple[Rule, ...] = (
    Rule(
        ("soft_fail", "never_fail"),
        lambda soft, never: not (soft is True and never is True),
        "soft_fail and never_fail are mutually exclusive (as in Airflow): set at most one of them to True; "
        "got soft_fail={soft_fail!r}, never_fail={never_fail!r}",
    ),
    Rule(
        ("max_wait", "poke_interval"),
        lambda cap, initial: cap is None or cap >= initial,
        "max_wait ({max_wait:g}s) must be >= poke_interval ({poke_interval:g}s): it caps the interval that "
        "starts at poke_interval",
    ),
    Rule(
        # Only a splay the user gave: the default (one poke_interval) may exceed a short timeout, and the
        # first check is never later than the deadline anyway.
        ("splay", "timeout"),
        lambda splay, deadline: splay is None or splay <= deadline,
        "splay ({splay:g}s) must be <= timeout ({timeout:g}s): a larger splay would leave only the final "
        "check at the deadline",
    ),
    Rule(
        ("jitter", "timeout", "poke_interval"),
        lambda jitter, deadline, initial: (
            jitter != "decorrelated" or deadline / initial < MAX_DECORRELATED_SENSOR_CHECKS
        ),
        f"jitter='decorrelated' is replayed check by check and supports at most "
        f"{MAX_DECORRELATED_SENSOR_CHECKS:,} checks, but timeout ({{timeout:g}}s) / poke_interval "
        f"({{poke_interval:g}}s) allows more; raise poke_interval, lower timeout, or use jitter 'full', "
        f"'equal' or 'none' (computed in O(1))",
    ),
)


def effective_values(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The backoff parameters as the sensor will use them: defaults filled in, durations in seconds."""

    def given(name: str) -> Any:
        return arguments.get(name)

    fixed = given("exponential_backoff") is False
    initial = (
        _seconds(given("poke_interval")) if given("poke_interval") is not None else DEFAULT_POKE_INTERVAL
    )
    deadline = _seconds(given("timeout")) if given("timeout") is not None else default_timeout()
    splay = _seconds(given("splay")) if given("splay") is not None else None  # None: one poke_interval
    return {
        "soft_fail": given("soft_fail"),
        "never_fail": given("never_fail"),
        "poke_interval": initial,
        "timeout": deadline,
        "max_wait": _seconds(given("max_wait")) if given("max_wait") is not None else None,
        "backoff_factor": given("backoff_factor")
        if given("backoff_factor") is not None
        else (1.0 if fixed else DEFAULT_BACKOFF_FACTOR),
        "jitter": given("jitter") if given("jitter") is not None else ("none" if fixed else DEFAULT_JITTER),
        "splay": splay,
    }


def default_timeout() -> float:
    """Airflow's ``[sensors] default_timeout`` (a sensor's ``timeout=None``)."""
    return compat.airflow_conf.getfloat("sensors", "default_timeout", fallback=7 * 86400)


def check_arguments(
    parameters: Sequence[Parameter],
    arguments: Mapping[str, Any],
    rules: Sequence[Rule] = RULES,
    unknown: Collection[str] = (),
) -> None:
    """``ValueError`` (naming the parameter and what it accepts) for the first argument the table refuses.

    Only the arguments given are checked; a missing one takes its default, unless it is ``unknown`` yet (a
    mapped sensor's argument that ``.expand()`` may still give): a rule involving it waits for that. A value
    from an upstream task's XCom is checked when the task runs, and so are the rules that involve it.
    """
    static = {name: value for name, value in arguments.items() if not shipping.is_runtime_value(value)}
    for row in parameters:
        if row.name in static:
            problem = row.problem(static[row.name])
            if problem is not None:
                raise ValueError(problem)
    waiting = set(unknown) | {name for name, value in arguments.items() if shipping.is_runtime_value(value)}
    effective = effective_values(static)
    for rule in rules:
        if waiting.intersection(rule.names):
            continue
        problem = rule.problem(effective)
        if problem is not None:
            raise ValueError(problem)


def check_timeout_seconds(value: Any) -> float | None:
    """``check_timeout`` in seconds (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    check_arguments(PARAMETERS, {"check_timeout": value}, rules=())
    return _seconds(value)


def rate_limit_value(value: Any) -> float | None:
    """``rate_limit`` in checks per second (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    check_arguments(PARAMETERS, {"rate_limit": value}, rules=())
    return None if value is None else float(value)


def deferrable_value(deferrable: Any) -> bool:
    """``deferrable`` (None: ``[operators] default_deferrable``)."""
    if deferrable is None:
        deferrable = compat.airflow_conf.getboolean("operators", "default_deferrable", fallback=False)
    return bool(deferrable)


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
    """The policy of a sensor with these arguments; ``ValueError`` naming the parameter when one is invalid
    (the table's rows and rules). Accepts the forms a DAG file passes (seconds or ``timedelta``)."""
    arguments = {
        "poke_interval": poke_interval,
        "max_wait": max_wait,
        "timeout": timeout,
        "backoff_factor": backoff_factor,
        "jitter": jitter,
        "splay": splay,
    }
    check_arguments(PARAMETERS, arguments)
    values = effective_values(arguments)
    initial = values["poke_interval"]
    cap = values["max_wait"] if values["max_wait"] is not None else default_max_wait(initial)
    try:
        return BackoffPolicy(
            initial=initial,
            factor=float(values["backoff_factor"]),
            cap=cap,
            jitter=values["jitter"],
            splay=values["splay"] if values["splay"] is not None else initial,
        )
    except ValueError as err:  # backstop: the policy's own message names its parameter
        raise ValueError(f"Task {task_id!r}: invalid backoff settings: {err}") from err


def check_static_arguments(
    cls: type[BackoffSensor], known: Mapping[str, Any], unknown: Collection[str] = ()
) -> None:
    """Every constructor check on the arguments known at DAG parse: the table, then (deferrable) whether the
    sensor can travel to the triggerer. ``unknown``: arguments ``.expand()`` may still give."""
    check_arguments(cls.parameter_table(), known, unknown=unknown)
    static = {name: value for name, value in known.items() if not shipping.is_runtime_value(value)}
    cls._check_own_arguments(static)
    fallback = static.get("deferrable_fallback")
    if deferrable_value(static.get("deferrable")) and fallback != "reschedule":
        framework = shipping.framework_parameters(cls)
        own = {name: value for name, value in static.items() if name not in framework}
        problem = shipping.transient_errors_problem(
            resolve_error_types(static.get("transient_errors"), "transient_errors")
        ) or cls._shipping_problem(own)
        if problem is not None:
            raise ValueError(shipping.unshippable_message(known.get("task_id"), problem))


def rule_parameters() -> frozenset[str]:
    """The parameters some rule involves (a ``.partial()`` leaves those it lacks to ``.expand()``)."""
    return frozenset(name for rule in RULES for name in rule.names)


class CheckedPartial:
    """What ``BackoffSensor.partial()`` returns: Airflow's partial, whose ``expand`` / ``expand_kwargs`` first
    check every literal mapped value as the constructor would (each value with the partial's arguments; a
    rule across two mapped arguments of ``.expand()`` is checked when the task runs)."""

    def __init__(self, partial: Any, sensor_class: type[BackoffSensor], known: Mapping[str, Any]) -> None:
        self._partial = partial
        self._sensor_class = sensor_class
        self._known = dict(known)

    def _check(self, where: str, arguments: Mapping[str, Any], unknown: Collection[str] = ()) -> None:
        try:
            check_static_arguments(self._sensor_class, {**self._known, **arguments}, unknown)
        except ValueError as err:
            raise ValueError(f"Task {self._known.get('task_id')!r}, {where}: {err}") from None

    def expand(self, **mapped_kwargs: Any) -> Any:
        self._check(".expand(...)", {}, unknown=set(mapped_kwargs))
        for name, values in mapped_kwargs.items():
            if isinstance(values, (list, tuple)):  # literal lists; XComArgs resolve when the task runs
                for position, value in enumerate(values):
                    others = set(mapped_kwargs) - {name}
                    self._check(f".expand({name}=...) item {position}", {name: value}, unknown=others)
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
