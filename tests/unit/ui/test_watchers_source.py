"""The Waits view's watchers from a real migrated metadata DB (ui/watchers_source.py), and in the CLI: our
watcher rows only, their asset, holder, newest event and (3.3+) watermark; a bound value never shows."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet

from airflow_smart_ext import compat
from airflow_smart_ext.wait_model.deferral_paths import CONDITION_WATCHER
from airflow_smart_ext.wait_model.watcher_state import state_store_key
from tests.unit.helpers import KeyedFernet

pytestmark = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED, reason="asset watchers: Airflow >= 3.0"
)

#: A value the DAG read at parse (a Variable): the api-server's masker never saw it.
SECRET = "wsrc-51e0-never-shown"


def _utc(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)


@pytest.fixture
def watchers_db(airflow_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Two assets: ``orders`` watched by one of our watchers (held by a live triggerer job; its newest event
    ours, seq 3) and ``other`` watched by another trigger class (not ours: not shown)."""
    from airflow.jobs.job import Job
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import delete, insert

    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    monkeypatch.setattr(compat.locations, "get_fernet", lambda: KeyedFernet(Fernet.generate_key()))
    now = time.time()
    watcher = ConditionWatcher(
        sql_condition("warehouse", "SELECT max(day) FROM t WHERE k = :k", parameters={"k": SECRET})
    )
    _, kwargs = watcher.serialize()
    key = state_store_key(kwargs["check"], None, None)
    with create_session() as session:
        job = session.execute(
            insert(Job.__table__).values(
                job_type="TriggererJob",
                state="running",
                hostname="watch-host",
                start_date=_utc(now - 60),
                latest_heartbeat=_utc(now - 1),
            )
        ).inserted_primary_key[0]
        orders, other = AssetModel(name="orders", uri="orders"), AssetModel(name="other", uri="other")
        session.add_all([orders, other])
        ours = Trigger(classpath=CONDITION_WATCHER, kwargs=kwargs)
        theirs = Trigger(classpath="somebody.else.Trigger", kwargs={})
        session.add_all([ours, theirs])
        session.flush()
        ours.triggerer_id = job
        broken = Trigger(
            classpath=CONDITION_WATCHER, kwargs=kwargs
        )  # its kwargs then unreadable: another key
        session.add(broken)
        session.flush()
        broken.encrypted_kwargs, broken.triggerer_id = "gAAAAA-not-a-token", job
        link, named = compat.asset_watchers.asset_watcher_links()  # 3.0-3.1: asset_trigger, no watcher name
        for name, asset_id, trigger_id in (
            ("orders_loaded", orders.id, ours.id),
            ("theirs", other.id, theirs.id),
            ("orders_broken", orders.id, broken.id),
        ):
            row = {
                "asset_id": asset_id,
                "trigger_id": trigger_id,
                **({"name": name} if named is not None else {}),
            }
            session.execute(insert(link).values(**row))
        session.add(
            AssetEvent(asset_id=orders.id, extra={"from_trigger": True, "payload": {"value": "d2", "seq": 2}})
        )
        session.flush()
        session.add(
            AssetEvent(
                asset_id=orders.id,
                extra={"from_trigger": True, "payload": {"value": "d3", "seq": 3, "redelivered": False}},
            )
        )
        if compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED:
            from airflow.models.asset_state_store import AssetStateStoreModel

            record = {"format": 1, "value": "d3", "seq": 3}
            session.add(AssetStateStoreModel(asset_id=orders.id, key=key, value=json.dumps(record)))
        ids = {"job": job, "assets": [orders.id, other.id], "triggers": [ours.id, theirs.id, broken.id]}
    yield {"now": now, "key": key, "ours": ours.id, "broken": broken.id, **ids}
    with create_session() as session:
        session.execute(delete(compat.asset_watchers.asset_watcher_links()[0]))
        session.execute(delete(AssetEvent.__table__).where(AssetEvent.asset_id.in_(ids["assets"])))
        session.execute(delete(AssetModel.__table__).where(AssetModel.id.in_(ids["assets"])))
        session.execute(delete(Trigger.__table__).where(Trigger.id.in_(ids["triggers"])))
        session.execute(delete(Job.__table__).where(Job.id == ids["job"]))


def test_the_source_reads_our_watchers_only(watchers_db: dict[str, Any]) -> None:
    from airflow.utils.session import create_session

    from airflow_smart_ext.ui.waits_source import load_triggerers
    from airflow_smart_ext.ui.watchers_report import UNREADABLE, watcher_rows
    from airflow_smart_ext.ui.watchers_source import load_watchers

    with create_session() as session:
        watchers = load_watchers(session)
        triggerers = load_triggerers(session, watchers_db["now"])
    rows = {row["trigger_id"]: row for row in watcher_rows(watchers, triggerers, watchers_db["now"])}
    ours, broken = watchers_db["ours"], watchers_db["broken"]
    assert set(rows) == {ours, broken}  # not the other class's watcher
    assert rows[broken]["condition"] == UNREADABLE and rows[broken]["last_event_seq"] == 3
    row = rows[ours]
    # 3.2+ keeps the AssetWatcher's name; 3.0-3.1 link an asset to a trigger only
    name = "orders_loaded" if compat.asset_watchers.asset_watcher_links()[1] is not None else None
    assert (row["asset"], row["watcher"], row["state_key"]) == ("orders", name, watchers_db["key"])
    assert (row["last_event_seq"], row["last_event_value"]) == (3, "d3")  # the newest event
    assert row["served_by"]["job_id"] == watchers_db["job"] and row["unserved_reason"] is None
    if compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED:
        assert (row["last_seq"], row["last_value"]) == (3, "d3") and row["watermark_updated_at"]
    else:
        assert row["last_seq"] is None
    assert "{'k': '***'}" in row["condition"] and SECRET not in json.dumps(row)


def test_the_cli_lists_the_watchers(watchers_db: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_smart_ext.waits import main

    assert main([]) == 0
    table = capsys.readouterr().out
    lines = [line for line in table.splitlines() if line.startswith("orders ") and "unreadable" not in line]
    (line,) = lines
    assert '"d3"' in line and f"job {watchers_db['job']}@watch-host" in line
    assert main(["--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    trigger_ids = sorted(w["trigger_id"] for w in printed["watchers"])
    assert trigger_ids == sorted([watchers_db["ours"], watchers_db["broken"]])
    assert printed["summary"]["watchers"] == 2 and printed["summary"]["unserved_watchers"] == 0
    assert SECRET not in table and SECRET not in json.dumps(printed)
