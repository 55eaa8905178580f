"""The consumer helper's Airflow glue (airflow_smart_ext/consumers.py): when a value is marked, against a fake
task context and Variable store (the live proof: tests/integration/test_consumers_live.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.compat import consumers as compat_consumers
from airflow_smart_ext.consumers import every_new_value, state_variable_key
from tests.unit.consumer_helpers import event


@dataclass(frozen=True)
class FakeAsset:
    name: str


ORDERS = FakeAsset("orders")
KEY = state_variable_key("d.t", "orders")


class Killed(BaseException):
    """The task process dying (kill -9, OOM) between the body's end and the mark: nothing after it runs."""


@pytest.fixture
def airflow(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A task ``d.t`` with ``inlets=[ORDERS]``: its asset events (``.events``) and Variables (``.variables``)."""
    fake = SimpleNamespace(events=[], variables={}, kill_on_write=None, writes=0)

    def write(key: str, value: str) -> None:
        fake.writes += 1
        if fake.writes == fake.kill_on_write:
            raise Killed
        fake.variables[key] = value

    def context() -> dict[str, Any]:
        events = [SimpleNamespace(id=event_id, extra=extra) for event_id, extra in fake.events]
        return {"ti": SimpleNamespace(dag_id="d", task_id="t"), "inlet_events": {ORDERS: events}}

    # the glue is the same code on every 3.x
    monkeypatch.setattr(compat_consumers, "CONSUMERS_SUPPORTED", True)
    monkeypatch.setattr(compat.consumers, "current_task_context", context)
    monkeypatch.setattr(compat.consumers, "read_variable", fake.variables.get)
    monkeypatch.setattr(compat.consumers, "write_variable", write)
    return fake


def run(fail_on: Any = None) -> list[Any]:
    """One task run: the values it processed (a body raising for ``fail_on`` after recording it)."""
    seen = []
    for new in every_new_value(ORDERS):
        seen.append(new.value)
        if new.value == fail_on:
            raise RuntimeError("the user's code failed")
    return seen


def test_each_value_once_across_runs(airflow: Any) -> None:
    airflow.events = [event(1, 1, "d1"), event(2, 2, "d2")]
    assert run() == ["d1", "d2"]
    airflow.events += [event(3, 2, "d2", redelivered=True), event(4, 3, "d3")]
    assert run() == ["d3"]
    assert run() == []
    assert airflow.variables[KEY] == '{"format": 1, "watchers": {"": {"above": [], "through": 3}}}'


def test_a_value_is_marked_only_after_its_body_returned(airflow: Any) -> None:
    airflow.events = [event(1, 1, "d1"), event(2, 2, "d2"), event(3, 3, "d3")]
    values = every_new_value(ORDERS)
    assert next(values).value == "d1"
    assert KEY not in airflow.variables  # d1's body has not returned yet
    assert next(values).value == "d2"
    assert '"through": 1' in airflow.variables[KEY]


def test_a_failed_body_leaves_its_value_for_the_next_run(airflow: Any) -> None:
    airflow.events = [event(1, 1, "d1"), event(2, 2, "d2"), event(3, 3, "d3")]
    with pytest.raises(RuntimeError):
        run(fail_on="d2")
    assert run() == ["d2", "d3"]


def test_a_break_leaves_the_value_it_broke_on(airflow: Any) -> None:
    airflow.events = [event(1, 1, "d1"), event(2, 2, "d2")]
    for new in every_new_value(ORDERS):
        if new.value == "d2":
            break
    assert run() == ["d2"]


def test_a_crash_between_a_value_and_its_mark_processes_that_value_again(airflow: Any) -> None:
    """The window the helper cannot close (docs/watchers.md): d2's work done, the task killed before d2's mark."""
    airflow.events = [event(1, 1, "d1"), event(2, 2, "d2"), event(3, 3, "d3")]
    airflow.kill_on_write = 2
    with pytest.raises(Killed):
        run()
    airflow.kill_on_write = None
    assert run() == ["d2", "d3"]  # d2 twice in all, d1 once


def test_consumers_keep_separate_records(airflow: Any) -> None:
    airflow.events = [event(1, 1, "d1")]
    assert run() == ["d1"]
    assert [new.value for new in every_new_value(ORDERS, consumer="other")] == ["d1"]
    assert state_variable_key("other", "orders") in airflow.variables


def test_the_asset_must_be_an_inlet(airflow: Any) -> None:
    with pytest.raises(ValueError, match=r"inlets=\[asset\]"):
        next(every_new_value(FakeAsset("not_an_inlet")))


def test_refused_before_3_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat_consumers, "CONSUMERS_SUPPORTED", False)
    values: Iterator[Any] = every_new_value(ORDERS)
    with pytest.raises(
        compat.consumers.ConsumersUnsupported, match=r"needs Airflow >= 3\.3\.0.*seq starts again at 1"
    ):
        next(values)


def test_two_values_for_one_pair_are_logged(airflow: Any, caplog: pytest.LogCaptureFixture) -> None:
    airflow.events = [event(1, 1, "a1"), event(2, 1, "b1")]
    with caplog.at_level("WARNING", logger="airflow_smart_ext.consumers"):
        assert run() == ["a1"]
    assert "asset orders: events [1, 2] carry different values for watcher '' seq 1" in caplog.text
