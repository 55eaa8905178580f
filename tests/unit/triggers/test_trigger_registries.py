"""Every registry of ours is empty once no wait remains, whatever way the waits ended (issue 25, part 4).

A batch of ``BackoffTrigger`` waits (shared and private, rate-limited, on connections) ends one way — the
condition comes true, the deadline passes, the task is cancelled, the check raises a permanent error, transient
errors are ridden out until it recovers, the check hangs beyond its time limit — and then
``registries.leaks()`` must be empty. Real clock and real check threads (a hung check is really abandoned),
short intervals: a few seconds per case. Pending work is given time to finish first (an abandoned check's
thread returns, a wake-up due within one check interval fires); what stays after that is a leak — e.g. a
wake-up still armed for an ended wait holds its subscription until its moment (the deadline + grace of a
long sensor: hours).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.triggers import BackoffTrigger, registries

INTERVAL = 0.2  # seconds between checks
POLICY = BackoffPolicy(initial=INTERVAL, factor=1, jitter="none", splay=0).to_dict()
HANG = 1.0  # a hung poke blocks this long (its check's time limit is HUNG_TIME_LIMIT)
HUNG_TIME_LIMIT = 0.3
WAITS_PER_CONDITION = 4


class _Keyed(compat.locations.BaseSensorOperator):
    """Stateless: the answer depends on the kwargs and the wall clock only."""

    def __init__(self, *, key: str, at: float = 0.0, conn_id: str = "db", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key, self.at, self.conn_id = key, at, conn_id


class ReadySensor(_Keyed):
    def poke(self, context: Any) -> bool:
        return time.time() >= self.at


class BrokenSensor(_Keyed):
    def poke(self, context: Any) -> bool:
        raise ValueError("misconfigured")  # permanent


class FlakySensor(_Keyed):
    def poke(self, context: Any) -> bool:
        if time.time() < self.at:
            raise ConnectionError("connection refused")  # transient: ridden out
        return True


class HangingSensor(_Keyed):
    def poke(self, context: Any) -> bool:
        time.sleep(HANG)
        return False


# ending -> (sensor, seconds until it comes true / recovers, deadline after start, cancelled after, event)
ENDINGS: dict[str, tuple[str, float, float, float | None, str | None]] = {
    "success": ("ReadySensor", 0.5, 5.0, None, "success"),
    "timeout": ("ReadySensor", 1e9, 0.7, None, "timeout"),
    "cancel": ("ReadySensor", 1e9, 5.0, 0.5, None),
    "error": ("BrokenSensor", 0.0, 5.0, None, "error"),
    "transient": ("FlakySensor", 0.6, 5.0, None, "success"),
    "hung": ("HangingSensor", 0.0, 1.0, None, "timeout"),
}


def _waits(ending: str, start: float) -> list[tuple[BackoffTrigger, float | None, str | None]]:
    sensor, comes_true, deadline, cancel_after, expected = ENDINGS[ending]
    waits = []
    for condition, share in (("shared", True), ("private-a", False), ("private-b", False)):
        for index in range(WAITS_PER_CONDITION if share else 1):
            check = {
                "type": "sensor",
                "classpath": f"{__name__}.{sensor}",
                "kwargs": {
                    "key": f"{ending}-{condition}",
                    "at": start + comes_true,
                    "conn_id": f"db-{ending}",
                },
                "context": {"dag_id": "d", "task_id": f"wait_{index}", "run_id": "r", "ds": "2026-01-02"},
            }
            trigger = BackoffTrigger(
                check=check,
                policy=dict(POLICY),
                seed=f"{ending}-{condition}",
                started_at=start,
                deadline=start + deadline,
                after=0,
                share=share,
                check_timeout=HUNG_TIME_LIMIT if ending == "hung" else None,
                rate_limit=100.0 if ending == "success" else None,
            )
            waits.append((trigger, cancel_after, expected))
    return waits


async def _run(trigger: BackoffTrigger) -> str:
    """One event's status, as Airflow's ``run_trigger`` runs a trigger (``cleanup()`` at the end)."""
    try:
        async for event in trigger.run():
            return str(event.payload["status"])
        return "no event"
    finally:
        await trigger.cleanup()


async def _settled(timeout: float = 15.0) -> dict[str, int]:
    """The registry sizes once work in progress is over: abandoned checks returned, due wake-ups fired."""
    until = time.monotonic() + timeout
    while True:
        sizes = registries.sizes()
        busy = sizes["abandoned.detached"] + sizes["check_threads.running"] + sizes["check_threads.queued"]
        if not busy or time.monotonic() > until:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(3 * INTERVAL)  # a wake-up armed for the next check (at most one interval away) fires
    return registries.sizes()


@pytest.mark.parametrize("endings", [[name] for name in ENDINGS] + [list(ENDINGS)], ids=[*ENDINGS, "all"])
def test_registries_are_empty_after_waits_end(endings: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    # A fresh event loop per case: its per-loop registries start empty, what is left is this batch's.
    sizes = asyncio.run(_batch(endings))
    assert registries.leaks(sizes) == {}, sizes


async def _batch(endings: list[str]) -> dict[str, int]:
    """Run the waits of ``endings`` to their ends; the registry sizes afterwards."""
    start = time.time()
    waits = [wait for ending in endings for wait in _waits(ending, start)]
    tasks = [asyncio.ensure_future(_run(trigger)) for trigger, _, _ in waits]
    loop = asyncio.get_running_loop()
    for task, (_, cancel_after, _) in zip(tasks, waits, strict=True):
        if cancel_after is not None:
            loop.call_later(cancel_after, task.cancel)
    await asyncio.sleep(0.05)  # every wait started, none ended (the first check is one interval away)
    during = registries.sizes()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    statuses = ["cancelled" if isinstance(r, asyncio.CancelledError) else r for r in results]
    expected = [wanted or "cancelled" for _, _, wanted in waits]
    assert statuses == expected
    # The list sees them (private waits' groups are their own, outside the registry).
    assert during["sharing.groups"] == len(endings)
    assert during["sharing.subscribers"] == WAITS_PER_CONDITION * len(endings)
    return await _settled()


async def test_a_leak_is_reported() -> None:
    """The check itself can fail: a group left behind shows up."""
    from airflow_smart_ext.conditions import make_shared_check
    from airflow_smart_ext.triggers import check_groups

    check = _waits("success", time.time())[0][0].check
    group = check_groups.join("left-behind", lambda: make_shared_check(check), share=True)
    try:
        assert registries.leaks()["sharing.groups"] == 1
        assert registries.leaks()["sharing.subscribers"] == 1
    finally:
        with contextlib.suppress(Exception):
            group.leave()
    assert "sharing.groups" not in registries.leaks()
