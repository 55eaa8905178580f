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
from airflow_smart_ext.sensors import BackoffSqlSensor, late
from airflow_smart_ext.wait_model.parameters import RULES, Parameter, Rule, backoff_policy, effective_values
from tests.unit.wait_model.examples import COMPANIONS, EXAMPLES, REQUIRED, RULE_EXAMPLES

ROWS: dict[str, Parameter] = {row.name: row for row in BackoffSqlSensor.parameter_table()}
FORMS = ("plain", "partial", "expand", "expand_kwargs")


def _build(form: str, arguments: dict[str, Any]) -> Any:
    """Build the sensor in one of the four forms; the last argument is the mapped one in the mapped forms.

    Returns what the form builds: the sensor, the ``.partial()``, or the mapped operator."""
    from airflow import DAG

    arguments = {**REQUIRED, **arguments}
    if form == "plain":
        return BackoffSqlSensor(task_id="s", **arguments)
    if form == "partial":
        return BackoffSqlSensor.partial(task_id="s", **arguments)
    mapped_name = list(arguments)[-1]
    fixed = {name: value for name, value in arguments.items() if name != mapped_name}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "never mapped" for a partial whose expand was refused
        with DAG("mapped_table", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
            partial = BackoffSqlSensor.partial(task_id="s", **fixed)
            if form == "expand":
                return partial.expand(**{mapped_name: [arguments[mapped_name]]})
            return partial.expand_kwargs([{mapped_name: arguments[mapped_name]}])


def _sensor_at_run_time(form: str, arguments: dict[str, Any]) -> Any:
    """The sensor the form runs: the plain constructor's, or the one the mapped task's first instance unmaps
    to, from what the form holds (its ``.partial()`` kwargs and its first expanded item)."""
    from airflow import DAG

    built = _build(form, arguments)
    if form == "plain":
        return built
    if form == "partial":
        # The partial keeps every argument as given, for the constructor that runs with the task (a DueTime
        # in its dict form, which the serialized DAG keeps as it is).
        assert {name: built.kwargs[name] for name in arguments} == late.partial_kwargs(arguments)
        with DAG("mapped_table", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
            built = built.expand_kwargs([{}])
    expanded = built.expand_input.value
    first = {name: values[0] for name, values in expanded.items()} if form == "expand" else expanded[0]
    return built.unmap(first)


def _kept(sensor: Any) -> dict[str, Any]:
    """What a sensor keeps of its arguments: every row's attribute and the schedule it follows."""
    return {
        "type": type(sensor),
        "task_id": sensor.task_id,
        "backoff_policy": sensor.backoff_policy,
        **{name: getattr(sensor, name, "<missing>") for name in ROWS},
    }


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
    assert_same_sensor_as_plain(form, {**COMPANIONS.get(name, {}), name: value})


def assert_same_sensor_as_plain(form: str, arguments: dict[str, Any]) -> None:
    """Every form runs the sensor the plain constructor builds, and that sensor follows the schedule the
    table's effective values of these arguments give (an accepted value is used, not dropped)."""
    given = {**REQUIRED, **arguments}
    sensor = _sensor_at_run_time(form, arguments)
    assert isinstance(sensor, BackoffSqlSensor)
    assert (sensor.task_id, sensor.conn_id, sensor.sql) == ("s", given["conn_id"], given["sql"])
    assert sensor.backoff_policy == backoff_policy(effective_values(arguments))
    assert _kept(sensor) == _kept(BackoffSqlSensor(task_id="s", **given))


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
    assert_same_sensor_as_plain(form, arguments)


def test_airflows_own_checks_agree_with_the_table() -> None:
    """The table runs before Airflow's own checks; Airflow refuses what the table refuses for its rows."""
    with pytest.raises(ValueError, match="mutually exclusive"):
        compat.locations.BaseSensorOperator(task_id="airflow", soft_fail=True, never_fail=True)
    with pytest.raises(
        (ValueError, compat.locations.AirflowException), match="mode"
    ):  # 2.11: AirflowException
        compat.locations.BaseSensorOperator(task_id="airflow", mode="bogus")
