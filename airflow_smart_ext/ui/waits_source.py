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
from collections.abc import Collection, Mapping
from typing import Any

from airflow_smart_ext import compat, secret_kwargs, units
from airflow_smart_ext.conditions import sensor_poke as sensor_check
from airflow_smart_ext.ui import kwargs_store
from airflow_smart_ext.ui.serving import Triggerer, Triggerers
from airflow_smart_ext.ui.trigger_rows import LiveWait, redact_sealed, trigger_paths
from airflow_smart_ext.wait_model import last_check, timeline

__all__ = ["load_live_waits", "load_triggerers"]

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


# (dag_id, hash of the stored JSON text or compressed bytes) -> the DAG's dagrun_timeout in seconds (or None)
_DAGRUN_TIMEOUTS: dict[tuple[str, int], float | None] = {}


def _dagrun_timeout(stored: Any, compressed: bytes | None) -> float | None:
    value = compat.metadata_db.stored_dag(stored, compressed).get("dag", {}).get("dagrun_timeout")
    return None if value is None else float(value)


def _dagrun_timeouts(session: Any, dag_ids: Collection[str]) -> dict[str, float | None]:
    """Each DAG's ``dagrun_timeout`` (seconds) from its latest serialized version, as the scheduler reads it.
    A row that cannot be read gives None: the wait's own deadline still shows."""
    found: dict[str, float | None] = {}
    if not dag_ids:
        return found
    for dag_id, stored, compressed in compat.metadata_db.latest_serialized_dags(session, sorted(dag_ids)):
        try:
            if isinstance(stored, Mapping):  # a JSON column the driver already parsed: nothing to cache
                found[dag_id] = _dagrun_timeout(stored, compressed)
                continue
            key = (dag_id, hash(stored if stored is not None else compressed))
            if key not in _DAGRUN_TIMEOUTS:
                _remember(_DAGRUN_TIMEOUTS, key, _dagrun_timeout(stored, compressed))
            found[dag_id] = _DAGRUN_TIMEOUTS[key]
        except (ValueError, TypeError, AttributeError, OSError, zlib.error):
            found[dag_id] = None
    return found


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
            compat.metadata_db.dag_run_logical_date().label("logical_date"),
            DagRun.data_interval_start,
            DagRun.data_interval_end,
            compat.metadata_db.dag_run_after().label("run_after"),
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
    timeouts = _dagrun_timeouts(session, {row.dag_id for row in rows})
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
                run_deadline=timeline.run_deadline(_epoch(row.run_start), timeouts.get(row.dag_id)),
                last_check=last_check.read_record(row.last_check),
                run_after=_epoch(row.run_after),
            )
        )
    kwargs_store.default_store().save()  # what this request decrypted, for the next start
    return waits
