"""### BackoffRetryPolicy: retry what can succeed, fail fast on what cannot

`fetch_report` calls a flaky HTTP API (simulated: the first try gets `503 Service Unavailable` with
`Retry-After: 3`, exactly as `requests` raises it; the second try succeeds). With Airflow >= 3.3 the task
carries `BackoffRetryPolicy`:

* 429/408/5xx and connection errors retry after a seeded, jittered, exponential delay (base 5 s, x2, capped
  at 10 min), never sooner than the server's `Retry-After`;
* any other 4xx (a wrong URL, bad credentials) fails at once instead of burning all retries;
* no retry starts more than 6 hours after the data interval ends (a manual run: after it was triggered).

Every decision is written to the task log ("Retry policy decision ... reason=HTTP 503 (transient) ->
retry 1 of 4 in 3.0s ..."). On Airflow < 3.3 (no retry policies) the same task falls back to Airflow's own
`retry_exponential_backoff`, so this example runs everywhere.
"""

from __future__ import annotations

import datetime as dt

import pendulum
import requests
from airflow import DAG

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.retries import (
    CONNECTION_ERRORS,
    HTTP_ERRORS,
    RETRY_POLICIES_SUPPORTED,
    BackoffRetryPolicy,
)

if RETRY_POLICIES_SUPPORTED:
    RETRY_SETTINGS = {
        "retry_policy": BackoffRetryPolicy(
            initial=dt.timedelta(seconds=5),
            factor=2,
            cap=dt.timedelta(minutes=10),
            rules=[HTTP_ERRORS, CONNECTION_ERRORS],
            default="fail",  # anything else is a bug: do not retry it
            budget=dt.timedelta(hours=6),  # from data_interval_end (or run_after for a manual run)
        )
    }
else:  # Airflow 2.11 - 3.2: the operator's own exponential backoff (no error classification)
    RETRY_SETTINGS = {"retry_exponential_backoff": True, "max_retry_delay": dt.timedelta(minutes=10)}


def _service_unavailable() -> requests.HTTPError:
    response = requests.models.Response()
    response.status_code = 503
    response.reason = "Service Unavailable"
    response.url = "https://reports.example.com/daily"
    response.headers["Retry-After"] = "3"
    return requests.HTTPError("503 Server Error: Service Unavailable", response=response)


with DAG(
    dag_id="retry_policy_http",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["airflow-smart-ext", "retries"],
    doc_md=__doc__,
):

    @task(retries=4, retry_delay=dt.timedelta(seconds=5), **RETRY_SETTINGS)
    def fetch_report(ti=None):
        if ti.try_number == 1:
            raise _service_unavailable()
        print(f"report fetched on try {ti.try_number}")

    fetch_report()
