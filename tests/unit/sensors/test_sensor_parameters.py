"""The parameter table is the one source of truth: tests generated from its rows prove that the plain
constructor and a mapped sensor's ``.partial()`` / ``.expand()`` / ``.expand_kwargs()`` reject the same values
with the same message (naming the parameter and what it accepts) and accept the same values.

Each row of the table needs examples here (``test_every_row_has_examples``): a new row is a new entry.
"""

from __future__ import annotations

import datetime
import warnings
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.sensors import BackoffSqlSensor
from airflow_smart_ext.sensors.parameters import RULES, Parameter, Rule

SECONDS = datetime.timedelta(seconds=5)
REQUIRED = {"conn_id": "my_db", "sql": "select 1"}

#: name -> (accepted values, refused values)
EXAMPLES: dict[str, tuple[list[Any], list[Any]]] = {
    "mode": (["poke", "reschedule"], ["bogus", None, "deferrable"]),
    "soft_fail": ([True, False], ["yes", 1, None]),
    "never_fail": ([True, False], ["yes", 0]),
    "silent_fail": ([True, False], ["no", 1]),
    "exponential_backoff": ([True, False], ["yes", None]),
    "poke_interval": ([5, 2.5, SECONDS], [0, -1, "5", None, True, float("inf")]),
    "timeout": (
        [3600, datetime.timedelta(hours=1), *([None] if compat.SENSOR_TIMEOUT_ACCEPTS_NONE else [])],
        [-1, "1h", float("nan"), *([] if compat.SENSOR_TIMEOUT_ACCEPTS_NONE else [None])],
    ),
    "max_wait": ([None, 600, datetime.timedelta(minutes=10)], [-1, "10m"]),
    "backoff_factor": ([None, 1, 2.5, 10], [0.5, 11, "2", True, float("inf")]),
    "jitter": ([None, "none", "full", "equal", "decorrelated"], ["random", 1]),
    "splay": ([None, 0, 5, SECONDS], [-1, "soon"]),
    "deferrable": ([None, False, True], ["yes", 1]),
    "deferrable_fallback": ([None, "reschedule"], ["poke", True]),
    "transient_errors": (
        [None, [LookupError], ["builtins.LookupError"], "builtins.LookupError"],
        [["no.such.Error"], [int], 5],
    ),
    "check_timeout": ([None, 5, SECONDS], [0, -1, "5"]),
    "rate_limit": ([None, 0.5, 2], [0, -1, "fast", True]),
    "start_from_trigger": ([None, True, False], ["yes", 1]),
    "conn_id": (["my_db", "{{ var.value.conn }}"], [None, 5, "", "  "]),
    "sql": (["select 1", "query.sql"], [None, "", 5]),
    "parameters": ([None, {"a": 1}, [1, 2], "{{ dag_run.conf['params'] }}"], ["a=1", 5]),
    "success": ([None, "builtins.bool", bool], [5, "no.such.criterion"]),
    "failure": ([None, "builtins.bool"], [5, "no.such.criterion"]),
    "selector": ([None, "builtins.len"], [5, "no_dots"]),
    "fail_on_empty": ([True, False], ["yes", None]),
    "hook_params": ([None, {"a": 1}, "{{ params.hook }}"], [[1], "x"]),
}

#: rule names -> (accepted combinations, refused combinations)
RULE_EXAMPLES: dict[tuple[str, ...], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    ("soft_fail", "never_fail"): (
        [{"soft_fail": True, "never_fail": False}, {"soft_fail": False, "never_fail": True}],
        [{"soft_fail": True, "never_fail": True}],
    ),
    ("max_wait", "poke_interval"): (
        [{"max_wait": 10, "poke_interval": 10}],
        [{"max_wait": 5, "poke_interval": 10}, {"max_wait": SECONDS, "poke_interval": 10}],
    ),
    # the default splay (one poke_interval) is never held against a shorter timeout: only a given one
    ("splay", "timeout"): (
        [{"splay": 60, "timeout": 60}, {"poke_interval": 60, "timeout": 10}, {"timeout": 10}],
        [{"splay": 61, "timeout": 60}],
    ),
    ("jitter", "timeout", "poke_interval"): (
        [{"jitter": "decorrelated", "timeout": 86400, "poke_interval": 60}],
        [{"jitter": "decorrelated", "timeout": 7 * 86400, "poke_interval": 0.01}],
    ),
}

