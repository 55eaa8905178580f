"""A wait's parameters: one table of accepted values for every face of a wait.

Each row names a parameter, says in words what it accepts (that text is the error message) and checks a value;
cross-parameter rules are rows too. Every entry point asks this table, so each refuses the same values at DAG
parse with the same message: ``BackoffSensor`` / ``BackoffSqlSensor`` (plain, and a mapped sensor's
``.partial()`` / ``.expand()`` / ``.expand_kwargs()`` literals: ``sensors/arguments.py``), both triggers
(``triggers/worker_first.py``, built by hand or from a row) and ``ConditionWatcher`` / ``sql_condition``
(:func:`watcher_arguments`, ``watchers.py``). A mapped sensor's constructor runs only when the task runs; values
from an upstream task's XCom are checked then.

Pure but for three Airflow facts read through ``compat`` (the sensor modes, whether ``timeout=None`` is taken,
``[sensors] default_timeout``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import compat, units
from airflow_smart_ext.backoff import (  # the schedule defaults live with the schedule
    DEFAULT_BACKOFF_FACTOR,
    DEFAULT_JITTER,
    DEFAULT_POKE_INTERVAL,
    JITTER_STRATEGIES,
    BackoffPolicy,
    default_max_wait,
)
from airflow_smart_ext.conditions.runtime import callable_path
from airflow_smart_ext.conditions.sql import resolve_criterion
from airflow_smart_ext.errors import resolve_error_types

# Defaults (see docs/sensors.md "Defaults and why"). Change them here, in one place (the schedule's own:
# airflow_smart_ext/backoff.py).
#: ``splay=None`` means "one poke_interval": enough to spread a herd over the first interval.
DEFAULT_SPLAY: float | None = None
DEFERRABLE_FALLBACKS = (None, "reschedule")
#: ``poke_interval=0`` (accepted, as Airflow accepts it): the schedule's first interval. Airflow's own backoff never
#: waits less than 1 s (``max(int(poke_interval * 2**(n-2)), 1)``); a zero interval would poke in a busy loop
#: for the whole timeout. The cap then defaults to ``default_max_wait(1)`` = 10 s, as for ``poke_interval=1``.
ZERO_POKE_INTERVAL_START = 1.0
#: Largest accepted ``backoff_factor``: beyond it the second interval already jumps to the cap.
MAX_BACKOFF_FACTOR = 10.0
#: ``jitter="decorrelated"`` is replayed check by check (a cold replay is O(n) and runs under a lock):
#: accepted when ``timeout / poke_interval`` stays below this (the default 7-day timeout at 60 s fits).
MAX_DECORRELATED_SENSOR_CHECKS = 20_000


class WaitArgumentError(ValueError, TypeError):
    """A bad argument of a wait built in the triggerer (a trigger or a watcher). A ``ValueError`` at DAG parse
    (named parameter, accepted values); also a ``TypeError`` because Airflow's triggerer fails only a
    ``TypeError`` from a trigger's constructor as that one trigger (any other error stops the whole triggerer
    process)."""


CRITERIA_NAMES = ("success", "failure", "selector")
#: A stored schedule's keys (``BackoffPolicy.to_dict``) -> the table's names for them (the sensor's arguments),
#: in the order a watcher stores them (its kwargs are its identity): one mapping, both ways (below).
POLICY_PARAMETERS = {
    "initial": "poke_interval",
    "cap": "max_wait",
    "factor": "backoff_factor",
    "jitter": "jitter",
    "splay": "splay",
}


def policy_arguments(policy: BackoffPolicy) -> dict[str, Any]:
    """A schedule as the table's arguments (``poke_interval``, ``max_wait``, ...): what a watcher stores."""
    return {name: getattr(policy, key) for key, name in POLICY_PARAMETERS.items()}


