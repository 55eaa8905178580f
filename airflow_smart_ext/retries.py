"""Task retries with backoff: :class:`BackoffRetryPolicy` on Airflow 3.3's retry policies (AIP-105).

``retry_policy=BackoffRetryPolicy(...)`` on any operator or ``@task`` decides, in the worker, after each
failed try: retry after a seeded, jittered, capped backoff delay; fail now; or leave it to Airflow.

- **Delays** come from :class:`airflow_smart_ext.backoff.BackoffPolicy`, the schedule the sensors use: the
  delay before retry ``k`` is the gap between checks ``k-1`` and ``k`` of the policy for a seed made of the
  task instance's identity (dag_id, task_id, run_id, map_index). Every machine computes the same delays,
  tasks of one fan-out (mapped or not) spread over the jitter window, and no try number overflows.
- **Rules**, first match wins, then ``default``: exception types (classes or dotted paths) mapped to
  ``"retry"``, ``"fail"``, ``"airflow"`` (Airflow's own ``retry_delay`` logic) or another ``BackoffPolicy``.
  Built-ins :data:`HTTP_ERRORS` and :data:`CONNECTION_ERRORS` read exceptions through
  :func:`airflow_smart_ext.errors.classify`, the one place that decides what is transient.
- **Retry-After** (seconds or an HTTP date) is honoured: the delay is at least what the server asked, also
  above ``cap`` (the cap bounds our own backoff, not the server's instruction); a Retry-After longer than
  ``max_retry_after`` fails now.
- **Budget**: no try starts after ``budget_anchor + budget`` (anchor from the run: stable across tries).
- Every decision has a readable ``reason``; Airflow writes it to the task log ("Retry policy decision").

Airflow >= 3.3 only: building a policy on older versions raises at DAG parse (see
:func:`airflow_smart_ext.compat.retry_policies.require_retry_policies`); importing this module works everywhere.
"""

from __future__ import annotations

import datetime
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import units
from airflow_smart_ext.backoff import DEFAULT_CAP_SECONDS, BackoffPolicy, task_seed
from airflow_smart_ext.compat.retry_policies import (
    RETRY_POLICIES_SUPPORTED,
    RETRY_POLICY_MIN_AIRFLOW,
    RetryAction,
    RetryDecision,
    RetryPoliciesUnsupported,
    RetryPolicy,
    require_retry_policies,
)
from airflow_smart_ext.errors import ErrorClass, classify, resolve_error_types, type_path
from airflow_smart_ext.wait_model.parameters import check_retry_schedule

__all__ = [
    "ACTIONS",
    "BUDGET_ANCHORS",
    "CONNECTION_ERRORS",
    "HTTP_ERRORS",
    "RETRY_POLICIES_SUPPORTED",
    "RETRY_POLICY_MIN_AIRFLOW",
    "BackoffRetryPolicy",
    "ConnectionErrors",
    "HttpErrors",
    "RetryPoliciesUnsupported",
    "Rule",
    "retry_seed",
]

ACTIONS = ("retry", "fail", "airflow")
# Where the budget is counted from; all are fixed for the run, so every try computes the same deadline.
BUDGET_ANCHORS = ("data_interval_end", "logical_date", "run_after", "run_start")
DEFAULT_MAX_RETRY_AFTER = 86400.0  # like Airflow's [core] max_task_retry_delay
_REASON_LIMIT = 500  # Airflow stores retry_reason in a String(500)


