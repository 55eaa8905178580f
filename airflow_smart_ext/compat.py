"""Every difference between Airflow 2.11 and Airflow 3.x lives here.

No other module of this package looks at ``airflow.__version__`` or picks an import location by
version: they import the names below. Keep each branch small and say which versions it serves.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from airflow import __version__ as _AIRFLOW_VERSION_STRING
from packaging.version import Version

if TYPE_CHECKING:
    from pendulum import DateTime

_AIRFLOW_BASE_VERSION = Version(Version(_AIRFLOW_VERSION_STRING).base_version)

AIRFLOW_V_3_0_PLUS = Version("3.0.0") <= _AIRFLOW_BASE_VERSION
AIRFLOW_V_3_1_PLUS = Version("3.1.0") <= _AIRFLOW_BASE_VERSION
AIRFLOW_V_3_2_PLUS = Version("3.2.0") <= _AIRFLOW_BASE_VERSION
AIRFLOW_V_3_3_PLUS = Version("3.3.0") <= _AIRFLOW_BASE_VERSION

# Airflow 3 (seen on 3.3.2 with LocalExecutor): a sensor rescheduled to run again soon can be failed by the
# scheduler when it drains the executor's "success" event of the previous run after the next run was queued
# (apache/airflow #71172, fix proposed in PR #71194; 3 s still lost runs on a loaded 2-core machine). The
# default of `[smart_ext] reschedule_min_gap_seconds`; reschedule mode never asks for a sooner reschedule.
RESCHEDULE_MIN_GAP_SECONDS = 5.0 if AIRFLOW_V_3_0_PLUS else 0.0

# Airflow 3 (seen on 3.3.2 with LocalExecutor): a trigger that fires within ~5 s of the deferral can make the
# scheduler fail the task ("finished with state success, but the task instance's state attribute is queued",
# apache/airflow #71580 / #72716). BackoffTrigger never yields its event sooner than this many seconds after
# it started running. 2.11.2 showed no such failures.
TRIGGER_MIN_EVENT_DELAY_SECONDS = 5.0 if AIRFLOW_V_3_0_PLUS else 0.0

# --- Timetables ---------------------------------------------------------------------------------
# Timetables subclass the *core* Timetable on every version: a Task-SDK BaseTimetable subclass cannot be
# serialized (see shared AIRFLOW-NOTES).
from airflow.timetables.base import (  # noqa: E402
    DagRunInfo,
    DataInterval,
    TimeRestriction,
    Timetable,
)

try:  # Airflow 2.11 and 3.x both have it; the name moved nowhere, but keep the failure explicit.
    from airflow.exceptions import AirflowTimetableInvalid
except ImportError:  # pragma: no cover - defensive
    AirflowTimetableInvalid = ValueError  # type: ignore[assignment,misc]


def make_dagrun_info(start: DateTime, end: DateTime, run_after: DateTime) -> DagRunInfo:
    """Build a ``DagRunInfo`` that works on 2.11 and every 3.x.

    ``DagRunInfo(run_after=..., data_interval=...)`` raises TypeError on 3.2.x (partition fields had no
    defaults) and the scheduler swallows it; ``interval()._replace`` works everywhere.
    """
    return DagRunInfo.interval(start, end)._replace(run_after=run_after)


def encode_timetable(timetable: Timetable) -> dict[str, Any]:
    """Airflow's own timetable serializer (what the dag-processor stores), for tests and docs.

    3.2+: ``airflow.serialization.encoders``; 2.11, 3.0 and 3.1: ``airflow.serialization.serialized_objects``
    (``encoders``/``decoders`` arrived in 3.2). Imported lazily: the serializers are heavy and only tests/docs
    call this.
    """
    if AIRFLOW_V_3_2_PLUS:
        from airflow.serialization.encoders import encode_timetable as _encode
    else:
        from airflow.serialization.serialized_objects import encode_timetable as _encode
    return _encode(timetable)


def decode_timetable(data: dict[str, Any]) -> Timetable:
    """Inverse of :func:`encode_timetable` (needs the timetable's plugin to be registered)."""
    if AIRFLOW_V_3_2_PLUS:
        from airflow.serialization.decoders import decode_timetable as _decode
    else:
        from airflow.serialization.serialized_objects import decode_timetable as _decode
    return _decode(data)


# --- Names resolved on first use (PEP 562) -------------------------------------------------------------
# The plugin imports this module in every scheduler / dag-processor parse loop, which needs only the
# timetable names above; importing the sensor SDK, the ``@task`` decorator and the trigger base eagerly
# added ~100 ms there. Each entry: name -> (module, attribute) for the running Airflow line.
# 3.x: the Task SDK owns sensors and task exceptions (``airflow.exceptions`` re-exports the very same
# classes, so the task runner treats ours as a sensor timeout: no retry); ``airflow.sdk.task`` is the
# decorator (``airflow.decorators`` is a deprecated shim). 2.11: core locations. ``airflow.triggers.base``
# is the trigger location on 2.11 and every 3.x (the Task SDK does not export it).
_EXCEPTIONS = (
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowRescheduleException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
)
_LAZY: dict[str, tuple[str, str]] = {
    "BaseTrigger": ("airflow.triggers.base", "BaseTrigger"),
    "TriggerEvent": ("airflow.triggers.base", "TriggerEvent"),
}
if AIRFLOW_V_3_0_PLUS:
    _LAZY.update(
        {
            "task": ("airflow.sdk", "task"),
            "SensorBaseHook": ("airflow.sdk", "BaseHook"),
            "BaseSensorOperator": ("airflow.sdk", "BaseSensorOperator"),
            "PokeReturnValue": ("airflow.sdk", "PokeReturnValue"),
            "airflow_conf": ("airflow.sdk.configuration", "conf"),
            "Stats": ("airflow.sdk.observability.stats", "Stats"),
            **{name: ("airflow.sdk.exceptions", name) for name in _EXCEPTIONS},
        }
    )
    if not AIRFLOW_V_3_2_PLUS:  # 3.0/3.1: the SDK lacks these yet; their task runner catches the core ones
        _LAZY.update(
            {
                "SensorBaseHook": ("airflow.hooks.base", "BaseHook"),
                "airflow_conf": ("airflow.configuration", "conf"),
                "Stats": ("airflow.stats", "Stats"),
                **{name: ("airflow.exceptions", name) for name in _EXCEPTIONS},
            }
        )
else:
    _LAZY.update(
        {
            "task": ("airflow.decorators", "task"),
            "SensorBaseHook": ("airflow.hooks.base", "BaseHook"),
            "BaseSensorOperator": ("airflow.sensors.base", "BaseSensorOperator"),
            "PokeReturnValue": ("airflow.sensors.base", "PokeReturnValue"),
            "airflow_conf": ("airflow.configuration", "conf"),
            "Stats": ("airflow.stats", "Stats"),
            **{name: ("airflow.exceptions", name) for name in _EXCEPTIONS},
        }
    )

if TYPE_CHECKING:  # what type checkers see (3.x locations); at run time ``__getattr__`` resolves them
    from airflow.sdk import BaseHook as SensorBaseHook
    from airflow.sdk import BaseSensorOperator, PokeReturnValue, task
    from airflow.sdk.configuration import conf as airflow_conf
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowRescheduleException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
    )
    from airflow.sdk.observability.stats import Stats
    from airflow.triggers.base import BaseTrigger, TriggerEvent


