"""BackoffRetryPolicy (Airflow >= 3.3): delays, rules, Retry-After, budget, reasons, Airflow's fallback."""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import time_machine

from airflow_smart_ext.backoff import JITTER_STRATEGIES, BackoffPolicy
from airflow_smart_ext.compat.locations import AirflowException
from airflow_smart_ext.compat.retry_policies import RETRY_POLICIES_SUPPORTED, RETRY_POLICY_MIN_AIRFLOW

pytestmark = pytest.mark.skipif(
    not RETRY_POLICIES_SUPPORTED, reason=f"retry policies need Airflow >= {RETRY_POLICY_MIN_AIRFLOW}"
)

from airflow_smart_ext.retries import (  # noqa: E402
    CONNECTION_ERRORS,
    HTTP_ERRORS,
    BackoffRetryPolicy,
    ConnectionErrors,
    HttpErrors,
    Rule,
    retry_seed,
)

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


# ---- exceptions shaped like the client libraries' (none of them is a dependency) ------------------------
class _Response:
    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class HTTPError(Exception):  # requests.HTTPError / httpx.HTTPStatusError shape
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} error")
        self.response = _Response(status, headers)


class ReadTimeout(Exception):  # requests.exceptions.ReadTimeout, matched by class name
    pass


def context(
    map_index: int = -1,
    run_id: str = "manual__1",
    data_interval_end: dt.datetime | None = NOW,
    run_after: dt.datetime | None = NOW,
    start_date: dt.datetime | None = NOW,
    retry_delay: dt.timedelta = dt.timedelta(seconds=300),
    max_retry_delay: dt.timedelta | None = None,
) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id=run_id, map_index=map_index)
    dag_run = SimpleNamespace(
        data_interval_end=data_interval_end, run_after=run_after, start_date=start_date, logical_date=None
    )
    task = SimpleNamespace(retry_delay=retry_delay, max_retry_delay=max_retry_delay)
    return {"ti": ti, "dag_run": dag_run, "task": task, "data_interval_end": data_interval_end}


def decide(policy: BackoffRetryPolicy, exc: BaseException, try_number: int = 1, **ctx: Any) -> Any:
    with time_machine.travel(NOW, tick=False):
        return policy.evaluate(exc, try_number, 3, context(**ctx))


# ---- delays ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("jitter", JITTER_STRATEGIES)
def test_delays_come_from_the_backoff_policy_and_never_exceed_the_cap(jitter: str) -> None:
    policy = BackoffRetryPolicy(initial=10, factor=2, cap=300, jitter=jitter)
    schedule = BackoffPolicy(initial=10, factor=2, cap=300, jitter=jitter)
    seed = retry_seed("d", "t", "manual__1", -1)
    tries = [*range(1, 11), 10**6]
    for try_number in tries:
        decision = policy.evaluate(HTTPError(503), try_number, 10**7, context())
        assert decision.action.value == "retry"
        delay = decision.retry_delay.total_seconds()
        assert delay == pytest.approx(schedule.sleep(seed, try_number), abs=1e-6)
        assert 0 <= delay <= 300
    if jitter == "none":
        assert [schedule.sleep(seed, k) for k in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]


def test_gap_is_overflow_safe_at_huge_indices() -> None:
    for jitter in ("none", "full", "equal"):
        policy = BackoffPolicy(initial=0.001, factor=10, cap=86400, jitter=jitter)
        for index in (10**6, 10**12, 2**62):
            assert 0 <= policy.sleep("s", index) <= 86400
    with pytest.raises(ValueError, match="index must be an int >= 1"):
        BackoffPolicy(initial=1).sleep("s", 0)


