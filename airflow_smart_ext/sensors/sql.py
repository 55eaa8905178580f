"""``BackoffSqlSensor``: common-sql's ``SqlSensor`` parameters, a backoff schedule, one bound-parameter row.

The "first row -> criteria -> outcome" rule lives in :func:`evaluate_first_row` and the query in
:func:`fetch_first_row`; the deferrable ``BackoffTrigger`` calls the very same two functions, so poke,
reschedule and deferrable modes decide identically.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.sensors.base import BackoffSensor, _is_runtime_value, _json_problem, callable_path

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook

Criterion = Callable[[Any], Any]


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


def _resolve(criterion: Criterion | str | None, param: str) -> Criterion | None:
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
    Criteria may be callables or dotted import paths. Called by ``BackoffSqlSensor.poke`` and by the
    ``"sql"`` check of ``airflow_smart_ext.triggers.BackoffTrigger`` so every mode decides identically.
    """
    if row is None:
        if fail_on_empty:
            raise compat.AirflowFailException("No rows returned and fail_on_empty=True")
        return FirstRowOutcome(False, "No rows returned yet")
    select = _resolve(selector, "selector")
    value = select(row) if select is not None else row[0]
    fail = _resolve(failure, "failure")
    if fail is not None and fail(value):
        raise compat.AirflowFailException(f"Failure criteria met: failure({value!r}) returned True")
    ok = _resolve(success, "success")
    if ok is not None:
        if ok(value):
            return FirstRowOutcome(True, f"Success criteria met: success({value!r}) returned True", value)
        return FirstRowOutcome(False, f"success({value!r}) returned False", value)
    if value:
        return FirstRowOutcome(True, f"First cell {value!r} is truthy", value)
    return FirstRowOutcome(False, f"First cell {value!r} is falsy", value)


def fetch_first_row(hook: DbApiHook, sql: str, parameters: Any = None) -> tuple[Any, ...] | None:
    """Run ``sql`` with *bound* ``parameters`` (never string formatting) and fetch only the first row.

    Through the hook's own ``get_first`` (``run`` + ``fetchone``), so a hook's overrides of ``run`` /
    ``get_conn`` and its autocommit handling apply, as for common-sql's ``SqlSensor``. Parameters use the
    driver's paramstyle (sqlite ``?``/``:name``, psycopg2 ``%s``/``%(name)s``). Only one row is *fetched*;
    a driver may still transfer more (psycopg2 buffers the whole result), so end the query with
    ``LIMIT 1`` when it can match many rows. Blocking; the trigger runs it in a worker thread.
    """
    row = hook.get_first(sql, parameters)
    return None if row is None else tuple(row)


def get_db_hook(conn_id: str, hook_params: Mapping[str, Any] | None = None) -> DbApiHook:
    """The connection's ``DbApiHook`` (the same lookup common-sql's SqlSensor does)."""
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    connection = compat.SensorBaseHook.get_connection(conn_id)
    hook = connection.get_hook(hook_params=dict(hook_params or {}))
    if not isinstance(hook, DbApiHook):
        raise compat.AirflowException(
            f"Connection {conn_id!r} has type {connection.conn_type!r} whose hook {type(hook).__name__} is not "
            f"a common-sql DbApiHook; BackoffSqlSensor needs a SQL database connection."
        )
    return hook