def stored_policy(arguments: Mapping[str, Any]) -> BackoffPolicy:
    """The schedule a watcher stored as the table's arguments (:func:`policy_arguments`; a row written before
    ``splay`` was stored has none: the policy's default)."""
    return BackoffPolicy(
        **{key: arguments[name] for key, name in POLICY_PARAMETERS.items() if name in arguments}
    )


_NOT_HELD = object()  # a trigger that holds no timeout (a worker-first row: the sensor decided its rules)


def check_trigger_arguments(
    arguments: Mapping[str, Any], policy: Any = None, timeout: Any = _NOT_HELD, check: Any = None
) -> None:
    """A trigger's arguments by the table's rows and rules, under the sensor's names and with its messages:
    its own (``check_timeout``, ``rate_limit``), its stored schedule (``policy``: each key as the sensor
    argument it came from), the ``timeout`` when the trigger knows it (rules that need it wait otherwise), and
    a SQL ``check`` spec's values. ``WaitArgumentError`` (a ``TypeError`` too: the triggerer fails that trigger)."""
    given = dict(arguments)
    if policy is not None:
        if not isinstance(policy, Mapping):
            raise WaitArgumentError(
                f"policy must be a mapping of {', '.join(POLICY_PARAMETERS)}; got {policy!r}"
            )
        given.update(
            {POLICY_PARAMETERS[key]: value for key, value in policy.items() if key in POLICY_PARAMETERS}
        )
    if timeout is not _NOT_HELD:
        given["timeout"] = timeout
    rows: Sequence[Parameter] = PARAMETERS
    if isinstance(check, Mapping) and check.get("type") == "sql":
        # Not the criteria: importing one is the check's first step in the triggerer, where failing to is a
        # check error the wait rides out (a later deploy may fix it), not a refused argument.
        values = [row for row in SQL_PARAMETERS if row.name in check and row.name not in CRITERIA_NAMES]
        given.update({row.name: check[row.name] for row in values})
        rows = (*PARAMETERS, *values)
    try:
        # A stored splay is always set (the default is one poke_interval): the rule on a splay the user gave
        # does not apply to it.
        check_arguments(rows, given, unknown=("splay",) if timeout is not _NOT_HELD else ("splay", "timeout"))
    except ValueError as err:
        raise WaitArgumentError(str(err)) from None


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


def seconds(value: Any) -> float | None:
    """Seconds from a number or a ``timedelta``; None for anything else (a value the table rejects)."""
    if isinstance(value, datetime.timedelta):
        return units.seconds(value)
    return float(value) if _number(value) else None


def _duration(minimum: float, *, strict: bool = False, none: bool = False) -> Callable[[Any], bool]:
    def valid(value: Any) -> bool:
        if value is None:
            return none
        given = seconds(value)
        return given is not None and (given > minimum if strict else given >= minimum)

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


def _due_time(value: Any) -> bool:
    from airflow_smart_ext.timetables.due import due_time_arg  # the timetables' engine: only when given

    due_time_arg(value)  # InvalidDueTime (a ValueError) names what is wrong
    return True


def late_callbacks(on_late: Any) -> list[Callable[[Mapping[str, Any]], Any]]:
    """``on_late`` as a list: None, one callable (a function or a ``BaseNotifier``) or a list of them."""
    if on_late is None:
        return []
    return list(on_late) if isinstance(on_late, (list, tuple)) else [on_late]


_MODES = tuple(compat.locations.BaseSensorOperator.valid_modes)

