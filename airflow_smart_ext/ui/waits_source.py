"""Read the live waits of our sensors from Airflow's metadata DB (the glue of the Waits view).

One query: deferred task instances joined to their trigger rows (of our two classpaths), their runs and the
triggerer jobs holding the rows (who serves each wait: ``serving``; :func:`load_triggerers` the live ones). The
kwargs are decrypted as ``Trigger.kwargs`` does and sealed values opened (the sharing key is computed on
opened values); the copy that may be shown has every secret masked. Both are cached per trigger row (its
kwargs never change: a page refresh decrypts only new trigger rows) and per decrypted text, each kwarg shared
by equal values (the redaction is the costly part); the decrypted texts outlive a restart encrypted
(``kwargs_store``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_smart_ext import clock, compat, secret_kwargs, units
from airflow_smart_ext.conditions import sensor_poke as sensor_check
from airflow_smart_ext.ui import calendar_due, kwargs_store, worker_rows
from airflow_smart_ext.ui.serving import Triggerer, Triggerers
from airflow_smart_ext.ui.trigger_rows import LiveWait, redact_sealed, trigger_paths
from airflow_smart_ext.wait_model import deferral_paths, last_check, late_told, timeline

if TYPE_CHECKING:
    from airflow_smart_ext.timetables.due import DueTime

__all__ = ["load_live_waits", "load_triggerers", "load_worker_waits"]

_CACHE_SIZE = 50_000  # entries per cache (cleared when full)
_EPOCH = datetime.datetime(1970, 1, 1)
# More readable DAG ids than this are filtered here, not in SQL (bound-parameter limits, e.g. SQLite's).
_IN_LIST_LIMIT = 500
Opened = tuple[Any, Any]  # (a value with its sealed values opened, the value as it may be shown)
# (trigger id, created) -> opened, shown: a trigger row's kwargs never change (the pair is unique even where
# SQLite reuses the id of a deleted last row); an int key also spares hashing kilobytes of Fernet text per row.
_BY_TRIGGER: dict[tuple[int, Any], tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
_BY_VALUE: dict[tuple[str, Any], Opened] = {}  # (kwarg name, its value or JSON) -> one Opened per value
# decrypted kwargs JSON -> opened, shown: the rows of one task over many runs hold equal plaintext
_BY_PLAINTEXT: dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}


def _epoch(value: datetime.datetime | None) -> float | None:
    """Epoch seconds of a value of Airflow's ``UtcDateTime`` (always UTC: its offset is zero)."""
    return None if value is None else units.epoch(value)


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(cache) >= _CACHE_SIZE:
        cache.clear()
    cache[key] = value
    return value


def _open_value(name: str, value: Any) -> Opened:
    """One kwarg, opened and as it may be shown; the same objects for equal values (waits on one condition
    share them: the redaction, the costly part, runs once, and the model memoises conditions by object)."""
    # Containers by their JSON; scalars as they are (typed: 1, 1.0 and True are equal keys otherwise).
    key = (
        name,
        json.dumps(value, sort_keys=True, default=str)
        if isinstance(value, (dict, list))
        else (type(value), value),
    )
    cached = _BY_VALUE.get(key)
    if cached is None:
        opened = value
        # Unreadable (another [core] fernet_key): the envelopes stay, so such waits stay apart and hidden.
        with contextlib.suppress(secret_kwargs.SealedValueUnreadable):
            if secret_kwargs.is_sealed(value):
                opened = secret_kwargs.unseal(
                    value
                )  # also registers each opened value with the secrets masker
        # Sealed values as "***", then whatever Airflow's secrets masker hides (under this kwarg's name).
        cached = _remember(
            _BY_VALUE, key, (opened, compat.locations.redact_secrets(redact_sealed(value), name))
        )
    return cached  # type: ignore[no-any-return]


def _deserialize(plaintext: str) -> dict[str, Any]:
    """Decrypted kwargs JSON, deserialized as ``Trigger.kwargs`` does: its static method takes text starting
    with "{" as unencrypted (the same on 2.11 and 3.x; called on the text so no ORM object is built per row)."""
    from airflow.models.trigger import Trigger

    return Trigger._decrypt_kwargs(plaintext)  # type: ignore[no-any-return]


