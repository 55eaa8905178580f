"""Integration-test DAGs for ``BackoffRetryPolicy`` (tests/integration/test_retries_live.py). Airflow >= 3.3.

Each task raises an HTTP-like error (``response.status_code`` / ``response.headers``, as requests and httpx
errors carry them) on chosen tries. ``retry_delay`` is 60 s everywhere: a retry that comes sooner can only
have come from the policy. On Airflow < 3.3 (no ``retry_policy``) this file defines no DAG.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow import DAG

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.retries import (
    CONNECTION_ERRORS,
    HTTP_ERRORS,
    RETRY_POLICIES_SUPPORTED,
    BackoffRetryPolicy,
)

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
SLOW_DEFAULT = {"retries": 3, "retry_delay": dt.timedelta(seconds=60)}
# Equal jitter: every delay has a floor (half its base), so the test sees real, seed-specific waits.
SCHEDULE = {"initial": 6, "factor": 2, "cap": 20, "jitter": "equal"}


class _Response:
    def __init__(self, status_code: int, headers: dict[str, str]) -> None:
        self.status_code = status_code
        self.headers = headers


class FakeHTTPError(Exception):
    """Shaped like ``requests.HTTPError``: the classification reads ``response.status_code`` / headers."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} Client/Server Error (simulated)")
        self.response = _Response(status, headers or {})


def _fail_until(context: Any, tries: int, status: int, headers: dict[str, str] | None = None) -> str:
    try_number = context["ti"].try_number
    if try_number <= tries:
        raise FakeHTTPError(status, headers)
    return f"succeeded on try {try_number}"


if RETRY_POLICIES_SUPPORTED:
    HTTP_AWARE = BackoffRetryPolicy(**SCHEDULE, rules=[HTTP_ERRORS, CONNECTION_ERRORS], default="fail")

    with DAG(dag_id="rp_transient_then_ok", schedule=None, start_date=START, catchup=False):

        @task(retry_policy=HTTP_AWARE, **SLOW_DEFAULT)
        def call_api(**context: Any) -> str:
            return _fail_until(context, 2, 503)

        call_api()

    with DAG(dag_id="rp_not_found", schedule=None, start_date=START, catchup=False):

        @task(retry_policy=HTTP_AWARE, **SLOW_DEFAULT)
        def call_api(**context: Any) -> str:  # type: ignore[no-redef]
            return _fail_until(context, 99, 404)

        call_api()

    with DAG(dag_id="rp_retry_after", schedule=None, start_date=START, catchup=False):
        # A 0.5 s backoff: the wait of >= 7 s can only come from the server's Retry-After.
        QUICK = BackoffRetryPolicy(initial=1, cap=2, jitter="full", rules=[HTTP_ERRORS])

        @task(retry_policy=QUICK, **SLOW_DEFAULT)
        def call_api(**context: Any) -> str:  # type: ignore[no-redef]
            return _fail_until(context, 1, 429, {"Retry-After": "7"})

        call_api()

    with DAG(dag_id="rp_budget", schedule=None, start_date=START, catchup=False):
        # Always 503; no try may start later than 25 s after the run started.
        BUDGETED = BackoffRetryPolicy(
            **SCHEDULE, rules=[HTTP_ERRORS], budget=dt.timedelta(seconds=25), budget_anchor="run_start"
        )

        @task(retry_policy=BUDGETED, retries=5, retry_delay=dt.timedelta(seconds=60))
        def call_api(**context: Any) -> str:  # type: ignore[no-redef]
            return _fail_until(context, 99, 503)

        call_api()
