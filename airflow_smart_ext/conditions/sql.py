"""Check type ``"sql"``: the first row of a bound-parameter query, judged by common-sql's rules.

The query (:func:`fetch_first_row`), the hook (:func:`db_hook`) and the "first row -> criteria -> outcome"
rule (:func:`evaluate_first_row`) are used by ``BackoffSqlSensor.poke`` on a worker and by this check type
in the triggerer, so poke, reschedule and deferrable modes decide identically.

Spec: ``{"type": "sql", "conn_id", "sql", "parameters", "hook_params", "selector", "success", "failure",
"fail_on_empty"}`` (criteria as dotted import paths or None).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.conditions.outcomes import outcome_from_exception, outcome_from_result
from airflow_smart_ext.conditions.runtime import import_object
from airflow_smart_ext.conditions.spec import CheckType, Interpreter, SharedCheck

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook

Criterion = Callable[[Any], Any]
CRITERIA = ("selector", "success", "failure")


@dataclass(frozen=True)
class FirstRowOutcome:
    """What one check of a SQL condition concluded when it did not fail: truthy when the wait is over."""

    done: bool
    message: str
    value: Any = None  # selector(row) (the first cell by default); None when there was no row

    def __bool__(self) -> bool:
        return self.done

    @property
    def xcom_value(self) -> None:
        """Like common-sql's SqlSensor, a SQL wait pushes no XCom value (PokeReturnValue-compatible)."""
        return None


