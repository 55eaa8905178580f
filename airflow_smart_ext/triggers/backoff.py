"""``BackoffTrigger``: a sensor's backoff schedule, run in the triggerer (Contract C).

Everything the trigger needs is in its kwargs (policy, seed, absolute ``started_at`` and ``deadline``, the
check spec), so a rebuilt trigger (triggerer restart, HA reassignment) continues the same schedule from
``(started_at, now)``: missed checks are skipped, the deadline is not reset, and the poke count in events
is the schedule index, not an in-memory counter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck
from airflow_smart_ext.triggers import sharing
from airflow_smart_ext.triggers.checks import (
    CheckOutcome,
    config_non_negative_float,
    make_interpreter,
    make_shared_check,
    sharing_key,
    validate_check_spec,
)
from airflow_smart_ext.triggers.sharing import Observation

CLASSPATH = "airflow_smart_ext.triggers.backoff.BackoffTrigger"
EVENT_STATUSES = ("success", "failure", "timeout", "error")

DEFAULT_SHARING_WINDOW_SECONDS = 5.0
DEFAULT_SHARING_WINDOW_FRACTION = 0.1


def _iso(epoch: float | None) -> str:
    if epoch is None:
        return "none"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds")


def coalescing_window(interval: float) -> float:
    """How much earlier than due a subscriber may be served by a shared check.

    ``min([smart_ext] sharing_window_seconds, [smart_ext] sharing_window_fraction * interval)``, where
    ``interval`` is the gap to this subscriber's previous scheduled check.
    """
    seconds = config_non_negative_float("sharing_window_seconds", DEFAULT_SHARING_WINDOW_SECONDS)
    fraction = config_non_negative_float("sharing_window_fraction", DEFAULT_SHARING_WINDOW_FRACTION)
    return max(0.0, min(seconds, fraction * max(0.0, interval)))


class BackoffTrigger(compat.BaseTrigger):
    """Wait for a condition, checking on the times of a ``BackoffPolicy``; yield exactly one event.

    :param check: the check spec (``{"type": "sensor", ...}`` or ``{"type": "sql", ...}``, Contract C).
    :param policy: ``BackoffPolicy.to_dict()``.
    :param seed: the task's jitter seed (``backoff.task_seed``).
    :param started_at: epoch seconds the schedule is anchored to (check #0 is relative to it).
    :param deadline: epoch seconds of the sensor timeout, or None for no deadline.
    :param after: index of the last check already done (on the worker).
    :param share: share the check with identical waits in this triggerer process.
    """

    def __init__(
        self,
        check: dict[str, Any],
        policy: dict[str, Any],
        seed: str,
        started_at: float,
        deadline: float | None,
        after: int = 0,
        share: bool = True,
    ) -> None:
        super().__init__()
        validate_check_spec(check)
        self.check = check
        self.policy = policy
        self.seed = seed
        self.started_at = started_at
        self.deadline = deadline
        self.after = after
        self.share = share
        self._backoff_policy = BackoffPolicy.from_dict(policy)  # validates; ValueError names the parameter
        self._group: sharing.CheckGroup | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            CLASSPATH,
            {
                "check": self.check,
                "policy": self.policy,
                "seed": self.seed,
                "started_at": self.started_at,
                "deadline": self.deadline,
                "after": self.after,
                "share": self.share,
            },
        )

    # -- schedule --

    def _next(self, after: int) -> ScheduledCheck | None:
        return self._backoff_policy.next_check(
            self.seed, self.started_at, sharing.now(), self.deadline, after=after
        )

    def _interval_before(self, scheduled: ScheduledCheck) -> float:
        if scheduled.index <= 0:
            return scheduled.at - self.started_at
        previous = self.started_at + self._backoff_policy.offset(self.seed, scheduled.index - 1)
        return scheduled.at - previous

    def _event(self, status: str, index: int, outcome: CheckOutcome | None, message: str) -> Any:
        return compat.TriggerEvent(
            {
                "status": status,
                "pokes": max(index, self.after) + 1,
                "waited_seconds": round(max(0.0, sharing.now() - self.started_at), 3),
                "xcom_value": outcome.xcom_value if outcome is not None and status == "success" else None,
                "message": message,
                "check_index": index,
            }
        )

    def _timeout_event(self, index: int) -> Any:
        return self._event(
            "timeout",
            index,
            None,
            f"condition not met by the deadline {_iso(self.deadline)} "
            f"({max(index, self.after) + 1} checks since {_iso(self.started_at)})",
        )

    # -- run --

    async def run(self) -> AsyncIterator[Any]:
        interpret = await make_interpreter(self.check)
        group = sharing.join(sharing_key(self.check), lambda: make_shared_check(self.check), self.share)
        self._group = group
        try:
            scheduled = self._next(self.after)
            self.log.info(
                "BackoffTrigger: %s; seed=%s started_at=%s (%.3f) deadline=%s; resuming after check #%d; "
                "next check #%s at %s; sharing=%s (group of %d)",
                self._backoff_policy.describe(),
                self.seed,
                _iso(self.started_at),
                self.started_at,
                _iso(self.deadline),
                self.after,
                scheduled.index if scheduled else "-",
                _iso(scheduled.at if scheduled else None),
                "on" if self.share else "off",
                group.subscribers,
            )
            while True:
                if scheduled is None:
                    # Only when the deadline passed while nobody was checking (e.g. triggerer down).
                    yield self._timeout_event(self.after)
                    return
                outcome, shared, early = await self._check_when_due(group, scheduled, interpret)
                following = None if outcome.is_terminal or scheduled.final else self._next(scheduled.index)
                self.log.info(
                    "check #%d at=%.3f (scheduled %s)%s: %s%s; group of %d; next check %s",
                    scheduled.index,
                    scheduled.at,
                    _iso(scheduled.at),
                    " early" if early else (" shared" if shared else ""),
                    outcome.status,
                    f" ({outcome.message})" if outcome.message else "",
                    group.subscribers,
                    f"#{following.index} at {_iso(following.at)}" if following else "none",
                )
                if outcome.status == "positive":
                    yield self._event("success", scheduled.index, outcome, "condition met")
                    return
                if outcome.status in ("failure", "timeout", "skip", "error"):
                    yield self._event(outcome.status, scheduled.index, outcome, outcome.message)
                    return
                if scheduled.final or following is None:
                    yield self._timeout_event(scheduled.index)
                    return
                scheduled = following
        finally:
            self._leave()

    async def _check_when_due(
        self, group: sharing.CheckGroup, scheduled: ScheduledCheck, interpret: Any
    ) -> tuple[CheckOutcome, bool, bool]:
        """Wait until ``scheduled.at``, completing early on a group observation terminal for us."""
        seen = group.seq
        while True:
            news = await group.wait_for_news(seen, scheduled.at - sharing.now())
            if news is None:
                break
            seen = news.seq
            outcome = self._interpret(news, interpret)
            # Another subscriber's check found our condition (or a failure criterion): done now.
            if outcome.status in ("positive", "failure"):
                return outcome, True, True
        window = coalescing_window(self._interval_before(scheduled))
        observation, shared = await group.observe(scheduled.at, window, self.check.get("context", {}))
        return self._interpret(observation, interpret), shared, False

    @staticmethod
    def _interpret(observation: Observation, interpret: Any) -> CheckOutcome:
        if observation.error is not None:
            return CheckOutcome("error", message=observation.error)
        outcome: CheckOutcome = interpret(observation.raw)
        return outcome

    def _leave(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.leave()

    async def cleanup(self) -> None:
        """Release local resources only (our group membership); never touches the condition itself."""
        self._leave()

    async def on_kill(self) -> None:
        """Nothing external to cancel: a check is a read. Idempotent, safe on reassignment (3.3)."""
        self._leave()
