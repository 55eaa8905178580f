"""``DueTimeDeadline`` in a real Airflow 3.3: a DAG's ``DeadlineAlert`` whose reference is a due time on the
NYSE calendar (tests/integration/dags/dl_deadline_dags.py: 09:30 New York on the first NYSE session on or
after the run's logical date, no grace).

Three manual runs with logical dates in the past, each past its due time as soon as the scheduler creates it,
each waiting for a file the test creates only at the end:

* Thanksgiving 2025 (NYSE closed): the deadline the scheduler stored is Friday 09:30 EST (14:30 UTC);
* the Monday after the US clocks went forward in 2026: 09:30 EDT (13:30 UTC);
* Friday 3 July 2026 (Independence Day observed; NYSE closed): Monday 6 July 09:30 EDT.

The scheduler marks each deadline missed and the triggerer runs the alert's callback once per run (the
callback's file), not again while the run goes on, nor when it succeeds. Skipped on Airflow < 3.3, where
building the reference fails the DAG file at parse (tests/unit/test_deadlines.py).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_smart_ext.compat.deadlines import CUSTOM_DEADLINE_REFERENCES, DEADLINE_REFERENCES_MIN_AIRFLOW

pytestmark = pytest.mark.skipif(
    not CUSTOM_DEADLINE_REFERENCES,
    reason=f"DAG deadline references need Airflow >= {DEADLINE_REFERENCES_MIN_AIRFLOW} (the refusal is tested)",
)

DAG_ID = "dl_due_nyse"
UTC = dt.timezone.utc
# logical date -> the deadline the NYSE calendar gives it (09:30 New York on the first session on or after it)
CASES = {
    dt.datetime(2025, 11, 27, 15, tzinfo=UTC): dt.datetime(2025, 11, 28, 14, 30, tzinfo=UTC),
    dt.datetime(2026, 3, 9, 5, tzinfo=UTC): dt.datetime(2026, 3, 9, 13, 30, tzinfo=UTC),
    dt.datetime(2026, 7, 3, 12, tzinfo=UTC): dt.datetime(2026, 7, 6, 13, 30, tzinfo=UTC),
}
# After the alerts: how long the test watches for a second one (several scheduler loops and triggerer cycles)
QUIET = 15.0


def _calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _deadlines(env: AirflowEnv, run_ids: dict[str, dt.datetime]) -> dict[str, dict[str, Any]]:
    rows = env.query_dicts(
        "SELECT r.run_id, d.deadline_time, d.missed FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id "
        "WHERE r.dag_id = %s",
        (DAG_ID,),
    )
    return {row["run_id"]: row for row in rows if row["run_id"] in run_ids}


def test_a_runs_deadline_is_its_business_calendar_due_time_alerted_once(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    env = airflow_env
    calls = env.home / "dl_deadline_calls.jsonl"  # the DAG file's CALLS
    env.wait_for_dag(DAG_ID)
    env.unpause(DAG_ID)
    flag = tmp_path / "landed"
    run_ids = {env.trigger(DAG_ID, {"path": str(flag)}, logical_date=day): day for day in CASES}

    def alerted() -> bool:
        rows = _deadlines(env, run_ids)
        told = {call["run_id"] for call in _calls(calls)}
        return len(rows) == len(run_ids) and all(r["missed"] for r in rows.values()) and told >= set(run_ids)

    env.poll(alerted, 240, "every run's deadline missed and its callback run", interval=1.0)
    rows = _deadlines(env, run_ids)
    for run_id, logical_date in run_ids.items():
        assert rows[run_id]["deadline_time"] == CASES[logical_date], (run_id, rows[run_id])

    time.sleep(QUIET)  # the runs go on waiting: no second alert
    flag.touch()
    for run_id in run_ids:
        assert env.wait_run(DAG_ID, run_id, timeout=240) == "success"
    told = [call["run_id"] for call in _calls(calls)]
    assert sorted(told) == sorted(run_ids), told
    for call in _calls(calls):
        expected = CASES[run_ids[call["run_id"]]]
        assert dt.datetime.fromisoformat(call["deadline_time"]) == expected, call
