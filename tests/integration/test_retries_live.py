"""BackoffRetryPolicy in a real Airflow 3.3 (scheduler, dag-processor, api-server, LocalExecutor workers).

DAGs: tests/integration/dags/rp_retry_dags.py. The four runs are triggered together and share the session's
Airflow. Try start/end times come from the metadata DB (task_instance_history + task_instance):

* a 503-like error twice, then success: each retry starts at the failed try's end + exactly the policy's
  delay for this task instance's seed (never sooner; later only by scheduling latency), and the delay Airflow
  stored (``retry_delay_override``) is that value -- not the task's 60 s ``retry_delay``;
* a 404-like error: failed after one try, the reason in the task log;
* a 429 with ``Retry-After: 7`` (backoff < 2 s): the retry starts >= 7 s after the failure;
* the example DAG example_dags/retry_policy_http.py (a real ``requests.HTTPError`` 503 with Retry-After: 3)
  succeeds on its second try, the policy's reason stored by Airflow;
* a budget of run start + 25 s: retries stop before ``retries`` is spent, with the budget reason in the log.

Skipped on Airflow < 3.3, where ``retry_policy`` does not exist (the parse-time error there is proven by
tests/unit/test_retries_versions.py).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.compat.retry_policies import RETRY_POLICIES_SUPPORTED, RETRY_POLICY_MIN_AIRFLOW
from airflow_smart_ext.retries import retry_seed

pytestmark = pytest.mark.skipif(
    not RETRY_POLICIES_SUPPORTED,
    reason=f"task retry policies need Airflow >= {RETRY_POLICY_MIN_AIRFLOW} (the API does not exist before)",
)

DAGS = ("rp_transient_then_ok", "rp_not_found", "rp_retry_after", "rp_budget", "retry_policy_http")
TASK = "call_api"
# The DAG file's SCHEDULE (equal jitter: 6 s x2 up to 20 s)
SCHEDULE = BackoffPolicy(initial=6, factor=2, cap=20, jitter="equal")
# A retry is due at end + delay; the scheduler loop, the executor and the worker start add latency. The
# exact delay is proven by retry_delay_override; the bound only has to stay below the 60 s retry_delay.
LATENCY_SLACK = 30.0


@pytest.fixture(scope="module")
def runs(airflow_env: AirflowEnv) -> dict[str, str]:
    for dag_id in DAGS:
        airflow_env.wait_for_dag(dag_id)
        airflow_env.unpause(dag_id)
    run_ids = {dag_id: airflow_env.trigger(dag_id) for dag_id in DAGS}
    for dag_id, run_id in run_ids.items():
        airflow_env.wait_run(dag_id, run_id, timeout=240)
    return run_ids


def tries(env: AirflowEnv, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every try of the task in order: archived tries (task_instance_history), then the current row."""
    columns = "try_number, state, start_date, end_date, retry_delay_override, retry_reason"
    where = "WHERE dag_id = %s AND run_id = %s AND task_id = %s AND map_index = -1"
    params = (dag_id, run_id, TASK)
    history = env.query_dicts(
        f"SELECT {columns} FROM task_instance_history {where} ORDER BY try_number", params
    )
    current = env.query_dicts(f"SELECT {columns} FROM task_instance {where}", params)
    return history + current


def final_log(env: AirflowEnv, dag_id: str, run_id: str, try_number: int, needle: str) -> str:
    text = ""
    for _ in range(20):  # the log file is flushed just after the state changes
        text = env.task_log(dag_id, run_id, TASK, try_number)
        if needle in text:
            break
        time.sleep(0.5)
    return text


