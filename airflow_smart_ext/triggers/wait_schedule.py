"""The schedule a wait follows in the triggerer: its policy's checks from ``(seed, anchor)`` up to its own
deadline — and how it joins the schedule its sharing group already runs (one condition, one schedule per
process).

Identical waits that started apart (another grid cell, a later try, a rebuilt trigger) would each run their
own schedule: one condition checked on two timelines. The first wait of a policy in a group sets the group's
schedule; later ones adopt its seed and anchor, their deadline stays their own.
"""

from __future__ import annotations

from airflow_smart_ext import clock
from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.triggers import check_groups
from airflow_smart_ext.wait_model import timeline


class WaitSchedule:
    """When a wait's checks are due: ``policy`` from ``(seed, anchor)``; the deadline is the wait's own."""

    def __init__(self, policy: BackoffPolicy, seed: str, anchor: float) -> None:
        self.policy = policy
        self.seed = seed
        self.anchor = anchor
        self._own = (seed, anchor)  # the wait's own schedule, before it joined its group's
        # decorrelated offsets replay the series from the seed (O(n), seconds for a cold replay far into a
        # long wait): computed off the event loop. The other strategies are O(1) and stay inline.
        self._offload = policy.jitter == "decorrelated"
        self._offsets = timeline.Offsets(policy, seed, keep=4)  # the few offsets of the current step

    def _timeline(self, deadline: float | None, try_started_at: float | None) -> timeline.Timeline:
        """The schedule this wait follows, as the wait model states it: its own, or its group's once joined."""
        own = timeline.Timeline(self.policy, *self._own, deadline, try_started_at)
        return own.joined(self.seed, self.anchor)

    async def next(
        self, after: int, deadline: float | None, try_started_at: float | None = None
    ) -> ScheduledCheck | None:
        """The check due next with check ``after`` made (``Timeline.next_check``); None past ``deadline``."""
        line = self._timeline(deadline, try_started_at)
        if self._offload:
            return await runtime.run_blocking(line.next_check, clock.now(), after)
        return line.next_check(clock.now(), after, self._offsets)

    async def interval_before(self, scheduled: ScheduledCheck) -> float:
        """Seconds from the check before ``scheduled`` to it (``Timeline.interval_before``)."""
        line = self._timeline(None, None)
        if self._offload:
            return await runtime.run_blocking(line.interval_before, scheduled)
        return line.interval_before(scheduled, self._offsets)

    async def began(
        self, after: int, deadline: float | None, try_started_at: float | None
    ) -> ScheduledCheck | None:
        """The first check of a wait that begins now with check ``after`` made, on the schedule it follows
        (``Timeline.began``: its own, or its group's once it joined)."""
        line = self._timeline(deadline, try_started_at)
        if self._offload:
            return await runtime.run_blocking(line.began, clock.now(), after)
        return line.began(clock.now(), after, self._offsets)

    def join(self, group: check_groups.CheckGroup) -> bool:
        """Follow the schedule ``group`` already runs for this policy; ``True`` when it is not our own."""
        seed, anchor = group.schedule_for(self.policy, (self.seed, self.anchor))
        if (seed, anchor) == (self.seed, self.anchor):
            return False
        self.seed, self.anchor = seed, anchor
        self._offsets = timeline.Offsets(self.policy, seed, keep=4)
        return True
