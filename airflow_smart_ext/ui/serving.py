"""Who serves a wait (issue 35): the triggerer job holding its trigger row, or why none live does (pure).

Airflow's own rule decides whether a holder is alive, as ``Trigger.assign_unassigned`` does on 2.11 and 3.x:
a ``TriggererJob`` without an ``end_date`` whose ``latest_heartbeat`` is newer than ``[triggerer]
triggerer_health_check_threshold`` seconds. A row held by any other job is taken over by the next live
triggerer that has room; until then nothing checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Triggerer", "Triggerers", "serving"]

THRESHOLD_OPTION = "[triggerer] triggerer_health_check_threshold"


@dataclass(frozen=True)
class Triggerer:
    """A triggerer's job row."""

    job_id: int
    hostname: str | None
    heartbeat: float | None  # ``latest_heartbeat`` in epoch seconds
    ended: bool = False  # ``end_date`` is set (it shut down)

    def alive(self, now: float, threshold: float) -> bool:
        """Airflow's rule (``Trigger.assign_unassigned``)."""
        return not self.ended and self.heartbeat is not None and self.heartbeat > now - threshold

    def words(self) -> str:
        return f"job {self.job_id}" + (f" on {self.hostname}" if self.hostname else "")


@dataclass(frozen=True)
class Triggerers:
    """What tells served waits from unserved ones: Airflow's threshold and the triggerers alive now."""

    threshold: float  # seconds: ``[triggerer] triggerer_health_check_threshold``
    live: Sequence[Triggerer] = ()


def _age(heartbeat: float | None, now: float) -> float | None:
    return None if heartbeat is None else round(now - heartbeat, 1)


def _not_taken(queue: str | None, team: str | None, triggerers: Triggerers) -> str:
    live = len(triggerers.live)
    if not live:
        return (
            f"no triggerer holds its trigger and none is alive (a heartbeat within {triggerers.threshold:g}s)"
        )
    takers = [
        *(
            [f"queue '{queue}' (a triggerer takes it only when started with --queues {queue})"]
            if queue
            else []
        ),
        *([f"team '{team}' (only a triggerer of that team takes it)"] if team else []),
    ]
    if takers:
        return f"no triggerer holds its trigger: none of the {live} live triggerer(s) took it from " + (
            " and ".join(takers)
        )
    return (
        f"no triggerer holds its trigger yet: none of the {live} live triggerer(s) took it (not picked up "
        "yet, or every one is at its [triggerer] capacity)"
    )


def serving(
    triggerer_id: int | None,
    holder: Triggerer | None,
    queue: str | None,
    team: str | None,
    triggerers: Triggerers | None,
    now: float,
) -> dict[str, Any]:
    """A wait's ``served_by`` ({job_id, hostname, heartbeat_age} or None), ``unserved_reason`` (plain words;
    None when served or not known), ``trigger_queue`` and ``trigger_team`` (None: none, or none on this
    version). ``triggerers`` None: the triggerers are not known, so neither is who serves (both None)."""
    fields: dict[str, Any] = {
        "served_by": None,
        "unserved_reason": None,
        "trigger_queue": queue,
        "trigger_team": team,
    }
    if triggerers is None:
        return fields
    if triggerer_id is None:
        fields["unserved_reason"] = _not_taken(queue, team, triggerers)
    elif holder is None:
        fields["unserved_reason"] = f"its triggerer (job {triggerer_id}) is gone from the job table"
    elif holder.ended:
        fields["unserved_reason"] = f"its triggerer ({holder.words()}) has shut down"
    elif not holder.alive(now, triggerers.threshold):
        age = _age(holder.heartbeat, now)
        fields["unserved_reason"] = (
            f"its triggerer ({holder.words()}) is dead: "
            + (
                "no heartbeat"
                if age is None
                else f"last heartbeat {age:g}s ago, over Airflow's {triggerers.threshold:g}s"
            )
            + f" ({THRESHOLD_OPTION})"
        )
    else:
        fields["served_by"] = {
            "job_id": holder.job_id,
            "hostname": holder.hostname,
            "heartbeat_age": _age(holder.heartbeat, now),
        }
    return fields
