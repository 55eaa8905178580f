"""``BackoffSqlSensor``: common-sql's ``SqlSensor`` parameters, a backoff schedule, one bound-parameter row.

The query, the hook and the "first row -> criteria -> outcome" rule live in
:mod:`airflow_smart_ext.conditions.sql`; the deferrable ``BackoffTrigger`` uses the very same functions, so
poke, reschedule and deferrable modes decide identically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.conditions.runtime import callable_path, json_problem
from airflow_smart_ext.conditions.sql import (
    CRITERIA,
    Criterion,
    build_spec,
    db_hook,
    evaluate_first_row,
    fetch_first_row,
)
from airflow_smart_ext.sensors import to_triggerer
from airflow_smart_ext.sensors.base import BackoffSensor
from airflow_smart_ext.wait_model import parameters as wait_parameters
from airflow_smart_ext.wait_model.parameters import SQL_PARAMETERS, Parameter, check_arguments

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook


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
        check_arguments(
            SQL_PARAMETERS,
            {
                "conn_id": conn_id,
                "sql": sql,
                "parameters": parameters,
                "success": success,
                "failure": failure,
                "selector": selector,
                "fail_on_empty": fail_on_empty,
                "hook_params": hook_params,
            },
            rules=(),
        )
        super().__init__(**kwargs)

    @classmethod
    def parameter_table(cls) -> tuple[Parameter, ...]:
        return (*SQL_PARAMETERS, *super().parameter_table())

    def _get_hook(self) -> DbApiHook:
        return db_hook(compat.locations.SensorBaseHook.get_connection(self.conn_id), self.hook_params)

    def poke(self, context: Any) -> bool:
        hook = self._get_hook()
        # Neither the rendered SQL nor its bound values: either may hold a secret, and a component's stdout is
        # not masked the way a task log is.
        self.log.info(
            "Poking: SQL on connection %r (%d bound value(s))", self.conn_id, _count(self.parameters)
        )
        try:
            row = fetch_first_row(hook, self.sql, self.parameters)
        except Exception as err:
            raise compat.locations.AirflowException(
                f"Query failed on connection {self.conn_id!r}: {type(err).__name__}: {err}"
            ) from err
        # A matched failure criterion raises AirflowFailException: no retry, not swallowed by silent_fail.
        outcome = evaluate_first_row(row, self.selector, self.success, self.failure, self.fail_on_empty)
        self.log.info("Check result: %s", outcome.message)
        return bool(outcome)

    # ------------------------------------------------------------------ deferrable (the check spec)
    @classmethod
    def _shipping_problem(cls, own_kwargs: Mapping[str, Any]) -> str | None:
        for name in CRITERIA:
            criterion = own_kwargs.get(name)
            if criterion is None or isinstance(criterion, str):
                continue
            if callable_path(criterion) is None:
                return wait_parameters.not_importable_by_name(name, criterion)
        for name in ("parameters", "hook_params"):
            value = own_kwargs.get(name)
            if to_triggerer.holds_runtime_value(value):
                continue
            if isinstance(value, tuple):  # bound parameters: a tuple travels as a list, same binding
                value = list(value)
            problem = json_problem(value)
            if problem is not None:
                return wait_parameters.not_json(name, value, problem)
        return None

    def deferrable_check(self, context: Any) -> dict[str, Any]:
        """The ``"sql"`` check spec (``conditions/spec.py``) (rendered template fields, criteria as dotted paths)."""

        def path(name: str) -> str | None:
            criterion = getattr(self, name)
            if criterion is None or isinstance(criterion, str):
                return criterion
            dotted = callable_path(criterion)
            if dotted is None:
                raise compat.locations.AirflowException(
                    f"Cannot defer task {self.task_id!r}: {self.shippability_problem()}"
                )
            return dotted

        spec = build_spec(
            conn_id=self.conn_id,
            sql=self.sql,
            parameters=self.parameters,
            hook_params=self.hook_params,
            criteria={name: path(name) for name in CRITERIA},
            fail_on_empty=self.fail_on_empty,
        )
        problem = json_problem(spec)
        if problem is not None:
            raise compat.locations.AirflowException(
                f"Cannot defer task {self.task_id!r}: rendered parameters are not JSON-serializable ({problem})"
            )
        return spec


def _count(parameters: Any) -> int:
    return 0 if parameters is None else len(parameters) if isinstance(parameters, (list, tuple, dict)) else 1