#: Every parameter of ``BackoffSensor`` and of Airflow's ``BaseSensorOperator`` (one row each).
PARAMETERS: tuple[Parameter, ...] = (
    Parameter("mode", "one of " + ", ".join(repr(m) for m in _MODES), _one_of(*_MODES)),
    Parameter("soft_fail", "True or False", _is_bool),
    Parameter("never_fail", "True or False", _is_bool),
    Parameter("silent_fail", "True or False", _is_bool),
    Parameter("exponential_backoff", "True or False", _is_bool),
    Parameter(
        "poke_interval",
        ">= 0 seconds (a number or a datetime.timedelta; the first backoff interval; 0 as in Airflow: the "
        f"schedule then starts at {ZERO_POKE_INTERVAL_START:g} s)",
        _duration(0),
    ),
    Parameter(
        "timeout",
        ">= 0 seconds (a number or a datetime.timedelta)"
        + (
            ", or None for [sensors] default_timeout"
            if compat.sensor_timeouts.SENSOR_TIMEOUT_ACCEPTS_NONE
            else ""
        ),
        _duration(0, none=compat.sensor_timeouts.SENSOR_TIMEOUT_ACCEPTS_NONE),
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
    Parameter(
        "due",
        "an airflow_smart_ext.timetables.DueTime, its dict form (DueTime.to_dict()), or None",
        _due_time,
    ),
    Parameter(
        "on_late",
        "a callable taking the task's context (a function or an Airflow notifier), a list of them, or None",
        lambda value: all(callable(callback) for callback in late_callbacks(value)),
    ),
)


def is_runtime_value(value: Any) -> bool:
    """XComArg-like values (``task.output``, ``XComArg``) are resolved only at run time: checked then."""
    return hasattr(value, "resolve") and hasattr(value, "iter_references")


def has_template(value: Any) -> bool:
    """Whether a (nested) argument holds Jinja markup that must be rendered before the first check."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value or "{#" in value
    if isinstance(value, dict):
        return any(has_template(item) for item in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(has_template(item) for item in value)
    return False


def transient_errors_problem(types: tuple[type[BaseException], ...]) -> str | None:
    """The triggerer imports ``transient_errors`` by name: a class defined in a DAG file cannot travel."""
    for cls in types:
        if callable_path(cls) is None:
            return (
                f"transient_errors: {cls.__module__}.{cls.__qualname__} cannot be imported by name in the "
                f"triggerer; define it in an installed package or a module of the plugins/DAGs folder"
            )
    return None


def _template(value: Any) -> bool:
    """A template field's Jinja string: its rendered value is what the sensor uses (checked when it runs)."""
    return isinstance(value, str) and has_template(value)


def _non_empty_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _criterion(name: str) -> Callable[[Any], bool]:
    def valid(value: Any) -> bool:
        resolve_criterion(value, name)  # ValueError with the detail (a dotted path that does not import)
        return True

    return valid


def not_importable_by_name(name: str, criterion: Any) -> str:
    """The refusal of a criterion the triggerer cannot import by name (sensor and watcher alike)."""
    return (
        f"{name}={criterion!r} cannot be imported by name in the triggerer (lambdas, nested functions, partials "
        "and functions defined in a DAG file are not); use a module-level function of an installed package or "
        "plugins-folder module, or its dotted path string"
    )


def not_json(name: str, value: Any, problem: str) -> str:
    """The refusal of a value that would not reach the triggerer as it is (sensor and watcher alike)."""
    return f"{name}={value!r} does not travel to the triggerer as JSON unchanged ({problem})"


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
        for name in CRITERIA_NAMES
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
        ("on_late", "due"),
        lambda callbacks, due: due is not None or not late_callbacks(callbacks),
        "on_late needs due= (when the data is due, e.g. DueTime('09:30', market='NYSE', "
        "timezone='America/New_York')): without a due time the wait is never late and on_late is never called; "
        "got on_late={on_late!r}, due=None",
    ),
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
        ("jitter", "backoff_factor"),
        lambda jitter, factor: not (jitter == "decorrelated" and factor == 1),
        "backoff_factor=1 (fixed interval) cannot be combined with jitter='decorrelated', whose growth is AWS's "
        "fixed 3x bound; use jitter 'none', 'full' or 'equal' for a fixed interval",
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


