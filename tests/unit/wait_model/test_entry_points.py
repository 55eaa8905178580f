"""Every entry point of a wait decides every row of the parameter table alike, with the same message.

Generated from the table's examples (``examples.py``): for each row an entry point takes, each refused value is
refused there with exactly the message the plain ``BackoffSqlSensor`` gives, and each accepted value is
accepted. The entry points: ``BackoffSqlSensor`` (plain; its mapped forms: ``test_sensor_parameters.py``),
``ConditionWatcher`` and ``sql_condition`` (the watcher), and ``BackoffTrigger`` (a trigger built by hand or
from a row). A watcher that refuses a value is a ``WatcherArgumentError`` (a ``TypeError`` too: the triggerer
fails only that trigger).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.sensors import BackoffSqlSensor
from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher
from airflow_smart_ext.triggers.worker_first import BackoffTrigger
from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger
from airflow_smart_ext.wait_model.parameters import (
    POLICY_PARAMETERS,
    WATCHER_PARAMETERS,
    WATCHER_RULES,
    WaitArgumentError,
    has_template,
    watcher_arguments,
)
from airflow_smart_ext.watchers import sql_condition
from tests.unit.helpers import sql_check
from tests.unit.wait_model.examples import EXAMPLES, REQUIRED, RULE_EXAMPLES

#: The watcher's own rows (the others are the sensor's rows, with the sensor's examples).
WATCHER_EXAMPLES: dict[str, tuple[list[Any], list[Any]]] = {
    "value_key": ([None, "day"], ["", "  ", 5]),
    "report_first_value": ([True, False], ["yes", None, 1]),
    "state_key": ([None, "orders"], ["", " ", 5, "orders#last-check"]),
    "share": ([True, False], ["no", None]),
    # True needs start_after on a SQL condition: EVERY_VALUE_RULES (tests/unit/triggers/test_every_value.py)
    "every_value": ([False], ["yes", None, 1]),
    "start_after": ([None], [True, [1], {"day": 1}, float("nan")]),
}
SQL_CONDITION_ROWS = ("conn_id", "sql", "parameters", "hook_params", "selector", "success")
TRIGGER_ROWS = ("check_timeout", "rate_limit")
SQL_CHECK = sql_check()


def _sensor(arguments: dict[str, Any]) -> BackoffSqlSensor:
    return BackoffSqlSensor(task_id="s", **{**REQUIRED, **arguments})


def _watcher(arguments: dict[str, Any]) -> dict[str, Any]:
    """The schedule the watcher follows (its policy as stored)."""
    if compat.versions.AIRFLOW_V_3_0_PLUS:
        watcher = ConditionWatcher(sql_condition("warehouse", "SELECT max(day) FROM t"), **arguments)
        return watcher.policy.to_dict()
    # 2.11 has no asset watchers: the arguments' check ConditionWatcher runs first, alone
    return watcher_arguments(**arguments)["policy"]


def _sql_condition(arguments: dict[str, Any]) -> None:
    sql_condition(**{**REQUIRED, **arguments})


def _trigger(arguments: dict[str, Any]) -> None:
    policy = {"initial": 60.0, "factor": 2.0, "cap": 600.0, "jitter": "full", "splay": 0.0}
    BackoffTrigger(check=dict(SQL_CHECK), policy=policy, seed="s", started_at=0.0, deadline=None, **arguments)


#: The stored schedule's keys under the sensor's names (``parameters.POLICY_PARAMETERS``).
POLICY_ROWS = tuple(POLICY_PARAMETERS.values())
#: The SQL check spec's values a trigger decides by the table (the criteria are imported when checking).
CHECK_ROWS = ("conn_id", "sql", "parameters", "hook_params", "fail_on_empty")
_POLICY = {"initial": 60.0, "factor": 2.0, "cap": 600.0, "jitter": "full", "splay": 0.0}
_KEY_OF = {name: key for key, name in POLICY_PARAMETERS.items()}


def _policy(arguments: dict[str, Any]) -> dict[str, Any]:
    return {**_POLICY, **{_KEY_OF[name]: value for name, value in arguments.items() if name in _KEY_OF}}


def _trigger_schedule(arguments: dict[str, Any]) -> None:
    BackoffTrigger(check=dict(SQL_CHECK), policy=_policy(arguments), seed="s", started_at=0.0, deadline=None)


def _trigger_check(arguments: dict[str, Any]) -> None:
    BackoffTrigger(
        check={**SQL_CHECK, **arguments}, policy=dict(_POLICY), seed="s", started_at=0.0, deadline=None
    )


def _start_trigger(arguments: dict[str, Any]) -> None:
    start = {"check": dict(SQL_CHECK), "fields": {}, "policy": _policy(arguments), "timeout": 3600.0}
    start.update({name: value for name, value in arguments.items() if name not in _KEY_OF})
    BackoffStartTrigger(start)


ENTRY_POINTS: dict[str, tuple[Callable[[dict[str, Any]], object], tuple[str, ...]]] = {
    "watcher": (_watcher, tuple(row.name for row in WATCHER_PARAMETERS)),
    "sql_condition": (_sql_condition, SQL_CONDITION_ROWS),
    "trigger": (_trigger, TRIGGER_ROWS),
    "trigger's schedule": (_trigger_schedule, POLICY_ROWS),
    "trigger's check": (_trigger_check, CHECK_ROWS),
    "start trigger": (_start_trigger, (*POLICY_ROWS, "timeout", *TRIGGER_ROWS)),
}
#: A stored row holds concrete values: no "default" (None) for a schedule key but the cap, a timeout in seconds.
STORED_ENTRIES = ("trigger's schedule", "start trigger")


def _storable(entry: str, name: str, value: Any) -> bool:
    if entry not in STORED_ENTRIES:
        return True
    if name == "timeout":
        return isinstance(value, (int, float))
    if name == "poke_interval" and value == 0:  # stored as the schedule's start (1 s), never as 0
        return False
    return value is not None or name == "max_wait"


def _message(build: Callable[[dict[str, Any]], object], arguments: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as err:
        build(arguments)
    return str(err.value)


def _cases(accepted: bool) -> list[tuple[str, str, Any]]:
    cases = []
    for entry, (_build, rows) in ENTRY_POINTS.items():
        for name in rows:
            good, bad = {**EXAMPLES, **WATCHER_EXAMPLES}[name]
            cases += [
                (entry, name, value)
                for value in (good if accepted else bad)
                if not accepted or _storable(entry, name, value)
            ]
    return cases


def test_every_row_of_every_entry_point_has_examples() -> None:
    for _build, rows in ENTRY_POINTS.values():
        assert set(rows) <= set(EXAMPLES) | set(WATCHER_EXAMPLES)
    assert set(WATCHER_EXAMPLES) == {row.name for row in WATCHER_PARAMETERS} - set(EXAMPLES)


@pytest.mark.parametrize(("entry", "name", "value"), _cases(accepted=False), ids=repr)
def test_refused_values_are_refused_with_the_sensors_message(entry: str, name: str, value: Any) -> None:
    build, _rows = ENTRY_POINTS[entry]
    message = _message(build, {name: value})
    if name in WATCHER_EXAMPLES:  # no sensor row: the table's own words
        row = next(row for row in WATCHER_PARAMETERS if row.name == name)
        assert message == f"{name} must be {row.accepts}; got {value!r}"
    else:
        assert message == _message(_sensor, {name: value})
    if (
        entry != "sql_condition" or compat.versions.AIRFLOW_V_3_0_PLUS
    ):  # built in the triggerer: one trigger fails
        with pytest.raises(WaitArgumentError):  # a TypeError too: Airflow fails only that trigger
            build({name: value})


@pytest.mark.parametrize(("entry", "name", "value"), _cases(accepted=True), ids=repr)
def test_accepted_values_are_accepted(entry: str, name: str, value: Any) -> None:
    build, _rows = ENTRY_POINTS[entry]
    if entry == "sql_condition" and has_template(value):  # a watcher renders nothing: refused, saying so
        assert "holds Jinja markup, which a condition watcher does not render" in _message(
            build, {name: value}
        )
        return
    build({name: value})


@pytest.mark.parametrize(
    "arguments", [arguments for rule in WATCHER_RULES for arguments in RULE_EXAMPLES[rule.names][1]], ids=repr
)
def test_the_watchers_rules_refuse_with_the_sensors_message(arguments: dict[str, Any]) -> None:
    assert _message(_watcher, arguments) == _message(_sensor, arguments)


@pytest.mark.parametrize(
    "arguments", [arguments for rule in WATCHER_RULES for arguments in RULE_EXAMPLES[rule.names][0]], ids=repr
)
def test_the_watchers_rules_accept_what_the_sensor_accepts(arguments: dict[str, Any]) -> None:
    """Both accept the combination and make the same schedule of it (the watcher's own default splay: none)."""
    assert _watcher(arguments) == _sensor({"splay": 0, **arguments}).backoff_policy.to_dict()


def test_a_watchers_schedule_is_the_sensors_for_the_same_arguments() -> None:
    """The same arguments give the same policy (the watcher keeps its own default splay: none)."""
    arguments = {"poke_interval": datetime.timedelta(seconds=30), "backoff_factor": 3, "jitter": "equal"}
    sensor = BackoffSqlSensor(task_id="s", splay=0, **REQUIRED, **arguments)
    assert watcher_arguments(**arguments)["policy"] == sensor.backoff_policy.to_dict()


#: The rules a stored schedule can break by itself (the others need a value the row does not hold).
POLICY_RULES = [
    ("max_wait", "poke_interval"),
    ("jitter", "backoff_factor"),
    ("jitter", "timeout", "poke_interval"),
]


@pytest.mark.parametrize("entry", ["trigger's schedule", "start trigger"])
@pytest.mark.parametrize("arguments", [a for rule in POLICY_RULES for a in RULE_EXAMPLES[rule][1]], ids=repr)
def test_a_triggers_schedule_breaking_a_rule_is_refused_with_the_sensors_message(
    entry: str, arguments: dict[str, Any]
) -> None:
    if entry == "trigger's schedule" and "timeout" in arguments:
        pytest.skip("a worker-first trigger holds no timeout: the sensor decided that rule at parse")
    build, _rows = ENTRY_POINTS[entry]
    assert _message(build, arguments) == _message(_sensor, arguments)
