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
from airflow_smart_ext.triggers import sharing


class WaitSchedule:
    """When a wait's checks are due: ``policy`` from ``(seed, anchor)``; the deadline is the wait's own."""

    def __init__(self, policy: BackoffPolicy, seed: str, anchor: float) -> None:
        self.policy = policy
        self.seed = seed
        self.anchor = anchor
        # decorrelated offsets replay the series from the seed (O(n), seconds for a cold replay far into a
        # long wait): computed off the event loop. The other strategies are O(1) and stay inline.
        self._offload = policy.jitter == "decorrelated"
        self._offsets: dict[int, float] = {}  # the few offsets of the current step (O(1) strategies)

    def _offset(self, index: int) -> float:
        """``policy.offset`` memoised for the current step (each offset is needed two or three times)."""
        offset = self._offsets.get(index)
        if offset is None:
            if len(self._offsets) > 4:
                self._offsets.clear()
            offset = self._offsets[index] = self.policy.offset(self.seed, index)
        return offset

    async def next(self, after: int, deadline: float | None) -> ScheduledCheck | None:
        """The first check after check ``after`` that is not already missed; None past ``deadline``."""
        if self._offload:
            return await runtime.run_blocking(self._next_blocking, after, clock.now(), deadline)
        return self.policy.next_check(
            self.seed, self.anchor, clock.now(), deadline, after=after, offset_of=self._offset
        )

    def _next_blocking(self, after: int, now: float, deadline: float | None) -> ScheduledCheck | None:
        return self.policy.next_check(self.seed, self.anchor, now, deadline, after=after)

    async def interval_before(self, scheduled: ScheduledCheck) -> float:
        """Seconds from the check before ``scheduled`` (or the anchor, for check #0) to ``scheduled``."""
        if scheduled.index <= 0:
            return scheduled.at - self.anchor
        if self._offload:
            previous = await runtime.run_blocking(self.policy.offset, self.seed, scheduled.index - 1)
        else:
            previous = self._offset(scheduled.index - 1)
        return scheduled.at - (self.anchor + previous)

    def join(self, group: sharing.CheckGroup) -> bool:
        """Follow the schedule ``group`` already runs for this policy; ``True`` when it is not our own."""
        seed, anchor = group.schedule_for(self.policy, (self.seed, self.anchor))
        if (seed, anchor) == (self.seed, self.anchor):
            return False
        self.seed, self.anchor = seed, anchor
        self._offsets.clear()
        return True