def retry_seed(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """The seed of a task instance's retry delays: the same for all its tries, on every machine.

    ``task_seed`` with try number 0, which no sensor try uses (tries count from 1).
    """
    return task_seed(dag_id, task_id, run_id, map_index, try_number=0)


def _seconds(name: str, value: Any, accepted: str, *, allow_zero: bool = False) -> float:
    seconds = units.seconds(value) if isinstance(value, datetime.timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise ValueError(f"{name} must be {accepted}; got {value!r}")
    seconds = float(seconds)
    if not (math.isfinite(seconds) and (seconds >= 0 if allow_zero else seconds > 0)):
        raise ValueError(f"{name} must be {accepted}; got {value!r}")
    return seconds


def _check_action(value: Any, param: str) -> str | BackoffPolicy:
    if isinstance(value, BackoffPolicy) or value in ACTIONS:
        return value  # type: ignore[no-any-return]
    raise ValueError(
        f"{param} must be one of {', '.join(repr(a) for a in ACTIONS)} or a "
        f"airflow_smart_ext.backoff.BackoffPolicy (retry on that schedule); got {value!r}"
    )


@dataclass(frozen=True)
class _Match:
    action: str | BackoffPolicy
    reason: str
    retry_after: float | None = None


class Rule:
    """``errors`` (exception classes or dotted paths; subclasses match) -> ``action``.

    ``action``: ``"retry"`` (the policy's backoff), ``"fail"`` (fail now, remaining retries skipped),
    ``"airflow"`` (Airflow's own retry logic: ``retry_delay`` / ``retry_exponential_backoff``) or a
    :class:`~airflow_smart_ext.backoff.BackoffPolicy` (retry on that schedule instead).
    """

    def __init__(
        self,
        errors: Iterable[type[BaseException] | str] | type[BaseException] | str,
        action: str | BackoffPolicy = "retry",
    ) -> None:
        self.types = resolve_error_types(
            [errors] if isinstance(errors, (str, type)) else errors, "Rule errors"
        )
        if not self.types:
            raise ValueError("Rule errors must name at least one exception class or dotted path")
        self.action = _check_action(action, "Rule action")

    def match(self, exc: BaseException, now: datetime.datetime) -> _Match | None:
        if isinstance(exc, self.types):
            return _Match(self.action, f"{type(exc).__name__} matched {self}")
        return None

    def describe(self) -> str:
        names = ", ".join(cls.__name__ for cls in self.types)
        return f"{names} -> {_action_text(self.action)}"

    def __repr__(self) -> str:
        paths = [type_path(cls) for cls in self.types]
        return f"Rule({paths[0] if len(paths) == 1 else paths!r}, {self.action!r})"


class HttpErrors(Rule):
    """Built-in: an error carrying an HTTP status (``errors.http_status``): 429, 408 and 5xx retry with
    ``Retry-After`` honoured, every other 4xx fails now. Other errors do not match."""

    def __init__(self, backoff: BackoffPolicy | None = None) -> None:
        self.types = ()
        self.action = _check_action(backoff or "retry", "HttpErrors backoff")

    def match(self, exc: BaseException, now: datetime.datetime) -> _Match | None:
        found = classify(exc, now=now)
        if found.http_status is None:
            return None
        if not found.transient:
            return _Match("fail", found.reason)
        return _Match(self.action, found.reason, found.retry_after)

    def describe(self) -> str:
        retry = "retry" if self.action == "retry" else _action_text(self.action)
        return f"HTTP 429/408/5xx {retry} (Retry-After honoured), other 4xx fail"

    def __repr__(self) -> str:
        return "HTTP_ERRORS" if self.action == "retry" else f"HttpErrors({self.action!r})"


class ConnectionErrors(Rule):
    """Built-in: what ``errors.classify`` calls transient without an HTTP status -- connection failures,
    timeouts (requests, httpx, urllib, aiohttp, builtins) and an unavailable database (DB-API
    ``OperationalError`` other than a bad statement) -- retry."""

    def __init__(self, backoff: BackoffPolicy | None = None) -> None:
        self.types = ()
        self.action = _check_action(backoff or "retry", "ConnectionErrors backoff")

    def match(self, exc: BaseException, now: datetime.datetime) -> _Match | None:
        found: ErrorClass = classify(exc, now=now)
        if found.transient and found.http_status is None:
            return _Match(self.action, found.reason)
        return None

    def describe(self) -> str:
        return f"connection errors/timeouts {_action_text(self.action)}"

    def __repr__(self) -> str:
        return "CONNECTION_ERRORS" if self.action == "retry" else f"ConnectionErrors({self.action!r})"


HTTP_ERRORS = HttpErrors()
CONNECTION_ERRORS = ConnectionErrors()


def _action_text(action: str | BackoffPolicy) -> str:
    if isinstance(action, BackoffPolicy):
        return f"retry ({action.describe()})"
    return {"retry": "retry", "fail": "fail", "airflow": "Airflow's retry logic"}[action]


def _attr(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _aware(value: Any) -> datetime.datetime | None:
    if not isinstance(value, datetime.datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)


class BackoffRetryPolicy(RetryPolicy):
    """Retry a task after seeded, jittered, exponentially growing delays; classify errors; keep a budget.

    :param initial: delay base of the first retry (seconds or timedelta). None: the task's ``retry_delay``.
    :param factor: growth per retry (>= 1). :param jitter: ``none``, ``full``, ``equal``, ``decorrelated``.
    :param cap: largest backoff delay. None: the task's ``max_retry_delay``, else 1 day.
    :param rules: ordered :class:`Rule` s (e.g. :data:`HTTP_ERRORS`, :data:`CONNECTION_ERRORS`); first match
        wins. :param default: action for an error no rule matches (default ``"retry"``).
    :param budget: no try starts later than ``budget_anchor + budget`` (None: no budget).
    :param budget_anchor: one of :data:`BUDGET_ANCHORS`: ``data_interval_end`` (falls back to ``run_after``
        for a run without a data interval), ``logical_date``, ``run_after``, ``run_start`` (the run's start).
    :param max_retry_after: a server asking to wait longer than this (``Retry-After``) fails the task now.
    """

    def __init__(
        self,
        initial: float | datetime.timedelta | None = None,
        factor: float = 2.0,
        cap: float | datetime.timedelta | None = None,
        jitter: str = "equal",
        *,
        rules: Sequence[Rule] = (),
        default: str | BackoffPolicy = "retry",
        budget: float | datetime.timedelta | None = None,
        budget_anchor: str = "data_interval_end",
        max_retry_after: float | datetime.timedelta = DEFAULT_MAX_RETRY_AFTER,
    ) -> None:
        require_retry_policies("BackoffRetryPolicy")
        # Validate the schedule now (parse time) even when initial/cap come from the task at run time.
        check_retry_schedule({"initial": initial, "factor": factor, "cap": cap, "jitter": jitter})
        schedule: dict[str, Any] = {"initial": 1e-3 if initial is None else initial, "cap": cap}
        probe = BackoffPolicy(factor=factor, jitter=jitter, **schedule)  # accepts seconds or timedelta
        self.initial: float | None = None if initial is None else probe.initial
        self.cap: float | None = None if cap is None else probe.cap_seconds
        self.factor = probe.factor
        self.jitter = jitter
        self._backoff = probe if initial is not None and cap is not None else None
        if not isinstance(rules, (Rule, str)):
            rules = tuple(rules)  # a generator would be used up by the check below
        if isinstance(rules, (Rule, str)) or not all(isinstance(rule, Rule) for rule in rules):
            raise ValueError(
                "rules must be a list of airflow_smart_ext.retries.Rule (e.g. Rule(ValueError, 'fail'), "
                f"HTTP_ERRORS, CONNECTION_ERRORS); got {rules!r}"
            )
        self.rules = tuple(rules)
        self.default = _check_action(default, "default")
        accepted = "a number of seconds > 0 or a timedelta"
        self.budget = None if budget is None else _seconds("budget", budget, accepted + " (or None)")
        if budget_anchor not in BUDGET_ANCHORS:
            raise ValueError(
                f"budget_anchor must be one of {', '.join(BUDGET_ANCHORS)}; got {budget_anchor!r}"
            )
        self.budget_anchor = budget_anchor
        self.max_retry_after = _seconds("max_retry_after", max_retry_after, accepted)

    # ---- the schedule ---------------------------------------------------------------------------------
    def backoff_for(self, task: Any = None) -> BackoffPolicy:
        """The backoff schedule; ``initial``/``cap`` left None come from ``task`` (retry_delay/max_retry_delay)."""
        if self._backoff is not None:
            return self._backoff
        initial = self.initial
        if initial is None:
            initial = _attr(task, "retry_delay")
            initial = units.seconds(initial) if isinstance(initial, datetime.timedelta) else initial
            # No task (no context): Airflow's default retry_delay. A zero retry_delay counts as 1 s, the floor
            # Airflow's own exponential backoff applies.
            initial = 300.0 if initial is None else max(float(initial), 1.0)
        cap = self.cap
        if cap is None:
            task_cap = _attr(task, "max_retry_delay")
            task_cap = units.seconds(task_cap) if isinstance(task_cap, datetime.timedelta) else task_cap
            cap = float(task_cap) if task_cap else DEFAULT_CAP_SECONDS
        # What the user gave wins over what the task gives: an explicit cap caps an inherited retry_delay
        # (as max_retry_delay caps Airflow's own), an explicit initial lifts an inherited max_retry_delay.
        if self.initial is None:
            initial = min(initial, cap)
        else:
            cap = max(cap, initial)
        return BackoffPolicy(initial=initial, factor=self.factor, cap=cap, jitter=self.jitter)

    # ---- the decision -----------------------------------------------------------------------------------
    def match(self, exception: BaseException, now: datetime.datetime) -> _Match:
        """The first rule matching ``exception`` (else ``default``): its action and the reason so far."""
        for rule in self.rules:
            found = rule.match(exception, now)
            if found is not None:
                return found
        return _Match(self.default, f"{type(exception).__name__} (no rule matched: default)")

    def budget_deadline(self, context: Any) -> tuple[datetime.datetime, str] | None:
        """(deadline, how it was derived) from the run in ``context``; None without a budget or an anchor."""
        if self.budget is None or context is None:
            return None
        dag_run = _attr(context, "dag_run")
        anchors = {
            "data_interval_end": _attr(context, "data_interval_end") or _attr(dag_run, "data_interval_end"),
            "logical_date": _attr(context, "logical_date") or _attr(dag_run, "logical_date"),
            "run_after": _attr(dag_run, "run_after"),
            "run_start": _attr(dag_run, "start_date"),
        }
        name = self.budget_anchor
        anchor = _aware(anchors[name])
        if anchor is None and name == "data_interval_end":  # 3.x manual runs without a data interval
            name, anchor = "run_after", _aware(anchors["run_after"])
        if anchor is None:
            return None
        return anchor + datetime.timedelta(
            seconds=self.budget
        ), f"{name} + {units.duration_text(self.budget)}"

    def evaluate(
        self,
        exception: BaseException,
        try_number: int,
        max_tries: int,
        context: Any = None,
    ) -> RetryDecision:
        now = datetime.datetime.now(datetime.timezone.utc)
        found = self.match(exception, now)
        reason = found.reason
        if found.action == "fail":
            return RetryDecision.fail(reason=_clip(f"{reason} -> fail now, no retry"))
        if found.action == "airflow":
            return RetryDecision(
                action=RetryAction.DEFAULT, reason=_clip(f"{reason} -> Airflow's retry logic")
            )
        if try_number > max_tries:
            # Airflow fails the task anyway; DEFAULT keeps its normal failure path (metrics, callbacks).
            return RetryDecision(
                action=RetryAction.DEFAULT,
                reason=_clip(f"{reason} -> no retries left (try {try_number}, max_tries={max_tries})"),
            )
        ti = _attr(context, "ti")
        backoff = (
            found.action
            if isinstance(found.action, BackoffPolicy)
            else self.backoff_for(_attr(context, "task"))
        )
        map_index = _attr(ti, "map_index")
        seed = retry_seed(
            str(_attr(ti, "dag_id")),
            str(_attr(ti, "task_id")),
            str(_attr(ti, "run_id")),
            -1 if map_index is None else int(map_index),
        )
        backoff_delay = backoff.sleep(seed, try_number)
        delay, why = backoff_delay, f"backoff {backoff_delay:.1f}s"
        if found.retry_after is not None:
            if found.retry_after > self.max_retry_after:
                return RetryDecision.fail(
                    reason=_clip(
                        f"{reason}: Retry-After {found.retry_after:.0f}s is longer than max_retry_after "
                        f"{units.duration_text(self.max_retry_after)} -> fail now"
                    )
                )
            if found.retry_after > backoff_delay:
                delay, why = (
                    found.retry_after,
                    f"Retry-After {found.retry_after:.0f}s > backoff {backoff_delay:.1f}s",
                )
        deadline = self.budget_deadline(context)
        if deadline is None and self.budget is not None:
            why += f"; budget not checked: the context has no {self.budget_anchor}"
        if deadline is not None:
            starts = now + datetime.timedelta(seconds=delay)
            if starts > deadline[0]:
                return RetryDecision.fail(
                    reason=_clip(
                        f"{reason}: retry budget spent -- retry {try_number} would start at "
                        f"{units.iso_of(starts)}, after the deadline "
                        f"{units.iso_of(deadline[0])} ({deadline[1]}) -> fail now"
                    )
                )
        return RetryDecision.retry(
            delay=datetime.timedelta(seconds=delay),
            reason=_clip(f"{reason} -> retry {try_number} of {max_tries} in {delay:.1f}s ({why})"),
        )

    # ---- text ---------------------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line for logs and docs."""
        if self._backoff is not None:
            schedule = self._backoff.describe()
        else:
            initial = "retry_delay" if self.initial is None else units.duration_text(self.initial)
            cap = "max_retry_delay" if self.cap is None else units.duration_text(self.cap)
            schedule = f"{initial} x{self.factor:g} up to {cap}, {self.jitter} jitter"
        parts = [f"backoff {schedule}"]
        parts += [rule.describe() for rule in self.rules]
        parts.append(f"otherwise {_action_text(self.default)}")
        if self.budget is not None:
            parts.append(f"budget {self.budget_anchor} + {units.duration_text(self.budget)}")
        return "BackoffRetryPolicy: " + "; ".join(parts)

    def __repr__(self) -> str:
        return f"<{self.describe()}>"


def _clip(text: str) -> str:
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."