def import_callable(path: str, *, param: str = "callable") -> Criterion:
    """Import ``"pkg.module.func"`` (a module-level callable); ValueError naming ``param`` otherwise."""
    module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(
            f"{param} must be a callable or a dotted path 'package.module.function'; got {path!r}"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{param}={path!r} cannot be imported: {err}") from err
    if not callable(target):
        raise ValueError(f"{param}={path!r} is not callable")
    return target  # type: ignore[no-any-return]


def resolve_criterion(criterion: Criterion | str | None, param: str) -> Criterion | None:
    if criterion is None or callable(criterion):
        return criterion
    if isinstance(criterion, str):
        return import_callable(criterion, param=param)
    raise ValueError(
        f"{param} must be None, a callable or a dotted path 'package.module.function'; got {criterion!r}"
    )


def evaluate_first_row(
    row: Sequence[Any] | None,
    selector: Criterion | str | None = None,
    success: Criterion | str | None = None,
    failure: Criterion | str | None = None,
    fail_on_empty: bool = False,
) -> FirstRowOutcome:
    """Decide a SQL condition from the first row of the result (``row=None``: no row).

    Same rules as common-sql's ``SqlSensor``: no row -> fail when ``fail_on_empty`` else not done;
    ``value = selector(row)`` (default: the first cell); ``failure(value)`` is evaluated first; then
    ``success(value)`` decides; without ``success``, ``bool(value)`` decides.

    Returns a :class:`FirstRowOutcome` (truthy = done). A matched failure criterion or an empty result
    with ``fail_on_empty`` raises ``AirflowFailException`` (fail without retries, as the contract says);
    exceptions raised by the criteria themselves propagate unchanged (an error, not an outcome).
    Criteria may be callables or dotted import paths.
    """
    if row is None:
        if fail_on_empty:
            raise compat.locations.AirflowFailException("No rows returned and fail_on_empty=True")
        return FirstRowOutcome(False, "No rows returned yet")
    select = resolve_criterion(selector, "selector")
    value = select(row) if select is not None else row[0]
    fail = resolve_criterion(failure, "failure")
    if fail is not None and fail(value):
        raise compat.locations.AirflowFailException(f"Failure criteria met: failure({value!r}) returned True")
    ok = resolve_criterion(success, "success")
    if ok is not None:
        if ok(value):
            return FirstRowOutcome(True, f"Success criteria met: success({value!r}) returned True", value)
        return FirstRowOutcome(False, f"success({value!r}) returned False", value)
    if value:
        return FirstRowOutcome(True, f"First cell {value!r} is truthy", value)
    return FirstRowOutcome(False, f"First cell {value!r} is falsy", value)


class _WithoutStatement:
    """A hook's logger that drops every line quoting the statement or one of its bound values, at any level
    (stdlib or structlog alike).

    Judged by what a line carries, not by its wording: common-sql's own lines (``DbApiHook.run``'s "Executing
    following statements against DB: %s" at DEBUG, ``DbApiHook._run_command``'s "Running statement: %s,
    parameters: %s" at INFO) and any line a hook subclass adds. The hook's other lines stay.
    """

    _LEVELS = frozenset(
        {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg"}
    )

    def __init__(self, logger: Any, sql: str, parameters: Any) -> None:
        self._logger = logger
        texts = [text for text in (sql, *_leaf_texts(parameters)) if text]
        # Also as repr() prints them inside a list or a dict (quotes, backslashes, newlines escaped).
        self._quoted = {form for text in texts for form in (text, repr(text)[1:-1]) if form}

    def _quotes(self, *parts: Any) -> bool:
        return any(quoted in text for part in parts for text in _leaf_texts(part) for quoted in self._quoted)

    def log(self, level: Any, message: Any, *args: Any, **kwargs: Any) -> None:
        if not self._quotes(message, args, kwargs):
            self._logger.log(level, message, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        write = getattr(self._logger, name)
        if name not in self._LEVELS:
            return write

        def unless_quoting(message: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._quotes(message, args, kwargs):
                return write(message, *args, **kwargs)
            return None

        return unless_quoting


def _leaf_texts(value: Any) -> Iterator[str]:
    """The text of every leaf of ``value`` (containers walked; None and booleans are no value)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaf_texts(key)
            yield from _leaf_texts(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _leaf_texts(item)
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def fetch_first_row(hook: DbApiHook, sql: str, parameters: Any = None) -> tuple[Any, ...] | None:
    """Run ``sql`` with *bound* ``parameters`` (never string formatting) and fetch only the first row.

    Through the hook's own ``get_first`` (``run`` + ``fetchone``), so a hook's overrides of ``run`` /
    ``get_conn`` and its autocommit handling apply, as for common-sql's ``SqlSensor``. Parameters use the
    driver's paramstyle (sqlite ``?``/``:name``, psycopg2 ``%s``/``%(name)s``). Only one row is *fetched*;
    a driver may still transfer more (psycopg2 buffers the whole result), so end the query with
    ``LIMIT 1`` when it can match many rows. Blocking; the trigger runs it in a worker thread.
    """
    quiet(hook, sql, parameters)
    row = hook.get_first(sql, parameters)
    return None if row is None else tuple(row)


def quiet(hook: DbApiHook, sql: str, parameters: Any) -> None:
    """Keep the query and its bound values out of the hook's log lines."""
    # common-sql logs each statement with its bound values (INFO) and the statement list (DEBUG): a rendered
    # secret in either would reach a component's stdout, which nothing masks (a task log is masked). log_sql
    # off skips the first where it is written; the per-instance logger drops any line quoting either.
    hook.log_sql = False
    hook._log = _WithoutStatement(hook.log, sql, parameters)  # type: ignore[assignment]  # LoggingMixin's logger


def build_spec(
    *,
    conn_id: str,
    sql: str,
    parameters: Any,
    hook_params: Mapping[str, Any] | None,
    criteria: Mapping[str, str | None],
    fail_on_empty: bool,
) -> dict[str, Any]:
    """The ``"sql"`` spec (criteria as dotted paths; tuple parameters as a list, as JSON carries them)."""
    return {
        "type": "sql",
        "conn_id": conn_id,
        "sql": sql,
        "parameters": list(parameters) if isinstance(parameters, tuple) else parameters,
        "hook_params": dict(hook_params) if hook_params else None,
        **{name: criteria.get(name) for name in CRITERIA},
        "fail_on_empty": fail_on_empty,
    }


def db_hook(connection: Any, hook_params: Mapping[str, Any] | None = None) -> DbApiHook:
    """The one SQL-hook factory (worker and triggerer): ``connection``'s common-sql ``DbApiHook``.

    The hook uses the Connection it is given and never looks it up again (:func:`use_connection`).
    """
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    hook = connection.get_hook(hook_params=dict(hook_params or {}))
    if not isinstance(hook, DbApiHook):
        raise compat.locations.AirflowException(
            f"Connection {connection.conn_id!r} has type {connection.conn_type!r} whose hook "
            f"{type(hook).__name__} is not a common-sql DbApiHook; a SQL check needs a SQL database "
            f"connection."
        )
    use_connection(hook, connection)
    return hook


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


def _query_first_row(
    connection: Any, sql: str, parameters: Any, hook_params: Mapping[str, Any] | None
) -> Any:
    """Blocking (worker thread): the connection's DbApiHook runs the query, the sensor's rule fetches."""
    return fetch_first_row(db_hook(connection, hook_params), sql, parameters)


class SqlSharedCheck(SharedCheck):
    """Fetch the first row once per group; subscribers apply their own criteria to it."""

    query = staticmethod(_query_first_row)  # blocking: (connection, sql, parameters, hook_params) -> raw

    def __init__(
        self, conn_id: str, sql: str, parameters: Any, hook_params: Mapping[str, Any] | None
    ) -> None:
        self.conn_id = conn_id
        self.sql = sql
        self.parameters = parameters
        self.hook_params = hook_params
        self.concurrency_key = f"conn_id:{conn_id}"

    async def run(self, context: Mapping[str, Any]) -> Any:
        # Airflow 3 triggers have no metadata-DB access: the connection comes through the supervisor.
        connection = await compat.connections.aget_connection(
            self.conn_id, within=runtime.CHECK_TIME_LIMIT.get()
        )
        return await runtime.run_blocking(
            self.query,
            connection,
            self.sql,
            self.parameters,
            self.hook_params,
            key=self.concurrency_key,
        )


class SqlInterpreter:
    """Apply one subscriber's selector / success / failure criteria to the shared first row."""

    def __init__(self, check: Mapping[str, Any]) -> None:
        self.selector = import_object(check["selector"]) if check["selector"] else None
        self.success = import_object(check["success"]) if check["success"] else None
        self.failure = import_object(check["failure"]) if check["failure"] else None
        self.fail_on_empty = bool(check["fail_on_empty"])

    def __call__(self, row: Any) -> Any:
        try:
            # Truthy when done; a failure criterion raises AirflowFailException (-> "failure").
            result = evaluate_first_row(row, self.selector, self.success, self.failure, self.fail_on_empty)
        except compat.locations.CHECK_ERRORS as err:
            return outcome_from_exception(err)
        return outcome_from_result(result)


def validate_query_spec(
    check: Mapping[str, Any], criteria: Sequence[str], *, refuse_blank: bool = False
) -> None:
    """A SQL check spec's connection, statement and criteria (dotted paths). ``refuse_blank``: a statement of
    spaces too (the SQL check keeps accepting one: rows of earlier releases must still build in the triggerer,
    where any error but a TypeError stops it; the sensors' parameter table refuses it at parse)."""
    for key in ("conn_id", "sql"):
        value = check[key]
        if not isinstance(value, str) or not (value.strip() if refuse_blank else value):
            raise ValueError(f"check[{key!r}] must be a non-empty string, got {value!r}")
    for key in criteria:
        if check[key] is not None and (not isinstance(check[key], str) or "." not in check[key]):
            raise ValueError(
                f"check[{key!r}] must be None or the dotted import path of a module-level callable, "
                f"got {check[key]!r}"
            )


class SqlCheck(CheckType):
    name: ClassVar[str] = "sql"
    keys: ClassVar[tuple[str, ...]] = (
        "type",
        "conn_id",
        "sql",
        "parameters",
        "hook_params",
        *CRITERIA,
        "fail_on_empty",
    )

    def validate(self, check: Mapping[str, Any]) -> None:
        validate_query_spec(check, CRITERIA)

    def shared_identity(self, check: Mapping[str, Any]) -> dict[str, Any]:
        return {key: check[key] for key in ("conn_id", "sql", "parameters", "hook_params")}

    def concurrency_key(self, check: Mapping[str, Any]) -> str:
        return f"conn_id:{check['conn_id']}"

    def conn_id(self, check: Mapping[str, Any]) -> str | None:
        return str(check["conn_id"])

    def describe(self, check: Mapping[str, Any]) -> str:
        words = f"SQL on {check['conn_id']}: {check['sql']}"
        if check["parameters"]:
            words += f" with parameters {check['parameters']!r}"
        criteria = [f"{name}={check[name]}" for name in CRITERIA if check[name]]
        if check["fail_on_empty"]:
            criteria.append("fail_on_empty")
        return words + (f" ({', '.join(criteria)})" if criteria else "")

    def shared_check(self, check: Mapping[str, Any]) -> SharedCheck:
        return SqlSharedCheck(check["conn_id"], check["sql"], check["parameters"], check["hook_params"])

    async def interpreter(self, check: Mapping[str, Any]) -> Interpreter:
        # Importing user criteria may run module code: off the loop.
        return await runtime.run_blocking(SqlInterpreter, check)
