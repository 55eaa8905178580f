"""A condition watcher's absence alert across a clock change (issue 45), in a real Airflow 3.3: its due time of
day keeps its local time when the clocks go forward between the watcher's start and its due time.

As in ``test_due_clock_change_live.py``, the test controls the zone, not the wall clock: ``SmartExt/Shift`` is a
TZif file it writes (Airflow's components find it through ``PYTHONTZPATH``), whose clocks go from -05:00 to
-04:00 ``CHANGE_LEAD`` seconds after the DAG file is written. The watcher (every day a business day) sees no
value and is due at the local time of day ``AFTER_CHANGE`` seconds after the change; its ``on_late`` writes each
alert to a file (tests/integration/dags/wl_clock_alerts.py).

Proven: it began before the change and says once that it is late, for the due time at that local time in the
new offset (the old offset would make it an hour later), within a minute of it (a check at least every 4 s),
and not again over the next checks; the record in Airflow's asset state store says that due time was told.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_harness.state import TEST_DAGS_DIR
from airflow_smart_ext import compat
from tests.integration.live import (
    SHIFT_AFTER,
    absence_record,
    add_connection_fields,
    epoch,
    shift_zone_env,
    watchers_running,
    write_shift_zone,
)

pytestmark = [
    pytest.mark.skipif(
        not compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED,
        reason="the asset state store (AIP-103) needs Airflow >= 3.3 (a watcher's due=; its refusal before 3.3 "
        "is unit-tested)",
    ),
    pytest.mark.timeout(600),
]

#: s from writing the DAG file to the change: parsing it, unpausing and starting the watcher on a loaded machine
CHANGE_LEAD = 150
AFTER_CHANGE = 30  # s from the change to the due time
CHECK_SECONDS = 4.0  # the watcher's max_wait: a check at least this often
ASSET, CONN_ID, DAG_ID = "wc_orders", "wc_sqlite", "wc_clock_change"
DAG_FILE = """
import datetime as dt

import wl_clock_alerts
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher

from airflow_smart_ext.timetables import DueTime
from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

watcher = ConditionWatcher(
    sql_condition("wc_sqlite", "SELECT max(day) FROM orders"),
    poke_interval=2,
    max_wait=4,
    jitter="none",
    state_key="wc_orders",
    due=DueTime("<at>", timezone="SmartExt/Shift"),
    on_late=[wl_clock_alerts.record_late],
)
with DAG(
    "wc_clock_change",
    schedule=[Asset("wc_orders", watchers=[AssetWatcher(name="wc_orders", trigger=watcher)])],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
):
    EmptyOperator(task_id="consume")
"""


@pytest.fixture(scope="module")
def clock_change(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("watcher_dst")
    env, zones = shift_zone_env(work, [TEST_DAGS_DIR / "wl_clock_alerts.py"])
    try:
        env.start()
        database = work / "orders.db"
        with sqlite3.connect(database) as conn:
            conn.execute("CREATE TABLE orders (day text)")  # no value lands: the watcher is late
        add_connection_fields(env, CONN_ID, "sqlite", host=str(database))
        # No component has read the zone yet (no DAG names it): the change is set now, CHANGE_LEAD ahead.
        change = int(time.time()) + CHANGE_LEAD
        write_shift_zone(zones, change)
        due = change + AFTER_CHANGE
        at = dt.datetime.fromtimestamp(due, dt.timezone(dt.timedelta(seconds=SHIFT_AFTER)))
        source = work / "wc_clock_change.py"
        source.write_text(DAG_FILE.replace("<at>", at.strftime("%H:%M:%S")))
        env.add_dag_file(source)
        env.wait_for_dag(DAG_ID)
        env.unpause(DAG_ID)
        watchers_running(env, [ASSET])
        env.poll(lambda: absence_record(env, ASSET) is not None, 60, lambda: "the watcher's late record")
        record = absence_record(env, ASSET)
        assert record is not None and record["since"] < change, (
            f"the watcher began after the clock change: raise CHANGE_LEAD={CHANGE_LEAD} ({record})"
        )
        alerts_path = env.home / "watcher_late.jsonl"

        def told() -> list[dict[str, Any]]:
            lines = alerts_path.read_text().splitlines() if alerts_path.exists() else []
            return [json.loads(line) for line in lines]

        env.poll(
            lambda: bool(told()),
            max(0.0, due - time.time()) + 90,
            lambda: f"the watcher saying it is late (record: {absence_record(env, ASSET)})",
        )
        time.sleep(4 * CHECK_SECONDS)  # more checks after the alert: none says it again
        yield {"change": change, "due": due, "told": told(), "record": absence_record(env, ASSET)}
    finally:
        env.stop()


def test_a_watchers_due_time_of_day_keeps_its_local_time_across_a_clock_change(
    clock_change: dict[str, Any],
) -> None:
    due = clock_change["due"]
    (late,) = clock_change["told"]  # once
    assert late["watcher"] == ASSET and late["resent"] is False, late
    # the local time of day in the offset after the change: -04:00, not the -05:00 it began in (an hour later)
    assert epoch(late["due"]) == due, (late, due)
    assert due <= late["at"] <= due + 60 and 0 <= late["late_by_seconds"] <= CHECK_SECONDS + 10, late
    record = clock_change["record"]
    assert record["told"] == due and record["telling"] is False, record