#: ``BackoffRetryPolicy``'s schedule (Airflow >= 3.3 retries), in the policy's own names: initial and cap fall
#: back to the task's ``retry_delay`` / ``max_retry_delay`` at run time.
RETRY_SCHEDULE_PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "initial",
        "> 0 seconds (a number or a datetime.timedelta), or None for the task's retry_delay",
        _duration(0, strict=True, none=True),
    ),
    Parameter(
        "factor",
        "a finite number >= 1 (1 = fixed interval)",
        lambda value: _number(value) and value >= 1,
    ),
    Parameter(
        "cap",
        "> 0 seconds (a number or a datetime.timedelta), or None for the task's max_retry_delay",
        _duration(0, strict=True, none=True),
    ),
    Parameter("jitter", "one of " + ", ".join(JITTER_STRATEGIES), _one_of(*JITTER_STRATEGIES)),
)
RETRY_SCHEDULE_RULES: tuple[Rule, ...] = (
    Rule(
        ("cap", "initial"),
        lambda cap, initial: cap is None or initial is None or seconds(cap) >= seconds(initial),  # type: ignore[operator]
        "cap must be >= initial ({initial!r}): it caps the delay that starts at initial; got {cap!r}",
    ),
    Rule(
        ("jitter", "factor"),
        lambda jitter, factor: not (jitter == "decorrelated" and factor == 1),
        "factor=1 (fixed interval) cannot be combined with jitter='decorrelated', whose growth is AWS's "
        "fixed 3x bound; use jitter 'none', 'full' or 'equal' for a fixed interval",
    ),
)


def check_retry_schedule(arguments: Mapping[str, Any]) -> None:
    """``ValueError`` naming the parameter for the first of ``BackoffRetryPolicy``'s schedule arguments the
    table refuses (its rows, then its rules on the values as given)."""
    check_arguments(RETRY_SCHEDULE_PARAMETERS, arguments, rules=RETRY_SCHEDULE_RULES, effective=dict)