def test_transient_errors_retry_at_the_policy_delays(airflow_env: AirflowEnv, runs: dict[str, str]) -> None:
    dag_id = "rp_transient_then_ok"
    run_id = runs[dag_id]
    rows = tries(airflow_env, dag_id, run_id)
    assert [r["try_number"] for r in rows] == [1, 2, 3], rows
    assert rows[-1]["state"] == "success", rows
    seed = retry_seed(dag_id, TASK, run_id, -1)
    for retry, (failed, following) in enumerate(zip(rows, rows[1:], strict=False), start=1):
        expected = SCHEDULE.sleep(seed, retry)
        base = SCHEDULE.base_interval(retry - 1)
        assert base / 2 <= expected <= base, (retry, expected, base)  # equal jitter's bounds
        assert failed["retry_delay_override"] == pytest.approx(expected, abs=1e-3), failed
        assert f"retry {retry} of 3 in {expected:.1f}s" in (failed["retry_reason"] or ""), failed
        waited = (following["start_date"] - failed["end_date"]).total_seconds()
        assert expected - 0.05 <= waited <= expected + LATENCY_SLACK, (
            f"retry {retry}: policy delay {expected:.2f}s, waited {waited:.2f}s"
        )
    log = final_log(airflow_env, dag_id, run_id, 1, "Retry policy decision")
    assert "HTTP 503 (transient) -> retry 1 of 3" in log, log[-3000:]


def test_permanent_http_error_fails_without_retry(airflow_env: AirflowEnv, runs: dict[str, str]) -> None:
    dag_id = "rp_not_found"
    rows = tries(airflow_env, dag_id, runs[dag_id])
    assert [(r["try_number"], r["state"]) for r in rows] == [(1, "failed")], rows
    log = final_log(airflow_env, dag_id, runs[dag_id], 1, "fail now")
    assert "HTTP 404 (permanent) -> fail now, no retry" in log, log[-3000:]


def test_retry_after_is_honoured(airflow_env: AirflowEnv, runs: dict[str, str]) -> None:
    dag_id = "rp_retry_after"
    rows = tries(airflow_env, dag_id, runs[dag_id])
    assert [r["try_number"] for r in rows] == [1, 2] and rows[-1]["state"] == "success", rows
    assert rows[0]["retry_delay_override"] == pytest.approx(7.0), rows[0]
    waited = (rows[1]["start_date"] - rows[0]["end_date"]).total_seconds()
    assert 7.0 <= waited <= 7.0 + LATENCY_SLACK, waited
    assert "Retry-After 7s" in (rows[0]["retry_reason"] or ""), rows[0]


def test_budget_stops_retries_with_its_reason(airflow_env: AirflowEnv, runs: dict[str, str]) -> None:
    dag_id = "rp_budget"
    run_id = runs[dag_id]
    rows = tries(airflow_env, dag_id, run_id)
    assert rows[-1]["state"] == "failed", rows
    assert len(rows) < 6, f"the budget should stop retries before retries=5 is spent: {rows}"
    deadline = airflow_env.dag_run(dag_id, run_id)["start_date"] + dt.timedelta(seconds=25)
    for retried in rows[:-1]:  # each retry was planned to start before the deadline (latency aside)
        planned = retried["end_date"] + dt.timedelta(seconds=retried["retry_delay_override"])
        assert planned <= deadline, (deadline, rows)
    last = rows[-1]["try_number"]
    log = final_log(airflow_env, dag_id, run_id, last, "retry budget spent")
    match = re.search(
        rf"retry budget spent -- retry {last} would start at (\S+), after the deadline (\S+) \(run_start \+ 25s\)",
        log,
    )
    assert match, log[-3000:]
    would_start, logged_deadline = (dt.datetime.fromisoformat(g) for g in match.groups())
    assert abs((logged_deadline - deadline).total_seconds()) <= 1, (logged_deadline, deadline)
    assert would_start > logged_deadline


def test_example_dag_retries_a_requests_503(airflow_env: AirflowEnv, runs: dict[str, str]) -> None:
    dag_id = "retry_policy_http"
    run_id = runs[dag_id]
    columns = "try_number, state, retry_delay_override, retry_reason"
    where = "WHERE dag_id = %s AND run_id = %s AND task_id = 'fetch_report'"
    history = airflow_env.query_dicts(
        f"SELECT {columns} FROM task_instance_history {where}", (dag_id, run_id)
    )
    current = airflow_env.query_dicts(f"SELECT {columns} FROM task_instance {where}", (dag_id, run_id))
    assert [r["try_number"] for r in history + current] == [1, 2] and current[0]["state"] == "success", (
        history,
        current,
    )
    assert history[0]["retry_reason"].startswith("HTTP 503 (transient) -> retry 1 of 4 in "), history
    assert history[0]["retry_delay_override"] >= 3.0  # Retry-After: 3 is the floor