# Error tuples (resolved on first use, like the names above). ``AirflowTaskTimeout`` is a BaseException on
# 3.x (not an ``Exception``): a check that raises it must still be caught and mapped like poke mode does.
_ERROR_TUPLES: dict[str, tuple[str, ...]] = {
    "CHECK_ERRORS": ("Exception", "AirflowTaskTimeout"),  # everything a check may raise that we map
    "SENSOR_TIMEOUT_ERRORS": ("AirflowSensorTimeout", "AirflowTaskTimeout"),
}

if TYPE_CHECKING:
    CHECK_ERRORS: tuple[type[BaseException], ...]
    SENSOR_TIMEOUT_ERRORS: tuple[type[BaseException], ...]


def __getattr__(name: str) -> Any:
    if name in _ERROR_TUPLES:
        value: Any = tuple(
            Exception if part == "Exception" else __getattr__(part) for part in _ERROR_TUPLES[name]
        )
        globals()[name] = value
        return value
    target = _LAZY.get(name)
    if target is None:  # also a helpful error for typos in internal imports
        raise AttributeError(f"airflow_smart_ext.compat has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value  # resolved once
    return value


# --- Operators ------------------------------------------------------------------------------------


def operator_init_kwargs(operator: Any) -> dict[str, Any]:
    """The keyword arguments an operator was constructed with (BaseOperator records them, 2.11 and 3.x).

    Airflow keeps them in the name-mangled private ``_BaseOperator__init_kwargs``; this is the only place
    that reads it.
    """
    return dict(getattr(operator, "_BaseOperator__init_kwargs", {}) or {})


def is_runtime_value(value: Any) -> bool:
    """XComArg-like values (``task.output``, ``XComArg``) are resolved only at run time."""
    return hasattr(value, "resolve") and hasattr(value, "iter_references")


def holds_runtime_value(value: Any) -> bool:
    """Whether a (nested: dicts, lists) argument holds an XComArg-like value, resolved on a worker."""
    if is_runtime_value(value):
        return True
    if isinstance(value, dict):
        return any(holds_runtime_value(item) for item in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(holds_runtime_value(item) for item in value)
    return False


def use_connection(hook: Any, connection: Any) -> None:
    """Make ``hook`` use the Connection already fetched, never look it up a second time.

    A sync lookup from a worker thread of the triggerer would go through the supervisor again on 3.x (a
    second round trip; untested on 3.0-3.2). common-sql's ``DbApiHook.connection`` reads the cached
    ``_connection`` (e.g. PostgresHook.get_conn), but some hooks call ``self.get_connection(conn_id)``
    directly (SqliteHook.get_uri): shadow that on this instance for our conn_id too.
    """
    hook._connection = connection
    lookup = hook.get_connection

    def get_connection(conn_id: str) -> Any:
        return connection if conn_id == connection.conn_id else lookup(conn_id)

    hook.get_connection = get_connection


# 2.11's scheduler fails a deferred task whose trigger timed out with this ``__fail__`` error, which
# BaseOperator turns into a *retryable* TaskDeferralError; 3.x's BaseSensorOperator maps its TaskDeferralTimeout
# to AirflowSensorTimeout but then skips it with never_fail (poke mode fails a timeout with never_fail).
_DEFERRAL_TIMEOUT_ERROR_2X = "Trigger/execution timeout"


def sensor_reschedule_state(context: Any) -> tuple[int, datetime.datetime | None]:
    """Exact (number of reschedules, first reschedule start date) of the *current try*.

    3.x: the runner puts ``task_reschedule_count`` in the context and TaskReschedule rows belong to one
    try (a new try gets a new TI id), exactly what BaseSensorOperator.execute uses.
    2.11: TaskReschedule rows keep their try_number (a reschedule does not bump it, a clear deletes
    them); we read the rows of this try only, so a retry starts a new schedule like on 3.x.
    """
    ti = context["ti"]
    if AIRFLOW_V_3_0_PLUS:
        count = int(context.get("task_reschedule_count", 0) or 0)
        if count == 0:
            return 0, None
        return count, ti.get_first_reschedule_date(context)

    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    where = (
        TaskReschedule.dag_id == ti.dag_id,
        TaskReschedule.task_id == ti.task_id,
        TaskReschedule.run_id == ti.run_id,
        TaskReschedule.map_index == ti.map_index,
        TaskReschedule.try_number == ti.try_number,
    )
    with create_session() as session:
        count = session.scalar(select(func.count(TaskReschedule.id)).where(*where)) or 0
        first = session.scalar(
            select(TaskReschedule.start_date).where(*where).order_by(TaskReschedule.id.asc()).limit(1)
        )
    return int(count), first


def first_reschedule_anchor(context: Any, now: float) -> float:
    """Predict, in a sensor's first run, the first-reschedule date that later runs of the try will read.

    3.x: the API server stamps the TaskReschedule row when the reschedule is *reported*, i.e. just after the
    first run raises: ``now``. 2.11: the row carries the start_date of the run that raised (the TI's).
    Anchoring the first run there keeps its next check identical to what later runs compute, even when
    the first poke is slow.
    """
    if AIRFLOW_V_3_0_PLUS:
        return now
    start = getattr(context["ti"], "start_date", None)
    return start.timestamp() if isinstance(start, datetime.datetime) else now


# --- Triggers -------------------------------------------------------------------------------------


# Seconds between the lookups of a connection that "isn't defined": every secrets backend's failure (a metadata-
# database hiccup included) reads as "not defined" in Airflow's lookup, so a short hiccup must not fail a wait.
CONNECTION_LOOKUP_RETRY_DELAYS = (1.0, 2.0, 4.0)


async def aget_connection(conn_id: str, within: float | None = None) -> Any:
    """Fetch a Connection from inside a trigger without blocking the event loop.

    3.1+: through the triggerer supervisor (``BaseHook.aget_connection``; 3.x triggers have no ORM access).
    3.0: the sync SDK call, in a worker thread (on the loop it raises an AsyncToSync error).
    2.11: the sync ORM/secrets lookup, in a worker thread.

    Airflow answers "isn't defined" whenever every secrets backend failed, a database error included, so that
    answer is asked again after ``CONNECTION_LOOKUP_RETRY_DELAYS`` (those that fit in half of ``within``, the
    check's time limit, so a short limit still ends in this clear error); it stays permanent (the message
    says how often it was asked) unless, on 3.1+, the supervisor then reports a failure rather than "not
    found" (``ConnectionLookupFailed``, transient).
    """
    import asyncio

    hook = __getattr__("SensorBaseHook")  # lazy names are not module globals until first resolved
    not_found_type = __getattr__("AirflowNotFoundException")
    delays: list[float] = []
    for delay in CONNECTION_LOOKUP_RETRY_DELAYS:
        if within is not None and sum(delays) + delay >= within / 2:
            break
        delays.append(delay)
    for pause in (*delays, None):
        try:
            if AIRFLOW_V_3_1_PLUS:
                return await hook.aget_connection(conn_id)
            return await asyncio.to_thread(hook.get_connection, conn_id)
        except not_found_type as exc:
            not_found = exc
        if pause is not None:
            await asyncio.sleep(pause)
    if AIRFLOW_V_3_1_PLUS:
        await _raise_if_lookup_failed(conn_id, not_found)
    raise not_found_type(
        f"{not_found} (looked up {len(delays) + 1} times over {sum(delays):g}s)"
    ) from not_found


class ConnectionLookupFailed(ConnectionError):
    """The triggerer could not look a connection up (its supervisor or the API failed): transient, unlike a
    connection that is not defined."""


async def _raise_if_lookup_failed(conn_id: str, not_found: BaseException) -> None:
    """3.1+: tell "not found" from "the lookup failed" once ``aget_connection`` keeps saying "isn't defined".

    The SDK turns every failed lookup through the supervisor (an API error, a broken request) into
    ``AirflowNotFoundException`` (``ExecutionAPISecretsBackend.aget_connection`` returns None on any error).
    One direct request to the supervisor says which it was: ``CONNECTION_NOT_FOUND`` or ``PERMISSION_DENIED``
    (or no way to ask) returns and the caller raises "not defined"; any other answer (an error, or the
    connection itself) raises ``ConnectionLookupFailed``, which a check rides out as a transient error.
    """
    try:
        from airflow.sdk.exceptions import AirflowRuntimeError
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import ErrorResponse, GetConnection
    except ImportError:  # an SDK layout we do not know: keep the SDK's answer
        return
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        return
    try:
        answer: Any = await comms.asend(GetConnection(conn_id=conn_id))
    except AirflowRuntimeError as exc:  # the supervisor answered with an error frame
        answer = exc.error
    except Exception as exc:
        answer = exc
    if isinstance(answer, ErrorResponse):
        # PERMISSION_DENIED: an authoritative deny (3.3+); the SDK raises it itself, but never ride it out.
        if answer.error.value in ("CONNECTION_NOT_FOUND", "PERMISSION_DENIED"):
            return
        detail = f"{answer.error.value}: {answer.detail}"
    elif isinstance(answer, Exception):
        detail = repr(answer)
    else:
        detail = "it is defined; the lookup just before failed"
    raise ConnectionLookupFailed(
        f"Looking up connection {conn_id!r} failed in the triggerer ({detail}); it is looked up again at the "
        f"next check"
    ) from not_found


def parse_datetime(value: str) -> Any:
    """An ISO-8601 string to an aware pendulum DateTime (what contexts hold on every version)."""
    import pendulum

    return pendulum.parse(value)


def dag_context() -> Any:
    """Airflow's ``DagContext``: its ``autoregistered_dags`` collect every ``with DAG(...)`` of a module being
    imported (how Airflow's DagBag finds DAGs that no variable holds)."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.definitions._internal.contextmanager import DagContext

        return DagContext
    from airflow.models.dag import DagContext as LegacyDagContext  # 2.11

    return LegacyDagContext


__all__ = [
    "dag_context",
    # triggers
    "BaseTrigger",
    "TriggerEvent",
    "ConnectionLookupFailed",
    "aget_connection",
    "parse_datetime",
    "use_connection",
    "CHECK_ERRORS",
    "SENSOR_TIMEOUT_ERRORS",
    "operator_init_kwargs",
    "holds_runtime_value",
    "is_runtime_value",
    # sensors
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowRescheduleException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "BaseSensorOperator",
    "PokeReturnValue",
    "SensorBaseHook",
    "Stats",
    "airflow_conf",
    "first_reschedule_anchor",
    "sensor_reschedule_state",
    "AIRFLOW_V_3_0_PLUS",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AirflowTimetableInvalid",
    "DagRunInfo",
    "DataInterval",
    "TimeRestriction",
    "Timetable",
    "make_dagrun_info",
    "encode_timetable",
    "decode_timetable",
    "task",
]


# --- Task retry policies (Airflow >= 3.3, AIP-105) -------------------------------------------------------
# ``retry_policy=`` and ``airflow.sdk.RetryPolicy`` exist from Airflow 3.3 only. Older versions get inert
# stand-ins so ``airflow_smart_ext.retries`` imports everywhere; building a policy there calls
# :func:`require_retry_policies`, which fails the DAG file at parse time with the alternatives.
RETRY_POLICY_MIN_AIRFLOW = "3.3.0"
RETRY_POLICIES_SUPPORTED = AIRFLOW_V_3_3_PLUS

if TYPE_CHECKING or RETRY_POLICIES_SUPPORTED:
    from airflow.sdk import RetryAction, RetryDecision, RetryPolicy
else:
    import abc as _abc

    class RetryPolicy(_abc.ABC):  # type: ignore[no-redef]  # Airflow < 3.3: never instantiated
        @_abc.abstractmethod
        def evaluate(
            self, exception: BaseException, try_number: int, max_tries: int, context: Any = None
        ) -> Any:
            """The Airflow >= 3.3 signature; see :func:`require_retry_policies`."""

    RetryAction = None  # type: ignore[assignment,misc]
    RetryDecision = None  # type: ignore[assignment,misc]


class RetryPoliciesUnsupported(RuntimeError):
    """A task retry policy was used on an Airflow without ``retry_policy`` (before 3.3)."""


def require_retry_policies(what: str) -> None:
    """Raise :class:`RetryPoliciesUnsupported` (at DAG parse) unless this Airflow has retry policies."""
    if RETRY_POLICIES_SUPPORTED:
        return
    raise RetryPoliciesUnsupported(
        f"{what} needs Airflow >= {RETRY_POLICY_MIN_AIRFLOW} (task retry policies, AIP-105); this is Airflow "
        f"{_AIRFLOW_VERSION_STRING}. On this version use the operator's own backoff instead: "
        "retry_exponential_backoff=True and max_retry_delay=timedelta(...) on the operator, or "
        "attach the policy only when airflow_smart_ext.retries.RETRY_POLICIES_SUPPORTED is True."
    )


__all__ += [
    "RETRY_POLICIES_SUPPORTED",
    "RETRY_POLICY_MIN_AIRFLOW",
    "RetryAction",
    "RetryDecision",
    "RetryPolicy",
    "RetryPoliciesUnsupported",
    "require_retry_policies",
]


# --- Starting and ending in the triggerer -----------------------------------------------------------------
# A deferrable sensor can skip the worker entirely: the scheduler defers it from the operator's *static*
# ``start_trigger_args`` (``DagRun.schedule_tis`` -> ``TaskInstance.defer_task``), and the trigger ends it with
# ``TaskSuccessEvent``. What each line offers (read from the 3.3.2 and 2.11.2 wheels, verified live):
#
# * 3.3+: the triggerer builds a RuntimeTaskInstance for such a task, renders the trigger's attributes that
#   are both operator template fields and ``trigger_kwargs`` keys, and sets ``timeout_after`` to the TI's
#   persisted ``trigger_timeout``. The trigger's task instance carries no ``start_date``.
#   Mapped tasks always start on a worker (``SerializedMappedOperator.expand_start_from_trigger`` returns
#   False, "unsupported", GH-52141 / apache/airflow#48009).
# * 3.0-3.2: the scheduler path was disabled upstream (apache/airflow#53744) until 3.3 re-enabled it with
#   triggerer-side rendering (apache/airflow#55068): worker-first there.
# * 2.11: the scheduler starts the task in the triggerer but nothing renders templates; the trigger's
#   ``task_instance`` is the ORM row (``start_date`` = start of the try). Mapped tasks: the mapped operator
#   reads the *class* attribute ``start_trigger_args`` (None for our sensors), so they start on a worker.

#: Whether the scheduler can start a (non-mapped) task in the triggerer on this Airflow line.
START_FROM_TRIGGER_SUPPORTED = AIRFLOW_V_3_3_PLUS or not AIRFLOW_V_3_0_PLUS
#: Whether the triggerer renders a start-from-trigger task's template fields (3.3+; not 2.11).
START_FROM_TRIGGER_RENDERS_TEMPLATES = AIRFLOW_V_3_3_PLUS


def trigger_end_runs_success_callbacks() -> bool:
    """Whether Airflow runs ``on_success_callback`` for a task a trigger ended with ``TaskSuccessEvent``.

    The triggerer only stores a callback request in the DB. 3.3.2: the dag-processor runs only *failure*
    task callbacks ("Task callback requested but is not a failure callback", dag_processing/processor.py).
    2.11: DB callback requests are fetched only by a standalone DAG processor
    (``[scheduler] standalone_dag_processor``; DagFileProcessorManager). Where this is False, a sensor with
    success callbacks ends on a worker.
    """
    if AIRFLOW_V_3_0_PLUS:
        return False
    return bool(
        __getattr__("airflow_conf").getboolean("scheduler", "standalone_dag_processor", fallback=False)
    )


_LAZY.update(
    {
        "StartTriggerArgs": ("airflow.triggers.base", "StartTriggerArgs"),
        "TaskSuccessEvent": ("airflow.triggers.base", "TaskSuccessEvent"),
    }
)
if TYPE_CHECKING:
    from airflow.triggers.base import StartTriggerArgs, TaskSuccessEvent


def start_from_trigger_problem(*, templated: bool) -> str | None:
    """Why this Airflow cannot start a (non-mapped) task in the triggerer, or None when it can.

    ``templated``: the task's arguments contain Jinja templates that must be rendered before check #0.
    """
    if not START_FROM_TRIGGER_SUPPORTED:
        return (
            f"Airflow {_AIRFLOW_VERSION_STRING} does not start tasks in the triggerer (the scheduler path is "
            f"disabled on 3.0-3.2; available on 2.11 and 3.3+)"
        )
    if templated and not START_FROM_TRIGGER_RENDERS_TEMPLATES:
        return (
            f"its arguments are templated and Airflow {_AIRFLOW_VERSION_STRING} does not render templates in "
            f"the triggerer (3.3+ does)"
        )
    return None


def mapped_start_problem() -> str:
    """Why a mapped task instance started on a worker although it asked for the triggerer."""
    return (
        f"mapped tasks cannot start in the triggerer on Airflow {_AIRFLOW_VERSION_STRING} (the scheduler "
        f"starts every mapped task instance on a worker: apache/airflow#48009)"
    )


def _epoch_of(value: Any) -> float | None:
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:  # 2.11 stores trigger_timeout naive (UTC)
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.timestamp()


def trigger_try_started_at(trigger: Any, backstop_seconds: float) -> float | None:
    """When the current try started (epoch seconds), from what Airflow persisted for it; None if unknown.

    ``backstop_seconds``: the trigger timeout the scheduler applied (``StartTriggerArgs.timeout``, capped by
    ``execution_timeout`` as ``defer_task`` does). A rebuilt trigger (triggerer restart, reassignment) gets
    the same answer, so its schedule and deadline do not move.

    3.3+: ``timeout_after`` is the TI's ``trigger_timeout`` = the moment ``defer_task`` started the try +
    ``backstop_seconds`` (the TI's ``start_date`` is stamped the same instant; the task instance a trigger
    sees does not carry it). 2.11: the ORM task instance's ``start_date``, stamped by the scheduler.
    """
    ti = getattr(trigger, "task_instance", None)
    if AIRFLOW_V_3_0_PLUS:
        timeout_after = _epoch_of(getattr(trigger, "timeout_after", None))
        return None if timeout_after is None else timeout_after - backstop_seconds
    return _epoch_of(getattr(ti, "start_date", None))


def trigger_render_native(trigger: Any, context: Any) -> bool:
    """Whether a worker would render this task's templates as native objects: the operator's own
    ``render_template_as_native_obj`` when set, else the DAG's (both serialized)."""
    own = getattr(getattr(trigger, "task", None), "render_template_as_native_obj", None)
    if own is not None:
        return bool(own)
    dag = context.get("dag") if hasattr(context, "get") else None
    return bool(getattr(dag, "render_template_as_native_obj", False))


def trigger_template_env(native: bool) -> Any:
    """The Jinja environment a worker renders with (native or sandboxed, StrictUndefined), for rendering in
    the triggerer (3.3+: the triggerer's DAG is the scheduler-side ``SerializedDAG``, which has no
    ``get_template_env``). User-defined macros/filters are not serialized: sensors of such DAGs start on a
    worker (``BackoffSensor._start_problem``). None on 2.11 (nothing is rendered in its triggerer)."""
    if not AIRFLOW_V_3_0_PLUS:
        return None
    from airflow.sdk.definitions._internal.templater import create_template_env

    return create_template_env(native=native)


def _iso_or_none(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


async def trigger_run_context(trigger: Any, render_context: Any) -> dict[str, Any]:
    """The run facts a ``"sensor"`` check ships (same keys as on a worker): ids, try, ``ds``/``ts`` and dates.

    3.3+: from the template context the triggerer rendered with (``dag_run``). 2.11: nothing is rendered;
    the run's dates come from the metadata DB (2.x triggers may use the ORM), read off the event loop.
    """
    import asyncio

    ti = trigger.task_instance
    facts: dict[str, Any] = {
        "dag_id": ti.dag_id,
        "task_id": ti.task_id,
        "run_id": ti.run_id,
        "map_index": -1 if getattr(ti, "map_index", None) is None else int(ti.map_index),
        "try_number": int(getattr(ti, "try_number", 1) or 1),
    }
    if render_context is not None:
        dag_run = render_context.get("dag_run")
        logical, start, end = (
            getattr(dag_run, name, None)
            for name in ("logical_date", "data_interval_start", "data_interval_end")
        )
    elif not AIRFLOW_V_3_0_PLUS:

        def read() -> tuple[Any, Any, Any]:
            from airflow.models.dagrun import DagRun
            from airflow.utils.session import create_session
            from sqlalchemy import select

            with create_session() as session:
                row = session.execute(
                    select(DagRun.execution_date, DagRun.data_interval_start, DagRun.data_interval_end).where(
                        DagRun.dag_id == ti.dag_id, DagRun.run_id == ti.run_id
                    )
                ).first()
            return (row[0], row[1], row[2]) if row else (None, None, None)

        logical, start, end = await asyncio.to_thread(read)
    else:
        logical = start = end = None
    facts.update(run_dates(logical, start, end))
    return facts


def run_dates(logical: Any, start: Any, end: Any) -> dict[str, str | None]:
    """A run's dates as a ``"sensor"`` check ships them (``ds``, ``ts``, ``logical_date``, the interval)."""
    return {
        "ds": logical.strftime("%Y-%m-%d") if logical is not None else None,
        "ts": _iso_or_none(logical),
        "logical_date": _iso_or_none(logical),
        "data_interval_start": _iso_or_none(start),
        "data_interval_end": _iso_or_none(end),
    }


def task_maps_over_output(trigger: Any) -> bool:
    """Whether a downstream task maps over this task's XCom (Airflow must then record the map length, which
    only a worker does). 3.3+: from the serialized task the triggerer loaded; 2.11: unknown -> False."""
    task = getattr(trigger, "task", None)
    iter_dependants = getattr(task, "iter_mapped_dependants", None)
    if iter_dependants is None:
        return False
    try:
        return next(iter(iter_dependants()), None) is not None
    except Exception:  # a task shape we do not know: be safe and let a worker end it
        return True


__all__ += [
    "START_FROM_TRIGGER_RENDERS_TEMPLATES",
    "START_FROM_TRIGGER_SUPPORTED",
    "StartTriggerArgs",
    "TaskSuccessEvent",
    "mapped_start_problem",
    "run_dates",
    "start_from_trigger_problem",
    "task_maps_over_output",
    "trigger_end_runs_success_callbacks",
    "trigger_render_native",
    "trigger_run_context",
    "trigger_template_env",
    "trigger_try_started_at",
]


# --- The Waits view (issue 26): trigger rows read by the web server ----------------------------------------


def dag_run_logical_date() -> Any:
    """The DagRun column of a run's logical date: 3.x ``logical_date``, 2.11 ``execution_date``."""
    from airflow.models.dagrun import DagRun

    return DagRun.logical_date if AIRFLOW_V_3_0_PLUS else DagRun.execution_date


def decrypt_trigger_kwargs(stored: str) -> dict[str, Any]:
    """A trigger row's stored kwargs column, decrypted and deserialized as ``Trigger.kwargs`` does (the same
    static method on 2.11 and 3.x; called on the column so no ORM object is built per row)."""
    from airflow.models.trigger import Trigger

    return Trigger._decrypt_kwargs(stored)


__all__ += ["dag_run_logical_date", "decrypt_trigger_kwargs"]


def parsing_for_a_task() -> bool:
    """True while a worker parses the DAG file to run one task (Airflow's parsing context), not while the
    dag-processor parses it to schedule."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk import get_parsing_context

        return get_parsing_context().task_id is not None
    from airflow.utils.dag_parsing_context import get_parsing_context as legacy_parsing_context  # 2.11

    return legacy_parsing_context().task_id is not None


# --- Partitioned runs (Airflow >= 3.2) -----------------------------------------------------------------
# 3.2 added ``partition_key`` / ``partition_date`` on ``DagRunInfo`` and ``Timetable.partitioned`` (the
# scheduler then calls ``next_dagrun_info_v2`` and stores the key on the run). Earlier versions have neither:
# asking a timetable for partitions there fails at DAG parse (see :func:`partitions_problem`).
PARTITIONS_MIN_AIRFLOW = "3.2.0"
PARTITIONS_SUPPORTED = Version(PARTITIONS_MIN_AIRFLOW) <= _AIRFLOW_BASE_VERSION

try:  # 3.3 (ValueError subclass; the REST API answers 400 with its message); 3.2: a plain ValueError
    from airflow.exceptions import InvalidPartitionKeyError  # type: ignore[attr-defined,unused-ignore]
except ImportError:
    InvalidPartitionKeyError = ValueError  # type: ignore[assignment,misc]


def partitions_problem() -> str | None:
    """Why this Airflow cannot run partitioned timetables, or None when it can (reads the flag at call time)."""
    if PARTITIONS_SUPPORTED:
        return None
    return (
        f"partitioned runs need Airflow >= {PARTITIONS_MIN_AIRFLOW} (partition_key / partition_date on DAG "
        f"runs); this is Airflow {_AIRFLOW_VERSION_STRING}. Leave partitioned=False here (e.g. "
        "partitioned=airflow_smart_ext.compat.PARTITIONS_SUPPORTED) or upgrade Airflow."
    )


def make_partition_dagrun_info(
    run_after: DateTime, partition_date: DateTime, partition_key: str
) -> DagRunInfo:
    """A partitioned run (no data interval, as ``CronPartitionTimetable`` makes them), built without keyword
    construction (3.2.x: see :func:`make_dagrun_info`)."""
    # the partition fields are 3.2+: passed as a mapping, so mypy also passes against 2.11's DagRunInfo
    fields: dict[str, Any] = {
        "data_interval": None,
        "partition_date": partition_date,
        "partition_key": partition_key,
    }
    return DagRunInfo.exact(run_after)._replace(**fields)


# Assets (3.x) are Datasets on 2.11: DAG files that schedule on one import this name (the partition example).
_LAZY["Asset"] = ("airflow.sdk", "Asset") if AIRFLOW_V_3_0_PLUS else ("airflow.datasets", "Dataset")
if TYPE_CHECKING:
    from airflow.sdk import Asset as Asset  # re-exported


# 3.x fails a deferred task whose Airflow trigger timeout passed with this ``__fail__`` error
# (``TriggerFailureReason.TRIGGER_TIMEOUT``); 2.11 with ``_DEFERRAL_TIMEOUT_ERROR_2X``.
_DEFERRAL_TIMEOUT_ERROR_3X = "Trigger timeout"


def is_trigger_timeout(next_method: str, next_kwargs: dict[str, Any] | None) -> bool:
    """Whether Airflow resumes a task only to fail it because its trigger timeout passed (any version)."""
    expected = _DEFERRAL_TIMEOUT_ERROR_3X if AIRFLOW_V_3_0_PLUS else _DEFERRAL_TIMEOUT_ERROR_2X
    return next_method == "__fail__" and (next_kwargs or {}).get("error") == expected


#: A sensor's ``timeout=None`` means ``[sensors] default_timeout`` on 3.3+ (the SDK sensor's default became
#: None there); the sensors of 2.11 and 3.0-3.2 refuse None with a bare "must be timedelta" error.
SENSOR_TIMEOUT_ACCEPTS_NONE = AIRFLOW_V_3_3_PLUS


# --- Sealing rendered secrets (issue 23): the secrets masker and Airflow's Fernet -------------------------
# The worker's masker knows every connection password / extra / masked Variable the task rendered; the
# triggerer holds the same [core] fernet_key. 3.x: the Task SDK's masker (the one the task runner and the
# triggerer's log processors use) and crypto; 2.11: core's.
if AIRFLOW_V_3_0_PLUS:
    _LAZY.update(
        {
            # 3.1+: the SDK's shared masker; 3.0 has only execution_time's (a deprecated shim from 3.1 on)
            "redact_secrets": (
                "airflow.sdk._shared.secrets_masker"
                if AIRFLOW_V_3_1_PLUS
                else "airflow.sdk.execution_time.secrets_masker",
                "redact",
            ),
            "mask_secret": ("airflow.sdk.log", "mask_secret"),
            # the SDK's crypto exists from 3.2; 3.0/3.1 keep core's (same [core] fernet_key)
            "get_fernet": (
                "airflow.sdk.crypto" if AIRFLOW_V_3_2_PLUS else "airflow.models.crypto",
                "get_fernet",
            ),
        }
    )
else:
    _LAZY.update(
        {
            "redact_secrets": ("airflow.utils.log.secrets_masker", "redact"),
            "mask_secret": ("airflow.utils.log.secrets_masker", "mask_secret"),
            "get_fernet": ("airflow.models.crypto", "get_fernet"),
        }
    )
if TYPE_CHECKING:
    from airflow.sdk._shared.secrets_masker import redact as redact_secrets
    from airflow.sdk.crypto import get_fernet
    from airflow.sdk.log import mask_secret

__all__ += ["get_fernet", "mask_secret", "redact_secrets"]


# --- Condition watchers (issue 27): asset watchers, their state store and shared streams ----------------
# * 3.0+: ``Asset(watchers=[AssetWatcher(name, trigger)])`` with a ``BaseEventTrigger`` (airflow.triggers.base);
#   2.11 has neither: a watcher fails at DAG parse (``require_asset_watchers``).
# * 3.3+: the triggerer injects ``asset_state_store`` (AIP-103, ``AssetStateStoreAccessors`` of the watched
#   assets: jobs/triggerer_job_runner.py ``create_triggers``) and runs triggers with a ``shared_stream_key``
#   through one shared poll (triggers/shared_stream.py). 3.0-3.2: neither (the watermark lives in memory).
ASSET_WATCHERS_MIN_AIRFLOW = "3.0.0"
ASSET_WATCHERS_SUPPORTED = AIRFLOW_V_3_0_PLUS
ASSET_STATE_STORE_SUPPORTED = AIRFLOW_V_3_3_PLUS
SHARED_STREAMS_SUPPORTED = AIRFLOW_V_3_3_PLUS
# 2.11: the plain trigger base stands in (a watcher is never built there: require_asset_watchers fails first)
_LAZY["EventTriggerBase"] = (
    ("airflow.triggers.base", "BaseEventTrigger")
    if AIRFLOW_V_3_0_PLUS
    else ("airflow.triggers.base", "BaseTrigger")
)
if TYPE_CHECKING:
    from airflow.triggers.base import BaseEventTrigger as EventTriggerBase  # type: ignore[attr-defined,unused-ignore]


class AssetWatchersUnsupported(RuntimeError):
    """A condition watcher was used on an Airflow without asset watchers (before 3.0)."""


def require_asset_watchers(what: str) -> None:
    """Raise :class:`AssetWatchersUnsupported` (at DAG parse) unless this Airflow has asset watchers."""
    if ASSET_WATCHERS_SUPPORTED:
        return
    raise AssetWatchersUnsupported(
        f"{what} needs Airflow >= {ASSET_WATCHERS_MIN_AIRFLOW} (event-driven scheduling: "
        f"Asset(watchers=[AssetWatcher(...)])); this is Airflow {_AIRFLOW_VERSION_STRING}. On this version "
        "wait for the condition with a deferrable sensor instead: BackoffSqlSensor(..., deferrable=True), or "
        "your BackoffSensor subclass with deferrable=True, at the start of the DAG that needs the data."
    )


def asset_state_accessors(trigger: Any) -> list[Any]:
    """The asset state store accessors of every asset ``trigger`` watches (3.3+; [] before, or when the
    triggerer injected none: ``dag.test()``, no watched asset).

    Airflow runs one trigger for identical watchers of several assets and injects one
    ``AssetStateStoreAccessors`` for all of them; it has no public way to list them (sdk/execution_time/
    context.py ``AssetStateStoreAccessors.__init__`` keeps them in ``_by_name`` / ``_by_uri``), so they are read
    there, falling back to the object itself (its single-asset ``aget`` / ``aset``).
    """
    store = getattr(trigger, "asset_state_store", None) if ASSET_STATE_STORE_SUPPORTED else None
    if store is None:
        return []
    by_name = getattr(store, "_by_name", None)
    by_uri = getattr(store, "_by_uri", None)
    if isinstance(by_name, dict) and isinstance(by_uri, dict):
        return [*by_name.values(), *by_uri.values()]
    return [store]


__all__ += [
    "ASSET_STATE_STORE_SUPPORTED",
    "ASSET_WATCHERS_MIN_AIRFLOW",
    "ASSET_WATCHERS_SUPPORTED",
    "AssetWatchersUnsupported",
    "EventTriggerBase",
    "SHARED_STREAMS_SUPPORTED",
    "asset_state_accessors",
    "require_asset_watchers",
]


# --- The Waits and Calendars views (issue 26): what the plugin serves, where Airflow's task pages are --------


def task_page_url(airflow_root: str, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """Airflow's own page of one task instance, below ``airflow_root`` (the path Airflow is served at): the
    page of its run (``dag_page_path``) narrowed to the task."""
    from urllib.parse import quote, urlencode

    run_page = airflow_root + dag_page_path(dag_id, run_id)
    if AIRFLOW_V_3_0_PLUS:
        url = f"{run_page}/tasks/{quote(task_id, safe='')}"
        return f"{url}/mapped/{map_index}" if map_index >= 0 else url
    params: dict[str, Any] = {"task_id": task_id}
    if map_index >= 0:
        params["map_index"] = map_index
    return f"{run_page}&{urlencode(params)}"


def plugin_ui_parts() -> dict[str, Any]:
    """The plugin attributes that serve the Waits and Calendars views on this Airflow.

    3.1+: the api-server's FastAPI app and two entries under Browse shown inside the UI (``url_route``);
    3.0: the app alone (its UI has no ``external_views``; the app's name says so in ``airflow plugins``);
    2.11: a Flask blueprint and two Browse menu links. Nothing here imports FastAPI or Flask-AppBuilder:
    every component imports the plugin.
    """
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    from airflow_smart_ext.ui.web_common import PAGES, URL_PREFIX

    if AIRFLOW_V_3_0_PLUS:
        from airflow_smart_ext.ui.web_asgi import SmartExtWebApp

        app_name = "Waits and Calendars views"
        if not AIRFLOW_V_3_1_PLUS:
            # 3.0's UI keeps its token out of cookies and its api-server reads only the header: no browser page
            app_name += (
                f" (Airflow 3.0: no menu entry and no browser sign-in for plugin pages; use {URL_PREFIX}/api/waits"
                f" and {URL_PREFIX}/api/calendars with a bearer token, or python -m airflow_smart_ext.waits)"
            )
        parts: dict[str, Any] = {
            "fastapi_apps": [{"app": SmartExtWebApp(), "url_prefix": URL_PREFIX, "name": app_name}]
        }
        if AIRFLOW_V_3_1_PLUS:
            # The UI puts ``href`` into an iframe as it is: keep a sub-path Airflow is served at.
            base = urlsplit(conf.get("api", "base_url", fallback="") or "/").path.rstrip("/")
            parts["external_views"] = [
                {
                    "name": name,
                    "href": f"{base}{URL_PREFIX}{path}",
                    "destination": "nav",
                    "category": "browse",
                    "url_route": f"smart-ext{path.replace('/', '-')}",
                }
                for name, path in PAGES
            ]
        return parts
    from airflow_smart_ext.ui.web_flask import create_blueprint

    base = urlsplit(conf.get("webserver", "base_url", fallback="") or "/").path.rstrip("/")
    return {
        "flask_blueprints": [create_blueprint()],
        "appbuilder_menu_items": [
            {"name": name, "href": f"{base}{URL_PREFIX}{path}", "category": "Browse"} for name, path in PAGES
        ],
    }


def requires_dag_read() -> Any:
    """The api-server dependency our routes share: DAG read access, of the ``dag_id`` asked for if any (3.1+'s
    ``requires_access_dag`` reads it from the query too, 3.0's only from the path: ours there)."""
    if AIRFLOW_V_3_1_PLUS:
        from airflow.api_fastapi.core_api.security import requires_access_dag

        return requires_access_dag(method="GET")
    from airflow_smart_ext.ui.fastapi_3_0 import requires_dag_read as requires_dag_read_3_0

    return requires_dag_read_3_0


__all__ += ["plugin_ui_parts", "requires_dag_read", "task_page_url"]


# --- The Calendars view (issue 26): serialized DAGs and their runs read by the web server ---------------


def latest_serialized_dags(session: Any, dag_ids: Collection[str] | None, classpaths: Collection[str]) -> Any:
    """(dag_id, stored JSON, compressed JSON) of each live DAG's latest serialized version (columns only: no
    ORM object, no DAG deserialized). 3.x keeps every version (the highest ``version_number`` is the latest)
    and marks deleted DAGs stale; 3.2+ also stores the timetable's class path, so only our DAGs are read.
    2.11: one row per DAG, deleted DAGs inactive."""
    from airflow.models.dag import DagModel
    from airflow.models.serialized_dag import SerializedDagModel as Serialized
    from sqlalchemy import func, select

    query = select(Serialized.dag_id, Serialized._data, Serialized._data_compressed).join(
        DagModel, DagModel.dag_id == Serialized.dag_id
    )
    if AIRFLOW_V_3_0_PLUS:
        from airflow.models.dag_version import DagVersion

        latest = (
            select(DagVersion.dag_id, func.max(DagVersion.version_number).label("latest"))
            .group_by(DagVersion.dag_id)
            .subquery()
        )
        query = (
            query.join(DagVersion, DagVersion.id == Serialized.dag_version_id)
            .join(
                latest,
                (latest.c.dag_id == DagVersion.dag_id) & (latest.c.latest == DagVersion.version_number),
            )
            .where(DagModel.is_stale.is_(False))
        )
        if AIRFLOW_V_3_2_PLUS:
            query = query.where(DagModel.timetable_type.in_(list(classpaths)))
    else:
        query = query.where(DagModel.is_active.is_(True))
    if dag_ids is not None:
        query = query.where(Serialized.dag_id.in_(list(dag_ids)))
    return session.execute(query.order_by(Serialized.dag_id))


def dag_run_columns() -> dict[str, Any]:
    """The DagRun columns the Calendars view shows, by name (2.11 has no ``run_after``, < 3.2 no
    ``partition_key``), and the one that orders a DAG's runs (3.x ``run_after``, 2.11 the logical date)."""
    from airflow.models.dagrun import DagRun

    names = ("run_id", "run_type", "state", "data_interval_start", "data_interval_end", "start_date")
    columns = {name: getattr(DagRun, name) for name in names}
    columns["logical_date"] = dag_run_logical_date()
    if AIRFLOW_V_3_0_PLUS:
        columns["run_after"] = DagRun.run_after
    if PARTITIONS_SUPPORTED:
        columns["partition_key"] = DagRun.partition_key
    return columns


def dag_page_path(dag_id: str, run_id: str | None = None) -> str:
    """Airflow's own page of a DAG (or of one of its runs), below the path Airflow is served at."""
    from urllib.parse import quote, urlencode

    if AIRFLOW_V_3_0_PLUS:
        path = f"/dags/{quote(dag_id, safe='')}"
        return path if run_id is None else f"{path}/runs/{quote(run_id, safe='')}"
    path = f"/dags/{quote(dag_id, safe='')}/grid"
    return path if run_id is None else f"{path}?{urlencode({'dag_run_id': run_id})}"


__all__ += ["dag_page_path", "dag_run_columns", "latest_serialized_dags"]


# --- Memory per zero-worker wait (issue 25) -----------------------------------------------------------------
# 3.3.2 (jobs/triggerer_job_runner.py): for a start-from-trigger task, ``create_triggers`` deserializes the
# whole DAG per trigger (``create_runtime_ti``: ``DagSerialization.from_dict(dag_data).get_task(...)``, no
# cache), sets the runtime task instance (``task`` -> the DAG with all its tasks) as ``task_instance`` and
# builds the template context (cached on that task instance; it holds the DAG, the task, the TI, the params
# and the accessors). ``run_trigger`` keeps both for as long as the trigger runs (its local ``ti`` and its
# ``context`` argument) although it reads them only before ``run()`` starts: the log context and the span
# take the TI's ids, ``render_template_fields`` takes the context; after an event it reads neither (the
# event goes to the supervisor, which ends the task from the database). A trigger dropping its own
# references frees nothing; emptying that context and detaching the task from that task instance does.
# Bounded to the 3.3 line read above: a later runner might read the context or ``ti.task`` after ``run()``
# starts; extend the bound once its ``run_trigger`` is read again.
START_CONTEXT_RELEASABLE = AIRFLOW_V_3_3_PLUS and Version("3.4.0") > _AIRFLOW_BASE_VERSION


def release_start_context(trigger: Any, context: Any) -> None:
    """Let go of the template context and the DAG Airflow built to render a start-from-trigger task, once the
    trigger has taken what it needs from them (plain values). The task instance keeps its ids, try and run
    data. A no-op where Airflow builds neither (2.11 renders nothing; 3.0-3.2 start on a worker)."""
    if not START_CONTEXT_RELEASABLE:
        return
    if context is not None:
        context.clear()
    ti = getattr(trigger, "task_instance", None)
    if ti is not None and getattr(ti, "task", None) is not None:
        ti.task = None


__all__ += ["START_CONTEXT_RELEASABLE", "release_start_context"]


# --- Trigger queues (issue 25: identical waits meet in one triggerer) -----------------------------------------
def trigger_queue_unavailable() -> str | None:
    """Why a worker's deferral cannot choose its trigger's queue on this deployment (None: it can)."""
    if not AIRFLOW_V_3_2_PLUS:
        return "trigger queues need Airflow 3.2 or later"
    from airflow.configuration import conf

    if not conf.getboolean("triggerer", "queues_enabled", fallback=False):
        return "[triggerer] queues_enabled is False"
    return None


def set_deferral_queue(task: Any, queue: str) -> None:
    """3.2+: a worker's deferral gives its trigger the queue ``ti.task.queue`` (sdk task_runner
    ``_defer_task``). This try already ran on its executor queue, and a resumed try parses the task afresh,
    so setting it just before deferring moves only the trigger."""
    task.queue = queue


__all__ += ["set_deferral_queue", "trigger_queue_unavailable"]
