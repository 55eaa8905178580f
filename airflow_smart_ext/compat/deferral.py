"""Deferring to the triggerer: the early-event race of 3.x and trigger queues (3.2+)."""

from __future__ import annotations

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_2_PLUS

__all__ = ["TRIGGER_MIN_EVENT_DELAY_SECONDS", "trigger_queue_unavailable"]

# Airflow 3 (seen on 3.3.2 with LocalExecutor): a trigger that fires within ~5 s of the deferral can make the
# scheduler fail the task ("finished with state success, but the task instance's state attribute is queued",
# apache/airflow #71580 / #72716). BackoffTrigger never yields its event sooner than this many seconds after
# it started running. 2.11.2 showed no such failures.
TRIGGER_MIN_EVENT_DELAY_SECONDS = 5.0 if AIRFLOW_V_3_0_PLUS else 0.0


def trigger_queue_unavailable() -> str | None:
    """Why a worker's deferral cannot choose its trigger's queue on this deployment (None: it can).

    3.2+: a worker's deferral gives its trigger the queue ``ti.task.queue`` (sdk task_runner ``_defer_task``).
    """
    if not AIRFLOW_V_3_2_PLUS:
        return "trigger queues need Airflow 3.2 or later"
    from airflow.configuration import conf

    if not conf.getboolean("triggerer", "queues_enabled", fallback=False):
        return "[triggerer] queues_enabled is False"
    return None
