"""No silent never-run (issue 24), in a real Airflow: a DAG whose start_date lies before its calendar's
holiday data shows an import error for its file (the package's ``airflow.policy`` entry point, loaded by
the dag-processor on 3.x and the scheduler's DAG processing on 2.11); a covered DAG in the same folder still
gets its runs. Without the policy the uncovered DAG parses cleanly and never runs.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from airflow_harness.env import AirflowEnv

_DAG = textwrap.dedent(
    """
    import datetime

    import pendulum
    from airflow import DAG

    from airflow_smart_ext.compat.locations import task
    from airflow_smart_ext.timetables import BusinessDaysTimetable

    TZ = "America/Argentina/Buenos_Aires"

    with DAG(
        dag_id="{dag_id}",
        schedule=BusinessDaysTimetable(market="BYMA", timezone=TZ),
        start_date={start},
        catchup=True,
        max_active_runs=1,
        tags=["airflow-smart-ext", "integration"],
    ):

        @task(retries=2, retry_delay=datetime.timedelta(seconds=1))  # a loaded CI host may drop a task start
        def noop() -> None:
            pass

        noop()
    """
)
# BYMA's data starts in 2026 (the example); the covered DAG starts 7 local days ago
UNCOVERED = ("tt_coverage_uncovered", "pendulum.datetime(2025, 12, 29, tz=TZ)")
COVERED = ("tt_coverage_covered", "pendulum.today(TZ).subtract(days=7)")


def test_uncovered_dag_is_an_import_error_and_a_covered_one_runs(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    files = {}
    for dag_id, start in (UNCOVERED, COVERED):
        source = tmp_path / f"{dag_id}.py"
        source.write_text(_DAG.format(dag_id=dag_id, start=start))
        files[dag_id] = str(airflow_env.add_dag_file(source))

    airflow_env.wait_for_dag(COVERED[0])
    airflow_env.unpause(COVERED[0])
    deadline = time.monotonic() + 120
    errors: list[tuple[str, str]] = []
    while not errors and time.monotonic() < deadline:
        errors = [(f, s) for f, s in airflow_env.query("SELECT filename, stacktrace FROM import_error")
                  if f.endswith(f"{UNCOVERED[0]}.py")]  # fmt: skip
        time.sleep(0.5)
    assert len(errors) == 1, airflow_env.import_errors()
    message = errors[0][1]
    assert "AirflowClusterPolicyViolation" in message
    assert f"DAG '{UNCOVERED[0]}': BusinessDaysTimetable" in message
    assert "market 'BYMA' 2026-" in message and "covers 2026-" in message
    assert "needs its start_date 2025-12-29 (catchup=True)" in message
    assert not airflow_env.query("SELECT 1 FROM serialized_dag WHERE dag_id = %s", (UNCOVERED[0],))
    if airflow_env.is_airflow3:  # what the UI shows
        listed = airflow_env.api("GET", "/api/v2/importErrors")["import_errors"]
        assert [e["stack_trace"] for e in listed if e["filename"].endswith(f"{UNCOVERED[0]}.py")] == [message]

    # the covered DAG in the same folder: no import error, and its catch-up runs succeed
    assert not [
        f for f, _ in airflow_env.query("SELECT filename, stacktrace FROM import_error") if COVERED[0] in f
    ]
    runs = airflow_env.wait_runs(COVERED[0], 1, timeout=180)
    assert runs[0]["state"] == "success", runs