def _opened(trigger: tuple[int, Any], stored: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """A trigger row's kwargs with sealed values opened, and as they may be shown (the same objects for rows
    of equal plaintext: one task's waits over many runs are deserialized and opened once)."""
    cached = _BY_TRIGGER.get(trigger)
    if cached is None:
        plaintext = kwargs_store.default_store().plaintext(stored)
        cached = _BY_PLAINTEXT.get(plaintext)
        if cached is None:
            parts = {name: _open_value(name, value) for name, value in _deserialize(plaintext).items()}
            opened = {name: part[0] for name, part in parts.items()}
            shown = {name: part[1] for name, part in parts.items()}
            cached = _remember(_BY_PLAINTEXT, plaintext, (opened, shown))
        _remember(_BY_TRIGGER, trigger, cached)
    return cached  # type: ignore[no-any-return]


@dataclass(frozen=True)
class DagFacts:
    """What the Waits view reads of a DAG's latest serialized version."""

    dagrun_timeout: float | None = None  # seconds (None: none, or the row cannot be read)
    #: task id -> its readable due times (``due=``: one, or one per mapped value)
    due: Mapping[str, tuple[calendar_due.DueRule, ...]] = field(default_factory=dict)
    reschedule: frozenset[str] = frozenset()  # the ids of its tasks in reschedule mode

    def due_of(self, task_id: str, map_index: int) -> DueTime | None:
        """The due time of a task instance: its own (an ``.expand()`` item's), else its task's (None: none is
        known here)."""
        fitting = [rule for rule in self.due.get(task_id, ()) if rule.for_instance(map_index) and rule.due]
        return next((rule.due for rule in sorted(fitting, key=lambda rule: rule.map_index is None)), None)


# (dag_id, dag_hash of its latest serialized version) -> what the view reads of that version
_DAG_FACTS: dict[tuple[str, str], DagFacts] = {}


def _read_dag_facts(stored: Any, compressed: bytes | None) -> DagFacts:
    dag = compat.metadata_db.stored_dag(stored, compressed).get("dag", {})
    timeout = dag.get("dagrun_timeout")
    due: dict[str, tuple[calendar_due.DueRule, ...]] = {}
    for rule in calendar_due.due_rules(dag):
        if rule.due is not None:
            due[rule.task_id] = (*due.get(rule.task_id, ()), rule)
    return DagFacts(
        None if timeout is None else float(timeout),
        due,
        frozenset(worker_rows.reschedule_task_ids(dag)) if due else frozenset(),
    )


def _dag_facts(session: Any, dag_ids: Collection[str]) -> dict[str, DagFacts]:
    """Each DAG's ``dagrun_timeout`` (as the scheduler reads it) and its tasks' due times, from its latest
    serialized version: read once per version (its ``dag_hash``), so a request reads only the versions no
    earlier one read. A version that cannot be read gives none: the waits' own deadlines still show."""
    if not dag_ids:
        return {}
    hashes = compat.metadata_db.latest_serialized_dag_hashes(session, sorted(dag_ids))
    unread = sorted(dag_id for dag_id, dag_hash in hashes.items() if (dag_id, dag_hash) not in _DAG_FACTS)
    for dag_id, stored, compressed in (
        compat.metadata_db.latest_serialized_dags(session, unread) if unread else ()
    ):
        try:
            facts = _read_dag_facts(stored, compressed)
        except (ValueError, TypeError, AttributeError, OSError, zlib.error):
            facts = DagFacts()
        if dag_id in hashes:  # (a version stored between the two reads is read again by the next request)
            _remember(_DAG_FACTS, (dag_id, hashes[dag_id]), facts)
    return {dag_id: _DAG_FACTS.get((dag_id, dag_hash), DagFacts()) for dag_id, dag_hash in hashes.items()}


def _holder(holders: dict[int, Triggerer], row: Any) -> Triggerer | None:
    """The job row holding a wait's trigger (None: none holds it, or its job row is gone)."""
    if row.holder_job is None:
        return None
    holder = holders.get(row.triggerer_id)
    if holder is None:
        holder = holders[row.triggerer_id] = Triggerer(
            row.triggerer_id,
            row.triggerer_host,
            _epoch(row.triggerer_heartbeat),
            row.triggerer_ended is not None,
        )
    return holder


def _run_dates() -> tuple[Any, ...]:
    """The columns of a DAG run's instants a due time counts from, named alike on every version:
    ``logical_date``, ``data_interval_start``, ``data_interval_end``, ``run_after``."""
    from airflow.models.dagrun import DagRun

    return (
        compat.metadata_db.dag_run_logical_date().label("logical_date"),
        DagRun.data_interval_start,
        DagRun.data_interval_end,
        compat.metadata_db.dag_run_after().label("run_after"),
    )


def load_triggerers(session: Any, now: float) -> Triggerers:
    """The triggerers alive at ``now`` by Airflow's rule (``Trigger.assign_unassigned``, the same on 2.11 and
    3.x) and its threshold."""
    from airflow.configuration import conf
    from airflow.jobs.job import Job
    from sqlalchemy import select

    threshold = conf.getfloat("triggerer", "triggerer_health_check_threshold")
    since = units.utc(now - threshold)
    rows = session.execute(
        select(Job.id, Job.hostname, Job.latest_heartbeat)
        .where(Job.job_type == "TriggererJob", Job.end_date.is_(None), Job.latest_heartbeat > since)
        .order_by(Job.id)
    )
    return Triggerers(
        threshold, tuple(Triggerer(row.id, row.hostname, _epoch(row.latest_heartbeat)) for row in rows)
    )


def load_live_waits(session: Any, dag_ids: Collection[str] | None) -> list[LiveWait]:
    """Every deferred task instance waiting on one of our triggers (``dag_ids=None``: all DAGs)."""
    if dag_ids is not None and not dag_ids:
        return []
    from airflow.jobs.job import Job
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import and_, select

    placement = compat.trigger_placement.trigger_placement_columns()
    xcom = compat.task_xcoms.xcom_table()
    query = (
        select(
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            TaskInstance.start_date,
            Trigger.id.label("trigger_id"),
            Trigger.classpath,
            Trigger.encrypted_kwargs,
            Trigger.created_date,
            Trigger.triggerer_id,
            *_run_dates(),
            DagRun.start_date.label("run_start"),
            Job.id.label("holder_job"),
            Job.hostname.label("triggerer_host"),
            Job.latest_heartbeat.label("triggerer_heartbeat"),
            Job.end_date.label("triggerer_ended"),
            xcom.value.label("last_check"),
            *(column.label(f"trigger_{name}") for name, column in placement.items()),
        )
        .join(Trigger, TaskInstance.trigger_id == Trigger.id)
        .join(DagRun, and_(DagRun.dag_id == TaskInstance.dag_id, DagRun.run_id == TaskInstance.run_id))
        .outerjoin(Job, Job.id == Trigger.triggerer_id)
        .outerjoin(  # the last-check record the triggerer keeps as the task's XCom (its primary key)
            xcom,
            and_(
                xcom.dag_run_id == DagRun.id,
                xcom.task_id == TaskInstance.task_id,
                xcom.map_index == TaskInstance.map_index,
                xcom.key == last_check.XCOM_KEY,
            ),
        )
        .where(TaskInstance.state == TaskInstanceState.DEFERRED, Trigger.classpath.in_(list(trigger_paths())))
    )
    readable = None if dag_ids is None else set(dag_ids)
    if readable is not None and len(readable) <= _IN_LIST_LIMIT:
        query = query.where(TaskInstance.dag_id.in_(sorted(readable)))
    rows = [row for row in session.execute(query) if readable is None or row.dag_id in readable]
    facts = _dag_facts(session, {row.dag_id for row in rows})
    waits = []
    dates: dict[tuple[Any, Any, Any], dict[str, str | None]] = {}  # one dict per run, not per task
    holders: dict[int, Triggerer] = {}  # one per job: the waits of one triggerer share it
    for row in rows:
        try:
            kwargs, shown = _opened((row.trigger_id, row.created_date), row.encrypted_kwargs)
        except (
            Exception
        ):  # e.g. Fernet's InvalidToken (a rotated key): this row shows as unreadable, the rest
            kwargs = shown = {}  # stays (the model marks a row without kwargs "unreadable trigger kwargs")
        run_key = (row.logical_date, row.data_interval_start, row.data_interval_end)
        run_dates = dates.get(run_key)
        if run_dates is None:
            run_dates = dates[run_key] = sensor_check.run_dates(*run_key)
        waits.append(
            LiveWait(
                dag_id=row.dag_id,
                run_id=row.run_id,
                task_id=row.task_id,
                map_index=row.map_index,
                try_number=row.try_number,
                classpath=row.classpath,
                kwargs=kwargs,
                ti_start=_epoch(row.start_date),
                trigger_created=_epoch(row.created_date),
                shown_kwargs=shown,
                run_dates=run_dates,
                trigger_id=row.trigger_id,
                triggerer_id=row.triggerer_id,
                holder=_holder(holders, row),
                trigger_queue=getattr(row, "trigger_queue", None),
                trigger_team=getattr(row, "trigger_team", None),
                run_deadline=timeline.run_deadline(
                    _epoch(row.run_start), facts.get(row.dag_id, DagFacts()).dagrun_timeout
                ),
                last_check=last_check.read_record(row.last_check),
                run_after=_epoch(row.run_after),
            )
        )
    kwargs_store.default_store().save()  # what this request decrypted, for the next start
    return _with_late_records(waits, _zero_worker_retry)


def _zero_worker_retry(wait: LiveWait) -> bool:
    """A zero-worker retry with a due time: whether its alert was said is its task state store's record."""
    if trigger_paths().get(wait.classpath) != deferral_paths.ZERO_WORKER or wait.try_number < 2:
        return False
    start = wait.kwargs.get("start")
    return isinstance(start, Mapping) and bool(start.get("due"))


def load_worker_waits(session: Any, dag_ids: Collection[str] | None) -> list[worker_rows.WorkerWait]:
    """Every running or rescheduled task instance of a sensor with a due time (``dag_ids=None``: all DAGs):
    the waits whose checks run in a worker (``worker_rows``). One scheduled or queued for a check after a
    reschedule of its try is still waiting (its row must not come and go with each check); one scheduled or
    queued before any has not begun to. The task instances are read only for the tasks with a due time."""
    if dag_ids is not None and not dag_ids:
        return []
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import and_, select

    between_checks = (
        TaskInstanceState.UP_FOR_RESCHEDULE,
        TaskInstanceState.SCHEDULED,
        TaskInstanceState.QUEUED,
    )
    states = TaskInstance.state.in_((TaskInstanceState.RUNNING, *between_checks))
    readable = None if dag_ids is None else set(dag_ids)
    in_dags = select(TaskInstance.dag_id).where(states).distinct()
    facts = _dag_facts(session, [d for (d,) in session.execute(in_dags) if readable is None or d in readable])
    due_tasks = {(dag_id, task_id) for dag_id, dag in facts.items() for task_id in dag.due}
    if not due_tasks:
        return []
    query = (
        select(
            compat.rescheduling.task_instance_id(),
            TaskInstance.dag_id,
            TaskInstance.run_id,
            TaskInstance.task_id,
            TaskInstance.map_index,
            TaskInstance.try_number,
            TaskInstance.state,
            TaskInstance.start_date,
            TaskInstance.hostname,
            TaskInstance.operator,
            *_run_dates(),
        )
        .join(DagRun, and_(DagRun.dag_id == TaskInstance.dag_id, DagRun.run_id == TaskInstance.run_id))
        .where(states)
    )
    if len(due_tasks) <= _IN_LIST_LIMIT:
        query = query.where(
            TaskInstance.dag_id.in_(sorted({d for d, _t in due_tasks})),
            TaskInstance.task_id.in_(sorted({t for _d, t in due_tasks})),
        )
    ours = [row for row in session.execute(query) if (row.dag_id, row.task_id) in due_tasks]
    reschedules = compat.rescheduling.try_reschedules(session, ours)
    instant_names = [column.key for column in _run_dates()]
    waits = []
    for row in ours:
        dag = facts[row.dag_id]
        due = dag.due_of(row.task_id, row.map_index)
        if due is None:  # a mapped instance no readable due time is known for
            continue
        key = (row.dag_id, row.run_id, row.task_id, row.map_index)
        count, first_start, last_date = reschedules.get(key, (0, None, None))
        waiting = row.state in between_checks
        if waiting and not count and row.state != TaskInstanceState.UP_FOR_RESCHEDULE:
            continue  # scheduled or queued for its try's first check: it has not begun to wait
        started = _epoch(first_start if count else row.start_date)
        instants = {name: getattr(row, name) for name in instant_names if getattr(row, name) is not None}
        # reschedule mode as its task says, or as it acts (a deferrable_fallback='reschedule' decided at run time)
        rescheduling = (
            row.task_id in dag.reschedule or count > 0 or row.state == TaskInstanceState.UP_FOR_RESCHEDULE
        )
        waits.append(
            worker_rows.WorkerWait(
                dag_id=row.dag_id,
                run_id=row.run_id,
                task_id=row.task_id,
                map_index=row.map_index,
                try_number=row.try_number,
                path=worker_rows.RESCHEDULE if rescheduling else worker_rows.WORKER,
                sensor_class=row.operator or "",
                due=due,
                instants=instants,
                try_started_at=started if started is not None else clock.now(),
                # a rescheduled task instance keeps the host of its last check: only a running one is served
                hostname=(row.hostname or None) if row.state == TaskInstanceState.RUNNING else None,
                next_check=_epoch(last_date) if waiting else None,
            )
        )
    return _with_late_records(waits)


_Wait = TypeVar("_Wait", LiveWait, worker_rows.WorkerWait)


def _with_late_records(waits: list[_Wait], wanted: Callable[[_Wait], bool] | None = None) -> list[_Wait]:
    """The waits (those ``wanted``) with the late record their task instance's state store keeps (3.3+):
    whether the alert was sent. One the store could not give is ``late_told.NOT_READ``: not known."""
    if not compat.task_state.TASK_STATE_STORE_SUPPORTED:
        return waits
    keys = {
        index: (wait.dag_id, wait.run_id, wait.task_id, wait.map_index)
        for index, wait in enumerate(waits)
        if wanted is None or wanted(wait)
    }
    records = compat.task_state.task_state_values(keys.values(), late_told.KEY) if keys else {}
    return [
        replace(wait, store_read=True, late_record=records.get(keys[index], late_told.NOT_READ))
        if index in keys
        else wait
        for index, wait in enumerate(waits)
    ]