def _delays_by_jitter() -> dict[str, list[float]]:
    ctx = {"ti": SimpleNamespace(dag_id="d", task_id="t", run_id="manual__1", map_index=3)}
    out = {}
    for jitter in JITTER_STRATEGIES:
        policy = BackoffRetryPolicy(initial=7, cap=600, jitter=jitter)
        out[jitter] = [
            policy.evaluate(ConnectionError(), k, 99, ctx).retry_delay.total_seconds() for k in range(1, 11)
        ]
    return out


def test_delays_identical_across_processes() -> None:
    code = "import json, tests.unit.test_retries as t; print(json.dumps(t._delays_by_jitter()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == _delays_by_jitter()


@pytest.mark.parametrize(("jitter", "low", "high"), [("none", 1, 1), ("full", 0, 1), ("equal", 0.5, 1)])
def test_sleep_has_the_aws_range_of_its_base(jitter: str, low: float, high: float) -> None:
    policy = BackoffPolicy(initial=10, factor=2, cap=1000, jitter=jitter)
    for index in range(1, 9):
        base = policy.base_interval(index - 1)
        sleeps = [policy.sleep(f"seed-{n}", index) for n in range(200)]
        assert all(low * base <= s <= high * base for s in sleeps), (index, min(sleeps), max(sleeps))
        if jitter != "none":  # spread over the range, not stuck at one value
            assert max(sleeps) - min(sleeps) > 0.8 * (high - low) * base


def test_task_instances_of_one_fan_out_get_different_delays() -> None:
    policy = BackoffRetryPolicy(initial=60, jitter="full")
    delays = {decide(policy, ConnectionError(), map_index=i).retry_delay for i in range(50)}
    assert len(delays) == 50  # Airflow's own hash ignores map_index: every mapped instance waits the same
    assert decide(policy, ConnectionError(), map_index=7) == decide(policy, ConnectionError(), map_index=7)


def test_initial_and_cap_default_to_the_task_settings() -> None:
    policy = BackoffRetryPolicy(jitter="none")
    assert (
        decide(policy, ValueError(), retry_delay=dt.timedelta(seconds=30)).retry_delay.total_seconds() == 30
    )
    late = decide(policy, ValueError(), try_number=3, retry_delay=dt.timedelta(seconds=30))
    assert late.retry_delay.total_seconds() == 120
    capped = decide(
        policy,
        ValueError(),
        try_number=3,
        retry_delay=dt.timedelta(seconds=30),
        max_retry_delay=dt.timedelta(seconds=45),
    )
    assert capped.retry_delay.total_seconds() == 45
    assert "retry_delay x2 up to max_retry_delay" in policy.describe()


def test_an_explicit_cap_caps_an_inherited_retry_delay_and_an_explicit_initial_lifts_an_inherited_cap() -> (
    None
):
    capped = BackoffRetryPolicy(cap=60, jitter="none")  # the task's retry_delay is Airflow's 300 s
    assert (
        decide(capped, ValueError(), retry_delay=dt.timedelta(seconds=300)).retry_delay.total_seconds() == 60
    )
    lifted = BackoffRetryPolicy(initial=120, jitter="none")
    delay = decide(lifted, ValueError(), max_retry_delay=dt.timedelta(seconds=60)).retry_delay
    assert delay.total_seconds() == 120


def test_rules_may_be_any_iterable() -> None:
    policy = BackoffRetryPolicy(initial=1, rules=(rule for rule in [HTTP_ERRORS]), default="fail")
    assert policy.rules == (HTTP_ERRORS,)
    assert decide(policy, HTTPError(503)).action.value == "retry"


