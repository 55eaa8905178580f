"""BackoffRetryPolicy across Airflow versions: importable everywhere; on Airflow < 3.3 a DAG file that uses it
fails at parse (Airflow's own DagBag) with a message naming the minimum version and the alternatives; on
3.3+ the same file parses and the task carries the policy. Runs on every CI version (3.3.x and 2.11.2).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import airflow_smart_ext.retries as retries
from airflow_smart_ext.compat.retry_policies import RETRY_POLICY_MIN_AIRFLOW
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS

DAG_FILE = """
import datetime as dt
from airflow import DAG
from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.retries import HTTP_ERRORS, BackoffRetryPolicy

with DAG(dag_id="rp_version_probe", schedule=None, start_date=dt.datetime(2024, 1, 1), catchup=False):

    @task(retries=3, retry_policy=BackoffRetryPolicy(initial=30, cap=600, rules=[HTTP_ERRORS]))
    def call_api():
        pass

    call_api()
"""


def _dag_bag(folder: Path):  # type: ignore[no-untyped-def]
    if AIRFLOW_V_3_3_PLUS:
        from airflow.dag_processing.dagbag import DagBag
    else:
        from airflow.models.dagbag import DagBag
    if AIRFLOW_V_3_3_PLUS:
        return DagBag(dag_folder=str(folder))
    return DagBag(dag_folder=str(folder), include_examples=False)


def test_import_works_and_reports_support() -> None:
    assert retries.RETRY_POLICIES_SUPPORTED is AIRFLOW_V_3_3_PLUS
    assert RETRY_POLICY_MIN_AIRFLOW == "3.3.0"
    assert retries.HTTP_ERRORS is not None and retries.CONNECTION_ERRORS is not None


@pytest.mark.skipif(AIRFLOW_V_3_3_PLUS, reason="Airflow >= 3.3 has retry policies: nothing to refuse")
def test_constructing_fails_clearly_before_3_3() -> None:
    with pytest.raises(retries.RetryPoliciesUnsupported) as info:
        retries.BackoffRetryPolicy(initial=30)
    message = str(info.value)
    for needle in (
        "Airflow >= 3.3.0",
        "retry_exponential_backoff",
        "max_retry_delay",
        "RETRY_POLICIES_SUPPORTED",
    ):
        assert needle in message, message


def test_dag_file_using_the_policy(tmp_path: Path) -> None:
    (tmp_path / "rp_version_probe.py").write_text(textwrap.dedent(DAG_FILE))
    bag = _dag_bag(tmp_path)
    if AIRFLOW_V_3_3_PLUS:
        assert not bag.import_errors, bag.import_errors
        policy = bag.dags["rp_version_probe"].get_task("call_api").retry_policy
        assert isinstance(policy, retries.BackoffRetryPolicy), policy
        assert "HTTP 429/408/5xx retry" in policy.describe()
    else:
        assert list(bag.dag_ids) == []
        [error] = bag.import_errors.values()
        assert "RetryPoliciesUnsupported: BackoffRetryPolicy needs Airflow >= 3.3.0" in error, error
        assert "retry_exponential_backoff=True and max_retry_delay" in error, error