def effective_values(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The backoff parameters as the sensor will use them: defaults filled in, durations in seconds."""

    def given(name: str) -> Any:
        return arguments.get(name)

    initial = seconds(given("poke_interval")) if given("poke_interval") is not None else DEFAULT_POKE_INTERVAL
    deadline = seconds(given("timeout")) if given("timeout") is not None else default_timeout()
    splay = seconds(given("splay")) if given("splay") is not None else None  # None: one poke_interval
    if initial == 0:  # Airflow accepts 0; the schedule starts at its floor (see ZERO_POKE_INTERVAL_START)
        initial = ZERO_POKE_INTERVAL_START
        splay = 0.0 if splay is None else splay  # "no wait": the first check at once
    return {
        "soft_fail": given("soft_fail"),
        "never_fail": given("never_fail"),
        "poke_interval": initial,
        "timeout": deadline,
        "max_wait": seconds(given("max_wait")) if given("max_wait") is not None else None,
        **growth(arguments),
        "splay": splay,
    }


def growth(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``backoff_factor`` and ``jitter`` with their defaults: an explicit ``exponential_backoff=False`` asks for
    Airflow's fixed interval (factor 1, no jitter); otherwise a growing, jittered interval."""
    fixed = arguments.get("exponential_backoff") is False
    factor, jitter = arguments.get("backoff_factor"), arguments.get("jitter")
    return {
        "backoff_factor": factor if factor is not None else (1.0 if fixed else DEFAULT_BACKOFF_FACTOR),
        "jitter": jitter if jitter is not None else ("none" if fixed else DEFAULT_JITTER),
    }


def default_timeout() -> float:
    """Airflow's ``[sensors] default_timeout`` (a sensor's ``timeout=None``)."""
    return compat.locations.airflow_conf.getfloat("sensors", "default_timeout", fallback=7 * 86400)


def check_arguments(
    parameters: Sequence[Parameter],
    arguments: Mapping[str, Any],
    rules: Sequence[Rule] = RULES,
    unknown: Collection[str] = (),
    effective: Callable[[Mapping[str, Any]], Mapping[str, Any]] = effective_values,
) -> None:
    """``ValueError`` (naming the parameter and what it accepts) for the first argument the table refuses.

    Only the arguments given are checked; a missing one takes its default, unless it is ``unknown`` yet (a
    mapped sensor's argument that ``.expand()`` may still give): a rule involving it waits for that. A value
    from an upstream task's XCom is checked when the task runs, and so are the rules that involve it.
    """
    static = {name: value for name, value in arguments.items() if not is_runtime_value(value)}
    for row in parameters:
        if row.name in static:
            problem = row.problem(static[row.name])
            if problem is not None:
                raise ValueError(problem)
    waiting = set(unknown) | {name for name, value in arguments.items() if is_runtime_value(value)}
    judged = {
        **static,
        **effective(static),
    }  # (a sensor's) the schedule's defaults filled in, the rest as given
    for rule in rules:
        if waiting.intersection(rule.names):
            continue
        problem = rule.problem(judged)
        if problem is not None:
            raise ValueError(problem)


def check_timeout_seconds(value: Any) -> float | None:
    """``check_timeout`` in seconds (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    check_arguments(PARAMETERS, {"check_timeout": value}, rules=())
    return seconds(value)


def rate_limit_value(value: Any) -> float | None:
    """``rate_limit`` in checks per second (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    check_arguments(PARAMETERS, {"rate_limit": value}, rules=())
    return None if value is None else float(value)


def backoff_policy(values: Mapping[str, Any]) -> BackoffPolicy:
    """The schedule of :func:`effective_values` (already checked by the table): the cap defaults to
    ``default_max_wait(poke_interval)`` and the splay to one ``poke_interval``."""
    initial = values["poke_interval"]
    return BackoffPolicy(
        initial=initial,
        factor=float(values["backoff_factor"]),
        cap=values["max_wait"] if values["max_wait"] is not None else default_max_wait(initial),
        jitter=values["jitter"],
        splay=values["splay"] if values["splay"] is not None else initial,
    )


#: The rows a condition watcher shares with the sensor: its schedule, its check limit and its rate limit.
WATCHER_SHARED = (
    "poke_interval",
    "max_wait",
    "backoff_factor",
    "jitter",
    "splay",
    "check_timeout",
    "rate_limit",
    "transient_errors",
)


def _optional_text(value: Any) -> bool:
    return value is None or _non_empty_text(value)


def _state_key(value: Any) -> bool:
    # "#" marks the watcher's other records beside its watermark ("<key>#last-check"): no key may end in one
    return value is None or (_non_empty_text(value) and "#" not in value)


def _start_after(value: Any) -> bool:
    return value is None or isinstance(value, (str, datetime.date)) or _number(value)


#: ``ConditionWatcher``'s parameters: the sensor's rows for what it shares with a sensor, then its own.
WATCHER_PARAMETERS: tuple[Parameter, ...] = (
    *(row for row in PARAMETERS if row.name in WATCHER_SHARED),
    Parameter("value_key", "None or a non-empty key of the sensor's XCom value dict (str)", _optional_text),
    Parameter("report_first_value", "True or False", _is_bool),
    Parameter("state_key", "None (derived from the check) or a non-empty string without '#'", _state_key),
    Parameter("share", "True or False", _is_bool),
    Parameter("every_value", "True or False", _is_bool),
    Parameter(
        "start_after",
        "None, a number, text, or a date/datetime (sent as ISO text): the watermark before the first value",
        _start_after,
    ),
)
#: The rules among those parameters (a watcher has no timeout: it never ends).
WATCHER_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if set(rule.names) <= set(WATCHER_SHARED))
#: The watcher's own rules, of ``every_value``: ``condition`` is the check's type, ``success`` its SQL criterion.
EVERY_VALUE_RULES: tuple[Rule, ...] = (
    Rule(
        ("start_after", "every_value"),
        lambda after, every: after is None or every is True,
        "start_after={start_after!r} is the watermark before the first value of every_value=True; set "
        "every_value=True, or leave start_after out",
    ),
    Rule(
        ("every_value", "report_first_value"),
        lambda every, first: not (every is True and first is False),
        "report_first_value=False cannot be combined with every_value=True (every value after the watermark is "
        "reported); give start_after=<the last value not to report> instead",
    ),
    Rule(
        ("every_value", "condition", "start_after"),
        lambda every, condition, after: not (every is True and condition == "sql" and after is None),
        "every_value=True on a SQL condition needs start_after= (bound as the query's after parameter until the "
        "first value is reported; 'day > NULL' matches no row), e.g. start_after='2026-01-01' or 0",
    ),
    Rule(
        ("every_value", "success"),
        lambda every, success: not (every is True and success is not None),
        "success={success!r} cannot be combined with every_value=True, where each row the query returns is a "
        "value: put the condition in the query's WHERE clause",
    ),
)


def untemplated_problem(arguments: Mapping[str, Any]) -> str | None:
    """A watcher runs in no DAG run and renders nothing: Jinja markup the sensor would render is refused."""
    for name, value in arguments.items():
        if has_template(value):
            return (
                f"{name}={value!r} holds Jinja markup, which a condition watcher does not render (it runs in no "
                "DAG run); give the value itself"
            )
    return None


class WatcherArgumentError(WaitArgumentError):
    """A bad watcher argument (the wait model's argument error, named for the watcher's users)."""


def watcher_arguments(
    *,
    poke_interval: Any = DEFAULT_POKE_INTERVAL,
    max_wait: Any = None,
    backoff_factor: Any = DEFAULT_BACKOFF_FACTOR,
    jitter: Any = DEFAULT_JITTER,
    splay: Any = 0.0,
    value_key: Any = None,
    report_first_value: Any = True,
    check_timeout: Any = None,
    rate_limit: Any = None,
    state_key: Any = None,
    share: Any = True,
    transient_errors: Any = None,
    every_value: Any = False,
    start_after: Any = None,
    condition: str | None = None,
    success: Any = None,
) -> dict[str, Any]:
    """The watcher's schedule and behaviour arguments as JSON kwargs; ``WatcherArgumentError`` naming the
    first bad parameter and its accepted values (the wait model's table: the sensor's rows and messages).
    ``condition`` (the check's type) and ``success`` (a SQL check's criterion) are the check's, for the rules."""
    given = {
        "poke_interval": poke_interval,
        "max_wait": max_wait,
        "backoff_factor": backoff_factor,
        "jitter": jitter,
        "splay": splay,
        "check_timeout": check_timeout,
        "rate_limit": rate_limit,
        "value_key": value_key,
        "report_first_value": report_first_value,
        "state_key": state_key,
        "share": share,
        "transient_errors": transient_errors,  # checked here; the trigger imports them (DAGs folder too)
        "every_value": every_value,
        "start_after": start_after,
        "condition": condition,
        "success": success,
    }
    try:
        check_arguments(WATCHER_PARAMETERS, given, rules=(*WATCHER_RULES, *EVERY_VALUE_RULES))
        policy = backoff_policy(effective_values(given))
    except ValueError as err:
        raise WatcherArgumentError(str(err)) from None
    return {
        "policy": policy.to_dict(),
        "value_key": value_key,
        "report_first_value": report_first_value,
        "check_timeout": seconds(check_timeout),
        "rate_limit": None if rate_limit is None else float(rate_limit),
        "state_key": state_key,
        "share": share,
        "every_value": every_value,
        # as it travels (JSON) and is compared with the values (dates as ISO text)
        "start_after": start_after.isoformat() if isinstance(start_after, datetime.date) else start_after,
    }