# ---- rules ------------------------------------------------------------------------------------------
def test_http_rule() -> None:
    policy = BackoffRetryPolicy(initial=10, cap=60, rules=[HTTP_ERRORS], default="airflow")
    for status in (500, 502, 503, 504, 408, 429):
        decision = decide(policy, HTTPError(status))
        assert decision.action.value == "retry", status
        assert decision.reason.startswith(f"HTTP {status} (transient) -> retry 1 of 3 in ")
    for status in (400, 401, 403, 404, 409, 422):
        decision = decide(policy, HTTPError(status))
        assert decision.action.value == "fail", status
        assert decision.reason == f"HTTP {status} (permanent) -> fail now, no retry"
    # Airflow's HttpHook raises AirflowException("404:Not Found"); a wrapped error is judged by its cause
    assert decide(policy, AirflowException("404:Not Found")).action.value == "fail"
    # A status in the message counts only for Airflow's HTTP errors, and only a real status
    assert decide(policy, RuntimeError("500: rows failed validation")).action.value == "default"
    assert decide(policy, ValueError("200: rows rejected")).action.value == "default"
    assert decide(policy, AirflowException("999: odd")).action.value == "default"
    try:
        try:
            raise HTTPError(503)
        except HTTPError as inner:
            raise RuntimeError("hook failed") from inner
    except RuntimeError as wrapped:
        assert decide(policy, wrapped).action.value == "retry"
    # no HTTP status: the rule does not match, the default applies
    assert decide(policy, ValueError("x")).action.value == "default"


def test_connection_rule() -> None:
    policy = BackoffRetryPolicy(initial=10, rules=[CONNECTION_ERRORS], default="fail")
    for exc in (ConnectionRefusedError("x"), TimeoutError(), ReadTimeout(), ConnectionResetError()):
        decision = decide(policy, exc)
        assert decision.action.value == "retry", exc
        assert "(transient: connection or timeout) -> retry 1 of 3" in decision.reason
    assert decide(policy, HTTPError(503)).action.value == "fail"  # HTTP statuses are HTTP_ERRORS' business
    assert decide(policy, KeyError("x")).reason == "KeyError (no rule matched: default) -> fail now, no retry"


def test_rules_in_order_first_match_wins_and_other_schedules() -> None:
    slow = BackoffPolicy(initial=600, factor=1, jitter="none")
    policy = BackoffRetryPolicy(
        initial=10,
        jitter="none",
        rules=[
            Rule("builtins.PermissionError", "fail"),
            Rule([ConnectionRefusedError], slow),
            Rule(OSError, "airflow"),
            CONNECTION_ERRORS,
        ],
    )
    assert decide(policy, PermissionError()).action.value == "fail"
    refused = decide(policy, ConnectionRefusedError())
    assert refused.retry_delay.total_seconds() == 600 and "every 10m" not in refused.reason
    assert decide(policy, ConnectionResetError()).action.value == "default"  # OSError rule before built-in
    assert decide(policy, ValueError()).retry_delay.total_seconds() == 10  # default "retry"
    assert HttpErrors(slow).match(HTTPError(502), NOW).action is slow
    assert ConnectionErrors(slow).match(TimeoutError(), NOW).action is slow


def test_no_retries_left_keeps_airflows_failure_path() -> None:
    policy = BackoffRetryPolicy(initial=10)
    with time_machine.travel(NOW, tick=False):
        decision = policy.evaluate(HTTPError(503), 4, 3, context())
    assert decision.action.value == "default"
    assert decision.reason.endswith("no retries left (try 4, max_tries=3)")


# ---- Retry-After --------------------------------------------------------------------------------------
def test_retry_after_seconds_and_http_date() -> None:
    policy = BackoffRetryPolicy(initial=1, cap=2, rules=[HTTP_ERRORS])
    seconds = decide(policy, HTTPError(429, {"Retry-After": "7"}))
    assert seconds.retry_delay == dt.timedelta(seconds=7)
    assert "Retry-After 7s > backoff" in seconds.reason
    date = email.utils.format_datetime(NOW + dt.timedelta(seconds=90), usegmt=True)
    dated = decide(policy, HTTPError(503, {"Retry-After": date}))
    assert dated.retry_delay == dt.timedelta(seconds=90)
    # shorter than the backoff: the backoff wins
    short = decide(
        BackoffRetryPolicy(initial=100, jitter="none", rules=[HTTP_ERRORS]),
        HTTPError(429, {"Retry-After": "3"}),
    )
    assert short.retry_delay == dt.timedelta(seconds=100)