class BackoffSqlSensor(BackoffSensor):
    """Wait until a SQL query's first row meets a condition, with a backoff schedule.

    Parameters are those of ``airflow.providers.common.sql.sensors.sql.SqlSensor`` plus BackoffSensor's.

    :param conn_id: Airflow connection of a SQL database (templated).
    :param sql: query; only its first row is fetched (templated; ``.sql``/``.hql`` files are read).
    :param parameters: values bound by the driver (templated). Never formatted into the SQL text.
    :param success: callable (or dotted path) taking the selected value; True -> done.
    :param failure: callable (or dotted path); True -> the task fails immediately **without retries**
        (``AirflowFailException``; skipped instead with ``soft_fail``/``never_fail``; ``silent_fail`` does
        not swallow it).
    :param selector: callable (or dotted path) turning the row into the value; default: first cell.
    :param fail_on_empty: no row -> fail like a matched failure criterion.
    :param hook_params: extra keyword arguments for the connection's hook (templated).

    For ``deferrable=True`` the criteria must be importable by name in the triggerer: module-level
    functions of an installed package / plugins-folder module, or dotted-path strings.
    """

    template_fields: Sequence[str] = ("sql", "hook_params", "parameters", "conn_id")
    template_ext: Sequence[str] = (".hql", ".sql")
    ui_color = "#7c7287"

    def __init__(
        self,
        *,
        conn_id: str,
        sql: str,
        parameters: Mapping[str, Any] | Sequence[Any] | None = None,
        success: Criterion | str | None = None,
        failure: Criterion | str | None = None,
        selector: Criterion | str | None = None,
        fail_on_empty: bool = False,
        hook_params: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.conn_id = conn_id
        self.sql = sql
        self.parameters = parameters
        self.success = success
        self.failure = failure
        self.selector = selector
        self.fail_on_empty = fail_on_empty
        self.hook_params = hook_params
        for name in ("success", "failure", "selector"):
            _resolve(getattr(self, name), name)  # parse-time error for a bad callable / dotted path
        if not isinstance(fail_on_empty, bool):
            raise ValueError(f"fail_on_empty must be True or False; got {fail_on_empty!r}")
        super().__init__(**kwargs)

    def _get_hook(self) -> DbApiHook:
        return get_db_hook(self.conn_id, self.hook_params)

    def poke(self, context: Any) -> bool:
        hook = self._get_hook()
        self.log.info("Poking: %s (bound parameters: %s)", self.sql, self.parameters)
        try:
            row = fetch_first_row(hook, self.sql, self.parameters)
        except Exception as err:
            raise compat.AirflowException(
                f"Query failed on connection {self.conn_id!r}: {type(err).__name__}: {err}"
            ) from err
        # A matched failure criterion raises AirflowFailException: no retry, not swallowed by silent_fail.
        outcome = evaluate_first_row(row, self.selector, self.success, self.failure, self.fail_on_empty)
        self.log.info("Check result: %s", outcome.message)
        return bool(outcome)

    # ------------------------------------------------------------------ deferrable (Contract C)
    def shippability_problem(self) -> str | None:
        for name in ("selector", "success", "failure"):
            criterion = getattr(self, name)
            if criterion is None or isinstance(criterion, str):
                continue
            if callable_path(criterion) is None:
                return (
                    f"{name}={criterion!r} cannot be imported by name in the triggerer (lambdas, nested "
                    f"functions, partials and functions defined in a DAG file are not); use a module-level "
                    f"function of an installed package or plugins-folder module, or its dotted path string"
                )
        for name in ("parameters", "hook_params"):
            value = getattr(self, name)
            if _is_runtime_value(value):
                continue
            problem = _json_problem(value)
            if problem is not None:
                return f"{name}={value!r} is not JSON-serializable ({problem})"
        return None

    def deferrable_check(self, context: Any) -> dict[str, Any]:
        """The Contract C ``"sql"`` check spec (rendered template fields, criteria as dotted paths)."""

        def path(name: str) -> str | None:
            criterion = getattr(self, name)
            if criterion is None or isinstance(criterion, str):
                return criterion
            dotted = callable_path(criterion)
            if dotted is None:
                raise compat.AirflowException(
                    f"Cannot defer task {self.task_id!r}: {self.shippability_problem()}"
                )
            return dotted

        parameters = self.parameters
        if isinstance(parameters, tuple):
            parameters = list(parameters)
        spec = {
            "type": "sql",
            "conn_id": self.conn_id,
            "sql": self.sql,
            "parameters": parameters,
            "hook_params": dict(self.hook_params) if self.hook_params else None,
            "selector": path("selector"),
            "success": path("success"),
            "failure": path("failure"),
            "fail_on_empty": self.fail_on_empty,
        }
        problem = _json_problem(spec)
        if problem is not None:
            raise compat.AirflowException(
                f"Cannot defer task {self.task_id!r}: rendered parameters are not JSON-serializable ({problem})"
            )
        return spec
