"""Late data across a clock change (issue 45), in a real Airflow: a due time of day keeps its local time when
the clocks go forward between the run's start and the due time.

A real Airflow runs on the wall clock, so the test controls the zone instead: ``SmartExt/Shift`` is a TZif file
the test writes (Airflow's components find it through ``PYTHONTZPATH``), whose clocks go from -05:00 to -04:00
(as New York's do in March) ``CHANGE_LEAD`` seconds after the DAG file is written. Two sensors, in reschedule
mode and deferrable (zero-worker where Airflow allows it, else worker-first), are due at the local time of day
``AFTER_CHANGE`` seconds after the change, on a run that starts before it.

Proven: each says once that it is late, for the due time at that local time in the new offset (a computation
in the run's own offset, -05:00, would make it an hour later; in UTC, hours off), within a minute of it (a
check at least every 6 s; a deferrable wait's alert is a worker's), and succeeds on try 1.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_harness.state import TEST_DAGS_DIR
from tests.integration.live import (
    SHIFT_AFTER,
    epoch,
    sensor_log,
    shift_zone_env,
    start_run,
    ti_row,
    write_shift_zone,
)

pytestmark = pytest.mark.timeout(600)

CHANGE_LEAD = (
    75  # s from writing the DAG file to the change: parsing it and starting the run on a loaded machine
)
AFTER_CHANGE = 30  # s from the change to the due time
TASKS = ("reschedule", "deferrable")
DAG_ID = "due_clock_change"
DAG_FILE = """
import datetime as dt

from airflow import DAG
from sn_sensors import LATE_WAIT, FileArrivedSensor, record_late

from airflow_smart_ext.timetables import DueTime

MODES = {"reschedule": {"mode": "reschedule"}, "deferrable": {"deferrable": True}}
with DAG("due_clock_change", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)):
    for name, mode in MODES.items():
        FileArrivedSensor(
            task_id=name, due=DueTime("<at>", timezone="SmartExt/Shift"), on_late=record_late, **LATE_WAIT, **mode
        )
"""


@pytest.fixture(scope="module")
def clock_change(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("due_dst")
    env, zones = shift_zone_env(work, [TEST_DAGS_DIR / "sn_sensors.py"])
    try:
        env.start()
        # No component has read the zone yet (no DAG names it): the change is set now, CHANGE_LEAD ahead.
        change = int(time.time()) + CHANGE_LEAD
        write_shift_zone(zones, change)
        due = change + AFTER_CHANGE
        at = dt.datetime.fromtimestamp(due, dt.timezone(dt.timedelta(seconds=SHIFT_AFTER)))
        source = work / "due_clock_change.py"
        source.write_text(DAG_FILE.replace("<at>", at.strftime("%H:%M:%S")))
        env.add_dag_file(source)
        target, told_path = work / "data.csv", work / "late.jsonl"
        run_id = start_run(env, DAG_ID, {"path": str(target), "late_path": str(told_path)})
        run = env.dag_run(DAG_ID, run_id)  # a 3.x manual run may have no data interval: its run_after then
        reference = (run["data_interval_end"] or run["run_after"]).timestamp()
        assert reference < change, f"the run began after the clock change: raise CHANGE_LEAD={CHANGE_LEAD}"

        def told() -> list[dict[str, Any]]:
            lines = told_path.read_text().splitlines() if told_path.exists() else []
            return [json.loads(line) for line in lines]

        env.poll(
            lambda: {late["wait"] for late in told()} == {f"{DAG_ID}.{task}" for task in TASKS},
            max(0.0, due - time.time()) + 120,
            lambda: f"both sensors saying they are late (so far: {told()})",
        )
        time.sleep(12)  # two more checks of each (max_wait 6 s): none says it again
        target.write_text("id\n1\n")
        state = env.wait_run(DAG_ID, run_id, timeout=120)
        yield {"env": env, "run_id": run_id, "change": change, "due": due, "told": told(), "state": state}
    finally:
        env.stop()


def test_a_due_time_of_day_keeps_its_local_time_across_a_clock_change(clock_change: dict[str, Any]) -> None:
    env, run_id, due = clock_change["env"], clock_change["run_id"], clock_change["due"]
    assert clock_change["state"] == "success"
    alerts = {late["wait"].split(".")[1]: late for late in clock_change["told"]}
    assert sorted(alerts) == sorted(TASKS) and len(clock_change["told"]) == len(TASKS), clock_change["told"]
    for task, late in alerts.items():
        # the local time of day in the offset after the change: -04:00, not the run's -05:00 (an hour later)
        assert epoch(late["due"]) == due, (task, late, due)
        assert due <= late["at"] <= due + 60 and late["try_number"] == 1, (task, late)
        assert sensor_log(env, DAG_ID, run_id, task).count(f"Late: {DAG_ID}.{task} was due at ") == 1, task
        row = ti_row(env, DAG_ID, run_id, task)
        assert row is not None and row["state"] == "success" and row["try_number"] == 1, row
