"""Trigger queues by condition: identical waits meet in one triggerer across the cluster (issue 25)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import sharing_key
from airflow_smart_ext.triggers import routing
from tests.unit.clock import START, FakeClock
from tests.unit.sensors.helpers import Deferred, FakeTI, PathSensor, capture_defer, make_context

QUEUES = "smart-ext-a,smart-ext-b,smart-ext-c"


def deferred_queue(path: str, task_id: str, dag_id: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    sensor = PathSensor(task_id=task_id, path=path, deferrable=True, poke_interval=10, timeout=600)
    capture_defer(sensor, monkeypatch)
    with pytest.raises(Deferred) as err:
        sensor.execute(make_context(FakeTI(dag_id=dag_id, task_id=task_id)))
    return sensor.queue, err.value.kwargs["trigger"].check


def test_queue_of_a_condition_is_stable_and_spreads() -> None:
    queues = routing.parse_queues(QUEUES)
    keys = [f"condition-{i}" for i in range(300)]
    assert [routing.queue_for(k, queues) for k in keys] == [routing.queue_for(k, queues) for k in keys]
    spread = Counter(routing.queue_for(k, queues) for k in keys)
    assert set(spread) == set(queues) and min(spread.values()) > 60  # roughly even, every queue used


@pytest.mark.parametrize(
    "text", ["a,a", "a b,c", "x" * 257, "q1,\tq2 q3"], ids=["repeat", "space", "too long", "tab"]
)
def test_bad_queue_lists_are_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"\[smart_ext\] trigger_queues must be distinct"):
        routing.parse_queues(text)


def test_no_queues_configured_routes_nothing(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__SMART_EXT__TRIGGER_QUEUES", raising=False)
    queue, _ = deferred_queue("/p", "a", "d", monkeypatch)
    assert queue == PathSensor(task_id="x", path="/p").queue  # the operator's own queue, untouched


@pytest.mark.skipif(
    not compat.versions.AIRFLOW_V_3_2_PLUS, reason="trigger queues are an Airflow 3.2+ feature"
)
def test_identical_waits_of_any_dag_go_to_one_queue(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__TRIGGER_QUEUES", QUEUES)
    monkeypatch.setenv("AIRFLOW__TRIGGERER__QUEUES_ENABLED", "True")
    queues = routing.parse_queues(QUEUES)
    routed: dict[str, set[str]] = {}
    for i in range(12):
        path = f"/data/{i % 4}"  # 4 conditions, 3 waits each, in different DAGs and tasks
        queue, check = deferred_queue(path, f"t{i}", f"dag{i}", monkeypatch)
        assert queue == routing.queue_for(sharing_key(check), queues)
        routed.setdefault(path, set()).add(queue)
    assert all(len(found) == 1 for found in routed.values())  # one condition, one queue


def test_queues_set_where_airflow_cannot_route_warn_and_route_nothing(
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW__SMART_EXT__TRIGGER_QUEUES", QUEUES)
    monkeypatch.setenv("AIRFLOW__TRIGGERER__QUEUES_ENABLED", "False")
    reason = compat.deferral.trigger_queue_unavailable()
    assert reason is not None
    with caplog.at_level(logging.WARNING):
        queue, _ = deferred_queue("/p", "a", "d", monkeypatch)
    assert queue not in routing.parse_queues(QUEUES)
    logged = caplog.text + "".join(capsys.readouterr())  # the task logger: stdlib (2.11) or structlog (3.x)
    assert "trigger_queues is set but not used" in logged and reason in logged


def test_started_at_is_unchanged_by_routing(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing moves the trigger only: the wait's schedule and deadline are the same either way."""
    monkeypatch.delenv("AIRFLOW__SMART_EXT__TRIGGER_QUEUES", raising=False)
    clock.now = START + 3
    _, plain = deferred_queue("/p", "a", "d", monkeypatch)
    monkeypatch.setenv("AIRFLOW__SMART_EXT__TRIGGER_QUEUES", QUEUES)
    monkeypatch.setenv("AIRFLOW__TRIGGERER__QUEUES_ENABLED", "True")
    _, routed_check = deferred_queue("/p", "a", "d", monkeypatch)
    assert sharing_key(plain) == sharing_key(routed_check)


def test_a_bad_queue_list_is_logged_and_the_wait_goes_on_unrouted(
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A deployment setting, not a DAG mistake: every deferrable sensor's try must not fail over it."""
    monkeypatch.setenv("AIRFLOW__SMART_EXT__TRIGGER_QUEUES", "a,a")
    monkeypatch.setenv("AIRFLOW__TRIGGERER__QUEUES_ENABLED", "True")
    with caplog.at_level(logging.ERROR):
        queue, _ = deferred_queue("/p", "a", "d", monkeypatch)  # still deferred
    assert queue != "a"
    logged = caplog.text + "".join(capsys.readouterr())
    assert "trigger_queues must be distinct" in logged and "goes to any triggerer" in logged
