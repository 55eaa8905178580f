"""Check runners for the two ``BackoffTrigger`` check specs (Contract C): ``"sensor"`` and ``"sql"``.

A check has two halves:

* the *shared* half (``SharedCheck.run``) does the expensive I/O once per sharing group: poke a re-created
  sensor, or fetch the first row of a query. Blocking work runs in a dedicated thread pool (never on the
  triggerer's event loop, never through ``asgiref.sync_to_async`` which funnels every call onto one thread)
  behind a per-connection semaphore, so 1,000 triggers cannot open 1,000 connections at once;
* the *per-subscriber* half (``Interpreter``) turns that raw observation into this subscriber's outcome
  (for SQL: its own selector / success / failure criteria).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import inspect
import json
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_smart_ext import compat

CHECK_TYPES = ("sensor", "sql")
SENSOR_SPEC_KEYS = ("type", "classpath", "kwargs", "context")
SQL_SPEC_KEYS = (
    "type",
    "conn_id",
    "sql",
    "parameters",
    "hook_params",
    "selector",
    "success",
    "failure",
    "fail_on_empty",
)
# Context values the sensor side ships as ISO strings; pokes get them back as datetimes, like on a worker.
DATETIME_CONTEXT_KEYS = ("logical_date", "data_interval_start", "data_interval_end")
# The shipped context keys that say *which data* a poke is about; they are part of a sensor check's identity.
SHARED_CONTEXT_KEYS = ("ds", "ts", *DATETIME_CONTEXT_KEYS)

CONFIG_SECTION = "smart_ext"
DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION = 4
DEFAULT_CHECK_THREADS = 32

OUTCOME_STATUSES = ("positive", "negative", "failure", "timeout", "skip", "error")

T = TypeVar("T")


@dataclass(frozen=True)
class CheckOutcome:
    """What one check means for one subscriber."""

    status: str  # one of OUTCOME_STATUSES
    xcom_value: Any = None
    message: str = ""

    @property
    def is_terminal(self) -> bool:
        return self.status != "negative"


NEGATIVE = CheckOutcome("negative")


# --- spec validation and keys ----------------------------------------------------------------------


def validate_check_spec(check: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the offending key and the accepted values."""
    if not isinstance(check, Mapping):
        raise ValueError(
            f"check must be a dict with a 'type' key in {CHECK_TYPES}, got {type(check).__name__}"
        )
    check_type = check.get("type")
    if check_type not in CHECK_TYPES:
        raise ValueError(f"check['type'] must be one of {CHECK_TYPES}, got {check_type!r}")
    expected = SENSOR_SPEC_KEYS if check_type == "sensor" else SQL_SPEC_KEYS
    missing = [key for key in expected if key not in check]
    unknown = sorted(set(check) - set(expected))
    if missing or unknown:
        raise ValueError(
            f"check of type {check_type!r} must have exactly the keys {expected}; "
            f"missing {missing}, unknown {unknown}"
        )
    if check_type == "sensor":
        if not isinstance(check["classpath"], str) or "." not in check["classpath"]:
            raise ValueError(
                f"check['classpath'] must be a dotted 'module.Class' path, got {check['classpath']!r}"
            )
        for key in ("kwargs", "context"):
            if not isinstance(check[key], Mapping):
                raise ValueError(f"check[{key!r}] must be a dict, got {type(check[key]).__name__}")
        if not check["context"].get("task_id"):
            raise ValueError("check['context'] must contain 'task_id' (the sensor is re-created with it)")
    else:
        for key in ("conn_id", "sql"):
            if not isinstance(check[key], str) or not check[key]:
                raise ValueError(f"check[{key!r}] must be a non-empty string, got {check[key]!r}")
        for key in ("selector", "success", "failure"):
            if check[key] is not None and (not isinstance(check[key], str) or "." not in check[key]):
                raise ValueError(
                    f"check[{key!r}] must be None or the dotted import path of a module-level callable, "
                    f"got {check[key]!r}"
                )
    try:
        json.dumps(dict(check), sort_keys=True)
    except (TypeError, ValueError) as err:
        raise ValueError(f"check spec must be JSON-serializable: {err}") from err