def test_retry_after_of_the_response_an_http_hook_error_wraps() -> None:
    # HttpHook.check_response: ``except requests.HTTPError: raise AirflowException("429:Too Many Requests")``
    policy = BackoffRetryPolicy(initial=1, cap=2, rules=[HTTP_ERRORS])
    try:
        try:
            raise HTTPError(429, {"Retry-After": "7"})
        except HTTPError:
            raise AirflowException("429:Too Many Requests")  # noqa: B904 (as the hook does)
    except AirflowException as hook_error:
        decision = decide(policy, hook_error)
    assert decision.retry_delay == dt.timedelta(seconds=7)
    assert decision.reason.startswith("HTTP 429 (transient) -> retry 1 of 3 in 7.0s (Retry-After 7s")


def test_retry_after_above_the_cap_is_honoured_above_max_retry_after_fails() -> None:
    policy = BackoffRetryPolicy(initial=1, cap=60, rules=[HTTP_ERRORS], max_retry_after=dt.timedelta(hours=1))
    assert decide(policy, HTTPError(429, {"Retry-After": "900"})).retry_delay == dt.timedelta(seconds=900)
    too_long = decide(policy, HTTPError(429, {"Retry-After": "7200"}))
    assert too_long.action.value == "fail"
    assert "Retry-After 7200s is longer than max_retry_after 1h -> fail now" in too_long.reason


# ---- budget -----------------------------------------------------------------------------------------
def test_budget_from_data_interval_end() -> None:
    policy = BackoffRetryPolicy(initial=600, factor=1, jitter="none", budget=dt.timedelta(minutes=15))
    inside = decide(policy, ValueError(), data_interval_end=NOW)  # next try at +10 min < +15 min
    assert inside.action.value == "retry"
    outside = decide(policy, ValueError(), data_interval_end=NOW - dt.timedelta(minutes=10))
    assert outside.action.value == "fail"
    assert outside.reason == (
        "ValueError (no rule matched: default): retry budget spent -- retry 1 would start at "
        "2026-03-02T12:10:00.000+00:00, after the deadline 2026-03-02T12:05:00.000+00:00 "
        "(data_interval_end + 15m) -> fail now"
    )
    # a run without a data interval (3.x manual run): run_after is the anchor
    no_interval = decide(
        policy, ValueError(), data_interval_end=None, run_after=NOW - dt.timedelta(minutes=10)
    )
    assert no_interval.action.value == "fail" and "(run_after + 15m)" in no_interval.reason


@pytest.mark.parametrize(("anchor", "field"), [("run_start", "start_date"), ("run_after", "run_after")])
def test_budget_anchors(anchor: str, field: str) -> None:
    policy = BackoffRetryPolicy(
        initial=60, factor=1, jitter="none", budget=dt.timedelta(minutes=2), budget_anchor=anchor
    )
    assert decide(policy, ValueError(), **{field: NOW}).action.value == "retry"
    late = decide(policy, ValueError(), **{field: NOW - dt.timedelta(minutes=1, seconds=30)})
    assert late.action.value == "fail" and f"({anchor} + 2m)" in late.reason


def test_budget_without_an_anchor_says_so() -> None:
    policy = BackoffRetryPolicy(initial=60, jitter="none", budget=60, budget_anchor="run_start")
    decision = decide(policy, ValueError(), start_date=None)
    assert decision.action.value == "retry"
    assert decision.reason.endswith("(backoff 60.0s; budget not checked: the context has no run_start)")


def test_zero_retry_delay_counts_as_one_second() -> None:
    policy = BackoffRetryPolicy(jitter="none")
    assert decide(policy, ValueError(), retry_delay=dt.timedelta(0)).retry_delay == dt.timedelta(seconds=1)


