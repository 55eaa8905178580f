"""The Waits view's source reads each DAG's ``dagrun_timeout`` and its tasks' due times from its stored
serialized DAG (a real DB)."""

from __future__ import annotations

from typing import Any

import pytest


def test_dagrun_timeouts_and_due_times_come_from_the_latest_serialized_dag(calendars_db: Any) -> None:
    from airflow.utils.session import create_session

    from airflow_smart_ext.ui import waits_source

    with create_session() as session:
        found = waits_source._dag_facts(session, {"cal_business", "cal_cron", "no_such_dag"})
        again = waits_source._dag_facts(session, {"cal_cron"})  # a second read: the same answer
    assert {dag_id: facts.dagrun_timeout for dag_id, facts in found.items()} == {
        "cal_business": None,
        "cal_cron": 90 * 60.0,
    }
    assert again == {"cal_cron": found["cal_cron"]} and found["cal_cron"].due == {}
    business = found["cal_business"]
    zones = {task_id: [rule.due.timezone.key for rule in rules] for task_id, rules in business.due.items()}
    assert zones == {
        "prices": ["Europe/London"],
        "trades": ["America/New_York"],
        "fx": ["Europe/London", "Asia/Tokyo"],
    }
    assert business.reschedule == {"trades", "prices", "no_due", "fx"}
    assert business.due_of("prices", 3) is business.due["prices"][0].due  # .partial(due=): every instance
    assert business.due_of("fx", 1) is business.due["fx"][1].due  # .expand(due=[...]): its own
    assert business.due_of("fx", 2) is None and business.due_of("no_due", -1) is None


def test_an_unreadable_serialized_dag_costs_only_its_own_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_smart_ext.ui import waits_source

    rows = [("broken", "{not json", None), ("fine", {"dag": {"dagrun_timeout": 60.0}}, None)]
    monkeypatch.setattr(
        waits_source.compat.metadata_db, "latest_serialized_dags", lambda session, dag_ids: rows
    )
    hashes = {"broken": "hash-of-broken", "fine": "hash-of-fine"}
    monkeypatch.setattr(
        waits_source.compat.metadata_db, "latest_serialized_dag_hashes", lambda session, dag_ids: hashes
    )
    found = waits_source._dag_facts(None, {"broken", "fine"})
    assert {dag_id: facts.dagrun_timeout for dag_id, facts in found.items()} == {"broken": None, "fine": 60.0}
    assert found["broken"].due == {}


def test_a_mapped_instance_s_own_due_time_comes_before_its_task_s() -> None:
    from airflow_smart_ext.timetables import DueTime
    from airflow_smart_ext.ui.calendar_due import DueRule
    from airflow_smart_ext.ui.waits_source import DagFacts

    task, own, product = DueTime(after=60), DueTime(after=1), DueTime(after=2)
    rules = (DueRule("t", task), DueRule("t", own, map_index=1), DueRule("t", product, item=0))
    facts = DagFacts(due={"t": rules})
    assert (
        facts.due_of("t", 1) is own and facts.due_of("t", 0) is task
    )  # an .expand_kwargs() item's own first
    assert DagFacts(due={"t": rules[2:]}).due_of("t", 0) is None  # a product's item: no instance known
