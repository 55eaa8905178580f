"""The Waits view's rows for waits with a due time whose checks run in a worker: a poke-mode sensor (or a
deferrable one's check before it defers) while it runs, and a reschedule-mode sensor while it checks and
between its checks.
They have no trigger row: what is known of them is their task instance, its reschedules in this try, and
the due time their DAG's serialized task keeps (``smart_ext_due``, read as the Calendars view reads it).
Waits without a due time stay out of the view: nothing marks a worker-side task as one of our sensors.

Pure: the rows are computed from :class:`WorkerWait` facts (``waits_source.load_worker_waits`` reads them).
Whether its late alert was sent is the record its tries keep in Airflow 3.3's task state store
(``wait_model.late_told``); before 3.3 only the task's log says: ``late_alerted`` is None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import units
from airflow_smart_ext.wait_model import late_told

if TYPE_CHECKING:
    from airflow_smart_ext.timetables.due import DueTime

__all__ = ["PATHS", "RESCHEDULE", "WORKER", "WorkerWait", "late_alerted", "reschedule_task_ids", "worker_row"]

RESCHEDULE = "reschedule"  # between checks, the task waits in the scheduler for its reschedule date
WORKER = "worker"  # a check in a running worker process: poke mode, or a deferrable wait before it defers
PATHS = (RESCHEDULE, WORKER)
_CONDITION = {
    RESCHEDULE: "checked in a worker at each reschedule (mode='reschedule')",
    WORKER: "checked in a running worker (mode='poke', or a deferrable wait before it defers)",
}


@dataclass(frozen=True)
class WorkerWait:
    """A running or rescheduled task instance of a sensor with a due time, as the metadata DB has it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    path: str  # RESCHEDULE or WORKER
    sensor_class: str  # the task's class name, as its task instance records it
    due: DueTime
    instants: Mapping[str, Any]  # the run's aware datetimes: logical_date, data_interval_*, run_after
    try_started_at: float  # the try's first check (its first reschedule's start, else the task's start)
    hostname: str | None  # the worker running its check now (None: none)
    #: between checks (up for reschedule, or scheduled or queued for its next check): its last reschedule date
    next_check: float | None = None
    #: whether its task state store was read (Airflow 3.3+), and its late record (None: none written;
    #: ``late_told.NOT_READ``: the store could not give it)
    store_read: bool = False
    late_record: Any = None


def reschedule_task_ids(dag: Mapping[str, Any]) -> set[str]:
    """The ids of a serialized DAG's tasks in reschedule mode: an unmapped task's ``reschedule`` flag, a
    mapped one's ``.partial(mode='reschedule')``."""
    found = set()
    for task in dag.get("tasks") or []:
        fields = task.get("__var", task) if isinstance(task, Mapping) else {}
        partial = fields.get("partial_kwargs") if isinstance(fields, Mapping) else None
        mode = partial.get("mode") if isinstance(partial, Mapping) else None
        if isinstance(fields, Mapping) and (fields.get("reschedule") is True or mode == RESCHEDULE):
            found.add(str(fields.get("task_id")))
    return found


def late_alerted(wait: WorkerWait, due_at: float | None) -> bool | None:
    """Whether the wait said it is late for ``due_at``, as its task state store's record says: an earlier
    try's alert cut short is not (its next check says it again). None: not known (before 3.3, or a record kept
    by reference in a worker's external state backend)."""
    if due_at is None or not wait.store_read:
        return None
    told = late_told.state_of(wait.late_record, units.iso(due_at), wait.try_number)
    return None if told is None else told == late_told.TOLD


def worker_row(
    wait: WorkerWait, now: float, iso: Callable[[float | None], str | None]
) -> tuple[dict[str, Any], float | None]:
    """(the wait's row but its due columns, its due time; None: one its calendar cannot compute): the columns of a trigger row's (``waits_report``
    adds the due ones alike), with no sharing, no triggerer and no deadline known (a sensor's timeout is not
    in its serialized task); its next check is its reschedule date while it waits for it."""
    next_check = wait.next_check
    row = {
        "dag_id": wait.dag_id,
        "run_id": wait.run_id,
        "task_id": wait.task_id,
        "map_index": wait.map_index,
        "try_number": wait.try_number,
        "path": wait.path,
        "served_by": None,
        "unserved_reason": None,
        "trigger_queue": None,
        "trigger_team": None,
        "worker_host": wait.hostname,
        "check_type": None,
        "sensor_class": wait.sensor_class,
        "conn_id": None,
        "condition": _CONDITION[wait.path],
        "sharing_key_hash": None,
        "shared_with": 1,
        # not known: a splayed first run reschedules before its first check, a poke-mode try checks unseen
        "checks_made": None,
        "next_check": iso(next_check),
        "next_check_in": None if next_check is None else round(next_check - now, 3),
        "next_check_exact": True,
        "deadline": None,
        "deadline_in": None,
        "deadline_by": None,
        "started_at": iso(wait.try_started_at),
        "last_check": None,
        "last_outcome": "not recorded (checked in a worker: see the task's log)",
    }
    try:
        due_at: float | None = wait.due.due_epoch(wait.instants, wait.try_started_at)
    except (
        Exception
    ):  # e.g. a year past its calendar's holiday data (the sensor says so): never the page's end
        due_at = None
    return row, due_at
