"""Which triggerer queue a worker-first wait goes to, so identical waits meet in one triggerer.

Sharing works within a triggerer process; Airflow hands triggers to triggerers with no regard to what they
wait for, so with T triggerers one condition is checked up to T times per cycle. With ``[smart_ext]
trigger_queues = q0,q1,...`` (and Airflow's ``[triggerer] queues_enabled``, 3.2+) every wait goes to the
queue its condition hashes to, and each queue is served by one triggerer (``airflow triggerer --queues=q0``):
every condition is checked once per cycle in the whole cluster. The deployment recipe is in docs/deferrable.md.
Zero-worker waits cannot be routed: Airflow's scheduler creates their triggers without a queue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import sharing_key
from airflow_smart_ext.conditions.runtime import CONFIG_SECTION, config_text

#: Airflow's ``trigger.queue`` column is a String(256).
MAX_QUEUE_NAME = 256


def queue_for(key: str, queues: Sequence[str]) -> str:
    """The queue of the condition with sharing key ``key``: stable across processes and restarts."""
    return queues[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(queues)]


def parse_queues(text: str) -> list[str]:
    """``[smart_ext] trigger_queues``: comma-separated queue names (empty: no routing)."""
    queues = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in queues if len(name) > MAX_QUEUE_NAME or any(c.isspace() for c in name)]
    if bad or len(set(queues)) != len(queues):
        raise ValueError(
            f"[{CONFIG_SECTION}] trigger_queues must be distinct comma-separated queue names without spaces "
            f"(at most {MAX_QUEUE_NAME} characters each), got {text!r}"
        )
    return queues


def route(task: Any, check: dict[str, Any]) -> str | None:
    """Give the trigger this task defers to the queue of its condition; the queue, or None (no routing)."""
    try:
        queues = parse_queues(config_text("trigger_queues"))
    except ValueError as err:  # a deployment setting: the wait goes on unrouted, the task log says why
        task.log.error("%s; this wait goes to any triggerer.", err)
        return None
    if not queues:
        return None
    unavailable = compat.deferral.trigger_queue_unavailable()
    if unavailable is not None:
        task.log.warning(
            "[%s] trigger_queues is set but not used: %s; this wait goes to any triggerer.",
            CONFIG_SECTION,
            unavailable,
        )
        return None
    queue = queue_for(sharing_key(check), queues)
    # 3.2+: a worker's deferral gives its trigger the queue ``ti.task.queue`` (sdk task_runner ``_defer_task``).
    # This try already ran on its executor queue, and a resumed try parses the task afresh, so setting it
    # just before deferring moves only the trigger.
    task.queue = queue
    return queue