def sharing_key(check: Mapping[str, Any]) -> str:
    """Identical waits have equal keys: the parts of the spec that decide what the shared I/O does."""
    if check["type"] == "sensor":
        # A poke may read the run's dates from its context (``ds``, the data interval): only waits for the
        # same dates are identical. Task identity (dag/task/run id, try) stays out, so runs of many DAGs
        # waiting on the same thing for the same day still share.
        dates = {key: check["context"].get(key) for key in SHARED_CONTEXT_KEYS}
        shared = {
            "type": "sensor",
            "classpath": check["classpath"],
            "kwargs": check["kwargs"],
            "dates": dates,
        }
    else:
        shared = {key: check[key] for key in ("type", "conn_id", "sql", "parameters", "hook_params")}
    return json.dumps(shared, sort_keys=True, separators=(",", ":"), default=str)


def sensor_concurrency_key(classpath: str, kwargs: Mapping[str, Any]) -> str:
    """A sensor's bound: its connection when its kwargs name one, else its class.

    A string-valued constructor argument whose name ends with ``conn_id`` (``conn_id``, ``aws_conn_id``,
    ``http_conn_id``, ...) keys the bound by that connection (``conn_id:<value>``, shared with SQL checks
    on it), so hung pokes against one system do not block the same class's checks against another. With
    several such arguments the first name in sorted order decides. Otherwise ``sensor:<classpath>``.
    """
    for name in sorted(kwargs):
        value = kwargs[name]
        if name.endswith("conn_id") and isinstance(value, str) and value:
            return f"conn_id:{value}"
    return f"sensor:{classpath}"


def concurrency_key(check: Mapping[str, Any]) -> str:
    """Checks with the same key compete for one semaphore (one connection, or one sensor class)."""
    if check["type"] == "sql":
        return f"conn_id:{check['conn_id']}"
    return sensor_concurrency_key(check["classpath"], check["kwargs"])


# --- configuration -----------------------------------------------------------------------------------


def config_positive_int(key: str, default: int) -> int:
    value = compat.airflow_conf.get(CONFIG_SECTION, key, fallback=str(default))
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"[{CONFIG_SECTION}] {key} must be a positive integer, got {value!r}")
    return number


def config_non_negative_float(key: str, default: float) -> float:
    value = compat.airflow_conf.get(CONFIG_SECTION, key, fallback=str(default))
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not number >= 0:
        raise ValueError(f"[{CONFIG_SECTION}] {key} must be a number >= 0, got {value!r}")
    return number


# --- running blocking work off the event loop ---------------------------------------------------------

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()
# asyncio.Semaphore binds to the loop that first uses it: keep one set per running loop.
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _check_executor() -> ThreadPoolExecutor:
    """A pool of our own: the loop's default executor is small (cpu + 4) and shared with everything else."""
    global _executor
    if _executor is not None:  # the hot path (every blocking check): no lock once created
        return _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=config_positive_int("check_threads", DEFAULT_CHECK_THREADS),
                thread_name_prefix="smart-ext-check",
            )
        return _executor