ROWS: dict[str, Parameter] = {row.name: row for row in BackoffSqlSensor.parameter_table()}
FORMS = ("plain", "partial", "expand", "expand_kwargs")


def _build(form: str, arguments: dict[str, Any]) -> None:
    """Build the sensor in one of the four forms; the last argument is the mapped one in the mapped forms."""
    from airflow import DAG

    arguments = {**REQUIRED, **arguments}
    if form == "plain":
        BackoffSqlSensor(task_id="s", **arguments)
        return
    if form == "partial":
        BackoffSqlSensor.partial(task_id="s", **arguments)
        return
    mapped_name = list(arguments)[-1]
    fixed = {name: value for name, value in arguments.items() if name != mapped_name}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "never mapped" for a partial whose expand was refused
        with DAG("mapped_table", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
            partial = BackoffSqlSensor.partial(task_id="s", **fixed)
            if form == "expand":
                partial.expand(**{mapped_name: [arguments[mapped_name]]})
            else:
                partial.expand_kwargs([{mapped_name: arguments[mapped_name]}])


def _refusal(form: str, arguments: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as err:
        _build(form, arguments)
    message = str(err.value)
    # the mapped forms say where: "Task 's', .expand(name=...) item 0: <the constructor's message>"
    return message.split(": ", 1)[1] if message.startswith("Task 's', .expand") else message


def test_every_row_has_examples() -> None:
    assert set(EXAMPLES) == set(ROWS)
    assert set(RULE_EXAMPLES) == {rule.names for rule in RULES}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, (_good, bad) in EXAMPLES.items() for value in bad], ids=repr
)
def test_refused_values_are_refused_alike_with_the_tables_message(form: str, name: str, value: Any) -> None:
    row = ROWS[name]
    message = _refusal(form, {name: value})
    assert message.startswith(f"{name} must be {row.accepts}; got {value!r}")
    assert message == _refusal("plain", {name: value})


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, (good, _bad) in EXAMPLES.items() for value in good], ids=repr
)
def test_accepted_values_are_accepted_alike(form: str, name: str, value: Any) -> None:
    _build(form, {name: value})


def _rule(names: tuple[str, ...]) -> Rule:
    return next(rule for rule in RULES if rule.names == names)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("names", "arguments"),
    [(names, arguments) for names, (_good, bad) in RULE_EXAMPLES.items() for arguments in bad],
    ids=repr,
)
def test_rules_refuse_alike(form: str, names: tuple[str, ...], arguments: dict[str, Any]) -> None:
    message = _refusal(form, arguments)
    assert all(name in message for name in _rule(names).names)
    assert message == _refusal("plain", arguments)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("names", "arguments"),
    [(names, arguments) for names, (good, _bad) in RULE_EXAMPLES.items() for arguments in good],
    ids=repr,
)
def test_rules_accept_alike(form: str, names: tuple[str, ...], arguments: dict[str, Any]) -> None:
    _build(form, arguments)


def test_airflows_own_checks_agree_with_the_table() -> None:
    """The table runs before Airflow's own checks; Airflow refuses what the table refuses for its rows."""
    with pytest.raises(ValueError, match="mutually exclusive"):
        compat.BaseSensorOperator(task_id="airflow", soft_fail=True, never_fail=True)
    with pytest.raises((ValueError, compat.AirflowException), match="mode"):  # 2.11: AirflowException
        compat.BaseSensorOperator(task_id="airflow", mode="bogus")
