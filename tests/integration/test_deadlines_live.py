"""``DueTimeDeadline`` in a real Airflow 3.3: a DAG's ``DeadlineAlert`` whose reference is the first NYSE
session's 09:30 New York at or after a run instant, with no grace (tests/integration/dags/dl_deadline_dags.py).

Runs whose deadlines have passed when they are created, each waiting for a file the test creates only at the
end:

* three manual runs (the api-server creates them and evaluates the reference) from their logical dates:
  Thanksgiving 2025 (NYSE closed) is due Friday 09:30 EST (14:30 UTC); the Monday after the US clocks went
  forward in 2026 at 09:30 EDT (13:30 UTC); Friday 3 July 2026 (Independence Day observed, closed) on Monday;
* the one scheduled run of ``dl_due_nyse_scheduled`` (the scheduler creates it): its interval ends at
  2025-11-27 00:00 UTC, 19:00 the evening before Thanksgiving in New York, so it is due Friday 09:30 EST.

The deadline Airflow stored for each run is that due time; Airflow marks each missed and the triggerer runs
the alert's callback once per run, not again while the run goes on, nor when it succeeds. Skipped on
Airflow < 3.3, where building the reference fails the DAG file at parse (tests/unit/test_deadlines.py).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_smart_ext.compat.deadlines import CUSTOM_DEADLINE_REFERENCES, DEADLINE_REFERENCES_MIN_AIRFLOW

pytestmark = pytest.mark.skipif(
    not CUSTOM_DEADLINE_REFERENCES,
    reason=f"DAG deadline references need Airflow >= {DEADLINE_REFERENCES_MIN_AIRFLOW} (the refusal is tested)",
)

MANUAL, SCHEDULED = "dl_due_nyse", "dl_due_nyse_scheduled"
UTC = dt.timezone.utc
FRIDAY_AFTER_THANKSGIVING = dt.datetime(2025, 11, 28, 14, 30, tzinfo=UTC)
# logical date of a manual run -> the deadline the NYSE calendar gives it
CASES = {
    dt.datetime(2025, 11, 27, 15, tzinfo=UTC): FRIDAY_AFTER_THANKSGIVING,
    dt.datetime(2026, 3, 9, 5, tzinfo=UTC): dt.datetime(2026, 3, 9, 13, 30, tzinfo=UTC),
    dt.datetime(2026, 7, 3, 12, tzinfo=UTC): dt.datetime(2026, 7, 6, 13, 30, tzinfo=UTC),
}
SCHEDULED_END = dt.datetime(2025, 11, 27, tzinfo=UTC)  # the one scheduled run's data_interval_end
# After the alerts: how long the test watches for a second one (several scheduler loops and triggerer cycles)
QUIET = 15.0


def _calls(env: AirflowEnv) -> Counter[str]:
    """How many times the callback ran, per DAG run id (the DAG file's CALLS)."""
    path = env.home / "dl_deadline_calls.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(json.loads(line)["run_id"] for line in lines)


def _deadlines(env: AirflowEnv) -> dict[str, dict[str, Any]]:
    rows = env.query_dicts(
        "SELECT r.run_id, d.deadline_time, d.missed FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id "
        "WHERE r.dag_id IN (%s, %s)",
        (MANUAL, SCHEDULED),
    )
    return {row["run_id"]: row for row in rows}


def test_a_runs_deadline_is_its_business_calendar_due_time_alerted_once(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    env = airflow_env
    for dag_id in (MANUAL, SCHEDULED):
        env.wait_for_dag(dag_id)
        env.unpause(dag_id)
    flag = tmp_path / "landed"
    # A sub-second shift makes each attempt's logical dates new (a re-run after a component death) and moves
    # no deadline: none of these instants is within a second of 09:30 New York.
    shift = dt.timedelta(microseconds=int(time.time() * 1e6) % 1_000_000)
    expected = {
        env.trigger(MANUAL, {"path": str(flag)}, logical_date=day + shift): due for day, due in CASES.items()
    }

    def scheduled_run() -> list[dict[str, Any]]:
        return env.query_dicts(
            "SELECT run_id, run_type, data_interval_end FROM dag_run WHERE dag_id = %s", (SCHEDULED,)
        )

    env.poll(scheduled_run, 180, f"the scheduler creates the run of {SCHEDULED}", interval=1.0)
    [run] = scheduled_run()
    assert (run["run_type"], run["data_interval_end"]) == ("scheduled", SCHEDULED_END), run
    expected[run["run_id"]] = FRIDAY_AFTER_THANKSGIVING

    def alerted() -> bool:
        rows, calls = _deadlines(env), _calls(env)
        return all(run_id in rows and rows[run_id]["missed"] and calls[run_id] for run_id in expected)

    env.poll(alerted, 240, "every run's deadline missed and its callback run", interval=1.0)
    rows = _deadlines(env)
    assert {run_id: rows[run_id]["deadline_time"] for run_id in expected} == expected

    time.sleep(QUIET)  # the runs go on waiting: no second alert
    flag.touch()
    (env.home / "dl_scheduled_landed").touch()  # the DAG file's SCHEDULED_FLAG
    for run_id in expected:
        dag_id = SCHEDULED if run_id == run["run_id"] else MANUAL
        assert env.wait_run(dag_id, run_id, timeout=300) == "success"
    calls = _calls(env)
    assert {run_id: calls[run_id] for run_id in expected} == dict.fromkeys(expected, 1), calls