async def run_blocking(func: Callable[..., T], *args: Any) -> T:
    """Run ``func(*args)`` in a worker thread, keeping context variables (log context) like to_thread."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, func, *args)
    return await loop.run_in_executor(_check_executor(), call)


def connection_semaphore(key: str) -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    per_loop = _semaphores.setdefault(loop, {})
    if key not in per_loop:
        per_loop[key] = asyncio.Semaphore(
            config_positive_int(
                "max_concurrent_checks_per_connection", DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION
            )
        )
    return per_loop[key]


# --- importing user code in the triggerer ---------------------------------------------------------------


def import_object(dotted_path: str) -> Any:
    """Import ``pkg.module.Name`` (a sensor class or an SQL criterion) in the triggerer.

    Modules kept in the DAGs folder (e.g. ``dags/common/sensors.py`` imported as ``common.sensors``) are
    importable on workers because Airflow puts the DAGs folder / bundle on ``sys.path`` there, but the 3.x
    triggerer does not: on ``ModuleNotFoundError`` the DAGs folder is added and the import retried.
    """
    module_name, _, attr = dotted_path.rpartition(".")
    if not module_name:
        raise ImportError(f"{dotted_path!r} is not a dotted 'module.name' path")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        dags_folder = compat.airflow_conf.get("core", "dags_folder", fallback="")
        if not dags_folder or not os.path.isdir(dags_folder) or dags_folder in sys.path:
            raise
        sys.path.append(dags_folder)
        module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {attr!r}") from None


# --- the shared halves ------------------------------------------------------------------------------------


class SharedCheck:
    """The I/O half of a check; one instance per sharing group. ``run`` returns a raw observation."""

    concurrency_key: str

    async def run(self, context: Mapping[str, Any]) -> Any:
        raise NotImplementedError


def _outcome_from_exception(err: BaseException) -> CheckOutcome:
    """Map what a poke raises to the outcome poke mode would have had."""
    if isinstance(err, compat.AirflowSkipException):
        return CheckOutcome("skip", message=f"{type(err).__name__}: {err}")
    if isinstance(err, (compat.AirflowSensorTimeout, compat.AirflowTaskTimeout)):
        return CheckOutcome("timeout", message=f"{type(err).__name__}: {err}")
    if isinstance(err, compat.AirflowFailException):
        return CheckOutcome("failure", message=f"{type(err).__name__}: {err}")
    return CheckOutcome("error", message=f"{type(err).__name__}: {err}")


def _json_or_error(outcome: CheckOutcome) -> CheckOutcome:
    """Events must be JSON: refuse an XCom value that is not, with a message that says so."""
    try:
        json.dumps(outcome.xcom_value)
    except (TypeError, ValueError) as err:
        return CheckOutcome(
            "error",
            message=f"the check's XCom value ({type(outcome.xcom_value).__name__}) is not JSON-serializable "
            f"and cannot travel in a trigger event: {err}",
        )
    return outcome


_PARSED_DATETIMES: dict[str, Any] = {}  # ISO string -> parsed value; shipped dates repeat every check


def _parse_datetime_cached(value: str) -> Any:
    parsed = _PARSED_DATETIMES.get(value)
    if parsed is None:
        if len(_PARSED_DATETIMES) >= 4096:  # bounded: a long-lived triggerer sees ever new run dates
            _PARSED_DATETIMES.clear()
        parsed = _PARSED_DATETIMES[value] = compat.parse_datetime(value)
    return parsed


def poke_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The reduced context a poke gets in the triggerer: the shipped keys, datetimes parsed back.

    A fresh dict each call (a poke may modify it); the parsed datetimes are immutable and cached.
    """
    result = dict(context)
    for key in DATETIME_CONTEXT_KEYS:
        value = result.get(key)
        if isinstance(value, str) and value:
            result[key] = _parse_datetime_cached(value)
    return result


class SensorSharedCheck(SharedCheck):
    """Re-create the sensor once per group and call its ``poke`` (thread) or ``apoke`` (awaited)."""

    def __init__(self, classpath: str, kwargs: Mapping[str, Any], task_id: str) -> None:
        self.classpath = classpath
        self.kwargs = dict(kwargs)
        self.task_id = task_id
        self.concurrency_key = sensor_concurrency_key(classpath, self.kwargs)
        self._sensor: Any = None

    def _build(self) -> Any:
        if self._sensor is None:
            sensor_class = import_object(self.classpath)
            self._sensor = sensor_class(task_id=self.task_id, **self.kwargs)
        return self._sensor

    def _poke(self, context: dict[str, Any]) -> Any:
        return self._build().poke(context)

    async def run(self, context: Mapping[str, Any]) -> CheckOutcome:
        ctx = poke_context(context)
        try:
            async with connection_semaphore(self.concurrency_key):
                sensor = self._sensor if self._sensor is not None else await run_blocking(self._build)
                apoke = getattr(sensor, "apoke", None)
                if apoke is not None and inspect.iscoroutinefunction(apoke):
                    result = await apoke(ctx)
                else:
                    result = await run_blocking(self._poke, ctx)
        except (Exception, compat.AirflowTaskTimeout) as err:
            return _outcome_from_exception(err)
        # PokeReturnValue is truthy when done and carries the XCom value; a bare bool works too.
        if not bool(result):
            return NEGATIVE
        return _json_or_error(CheckOutcome("positive", xcom_value=getattr(result, "xcom_value", None)))