def test_retry_after_counts_against_the_budget() -> None:
    policy = BackoffRetryPolicy(initial=1, rules=[HTTP_ERRORS], budget=dt.timedelta(minutes=5))
    assert decide(policy, HTTPError(429, {"Retry-After": "600"})).action.value == "fail"


# ---- validation and text -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": 0}, "initial must be"),
        ({"initial": 10, "cap": 5}, "cap must be"),
        ({"factor": 0.5}, "factor must be"),
        ({"jitter": "random"}, "jitter must be one of none, full, equal, decorrelated"),
        ({"rules": [ValueError]}, "rules must be a list of airflow_smart_ext.retries.Rule"),
        ({"default": "ignore"}, "default must be one of 'retry', 'fail', 'airflow'"),
        ({"budget": -5}, "budget must be"),
        ({"budget": 60, "budget_anchor": "now"}, "budget_anchor must be one of data_interval_end"),
        ({"max_retry_after": 0}, "max_retry_after must be"),
    ],
)
def test_bad_arguments_fail_with_the_parameter_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackoffRetryPolicy(**kwargs)


def test_bad_rules() -> None:
    with pytest.raises(ValueError, match="Rule errors: cannot import 'nope.Missing'"):
        Rule("nope.Missing")
    with pytest.raises(ValueError, match="Rule action must be one of"):
        Rule(ValueError, "skip")


def test_one_line_description() -> None:
    policy = BackoffRetryPolicy(
        initial=30,
        cap=600,
        rules=[Rule(PermissionError, "fail"), HTTP_ERRORS, CONNECTION_ERRORS],
        default="fail",
        budget=dt.timedelta(hours=6),
    )
    text = policy.describe()
    assert "\n" not in text
    assert text == (
        "BackoffRetryPolicy: backoff 30s x2 up to 10m, equal jitter; PermissionError -> fail; "
        "HTTP 429/408/5xx retry (Retry-After honoured), other 4xx fail; connection errors/timeouts retry; "
        "otherwise fail; budget data_interval_end + 6h"
    )
    assert repr(policy) == f"<{text}>"


def test_reason_fits_airflows_column() -> None:
    policy = BackoffRetryPolicy(initial=1, rules=[Rule(type("E" * 600, (Exception,), {}), "fail")])
    exc = type("E" * 600, (Exception,), {})()
    assert len(decide(policy, exc).reason) <= 500


# ---- inside Airflow --------------------------------------------------------------------------------------
def test_attaches_to_operators_and_mapped_tasks() -> None:
    from airflow.sdk import DAG, task

    policy = BackoffRetryPolicy(initial=5, rules=[HTTP_ERRORS])
    with DAG("rp_unit", schedule=None):

        @task(retry_policy=policy, retries=3)
        def one() -> None: ...

        @task(retry_policy=policy, retries=3)
        def many(x: int) -> None: ...

        plain = one()
        mapped = many.expand(x=[1, 2])
    assert plain.operator.retry_policy is policy
    assert mapped.operator.retry_policy is policy


def test_a_policy_that_raises_falls_back_to_airflows_logic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow's own task runner catches an exception from ``evaluate`` and uses its default logic."""
    from airflow.sdk.execution_time.task_runner import _evaluate_retry_policy

    policy = BackoffRetryPolicy(initial=5)

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("policy bug")

    monkeypatch.setattr(policy, "match", broken)
    logged: list[str] = []
    log = SimpleNamespace(exception=lambda message, **_: logged.append(message), info=lambda *a, **k: None)
    ti = SimpleNamespace(
        task=SimpleNamespace(retry_policy=policy), try_number=1, _ti_context_from_server=None
    )
    assert _evaluate_retry_policy(ti, ValueError("x"), log, context()) is None  # type: ignore[arg-type]
    assert logged == ["Retry policy evaluation failed, falling back to default behaviour"]