def _query_first_row(
    connection: Any, sql: str, parameters: Any, hook_params: Mapping[str, Any] | None
) -> Any:
    """Blocking (worker thread): the connection's DbApiHook runs the query, the sensor's rule fetches."""
    from airflow_smart_ext.sensors.sql import fetch_first_row

    hook = connection.get_hook(hook_params=dict(hook_params or {}))
    if not callable(getattr(hook, "get_conn", None)):
        raise TypeError(
            f"connection {connection.conn_id!r} of type {connection.conn_type!r} has hook "
            f"{type(hook).__name__}, not a common-sql DbApiHook"
        )
    use_fetched_connection(hook, connection)
    return fetch_first_row(hook, sql, parameters)


def use_fetched_connection(hook: Any, connection: Any) -> None:
    """Make ``hook`` use the Connection the trigger already fetched, never look it up a second time.

    A sync lookup from the worker thread would go through the supervisor again on 3.x (a second round
    trip; untested on 3.0-3.2). common-sql's ``DbApiHook.connection`` reads the cached ``_connection``
    (e.g. PostgresHook.get_conn), but some hooks call ``self.get_connection(conn_id)`` directly
    (SqliteHook.get_uri): shadow that on this instance for our conn_id too.
    """
    hook._connection = connection
    lookup = hook.get_connection

    def get_connection(conn_id: str) -> Any:
        return connection if conn_id == connection.conn_id else lookup(conn_id)

    hook.get_connection = get_connection


class SqlSharedCheck(SharedCheck):
    """Fetch the first row once per group; subscribers apply their own criteria to it."""

    def __init__(
        self, conn_id: str, sql: str, parameters: Any, hook_params: Mapping[str, Any] | None
    ) -> None:
        self.conn_id = conn_id
        self.sql = sql
        self.parameters = parameters
        self.hook_params = hook_params
        self.concurrency_key = f"conn_id:{conn_id}"

    async def run(self, context: Mapping[str, Any]) -> tuple[Any, ...] | None:
        async with connection_semaphore(self.concurrency_key):
            # Airflow 3 triggers have no metadata-DB access: the connection comes through the supervisor.
            connection = await compat.aget_connection(self.conn_id)
            return await run_blocking(
                _query_first_row, connection, self.sql, self.parameters, self.hook_params
            )


def make_shared_check(check: Mapping[str, Any]) -> SharedCheck:
    if check["type"] == "sensor":
        return SensorSharedCheck(check["classpath"], check["kwargs"], check["context"]["task_id"])
    return SqlSharedCheck(check["conn_id"], check["sql"], check["parameters"], check["hook_params"])


# --- the per-subscriber halves ------------------------------------------------------------------------------

Interpreter = Callable[[Any], CheckOutcome]


def _sensor_interpreter(raw: CheckOutcome) -> CheckOutcome:
    return raw


class SqlInterpreter:
    """Apply one subscriber's selector / success / failure criteria to the shared first row."""

    def __init__(self, check: Mapping[str, Any]) -> None:
        self.selector = import_object(check["selector"]) if check["selector"] else None
        self.success = import_object(check["success"]) if check["success"] else None
        self.failure = import_object(check["failure"]) if check["failure"] else None
        self.fail_on_empty = bool(check["fail_on_empty"])

    def __call__(self, row: Any) -> CheckOutcome:
        from airflow_smart_ext.sensors.sql import evaluate_first_row

        try:
            # Truthy when done; a failure criterion raises AirflowFailException (-> "failure").
            result = evaluate_first_row(row, self.selector, self.success, self.failure, self.fail_on_empty)
        except (Exception, compat.AirflowTaskTimeout) as err:
            return _outcome_from_exception(err)
        if not bool(result):
            return CheckOutcome("negative", message=str(getattr(result, "message", "")))
        return _json_or_error(
            CheckOutcome(
                "positive",
                xcom_value=getattr(result, "xcom_value", None),
                message=str(getattr(result, "message", "")),
            )
        )


async def make_interpreter(check: Mapping[str, Any]) -> Interpreter:
    """Build the per-subscriber half; importing user criteria may run module code, so off the loop."""
    if check["type"] == "sensor":
        return _sensor_interpreter
    return await run_blocking(SqlInterpreter, check)
