"""Check type ``"sql_values"``: every row of a bound-parameter query, one value per row.

A condition watcher with ``every_value=True`` runs its ``sql_condition`` as this type, its watermark bound
into ``parameters`` (``airflow_smart_ext.triggers.condition_watcher``): the query returns the values after it. The
connection, the hook and its quiet logging are the ``"sql"`` type's.

Spec: ``{"type": "sql_values", "conn_id", "sql", "parameters", "hook_params", "selector"}`` (the selector as a
dotted import path or None).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.conditions.outcomes import NEGATIVE, Outcome, outcome_from_exception
from airflow_smart_ext.conditions.runtime import import_object
from airflow_smart_ext.conditions.spec import Interpreter, SharedCheck
from airflow_smart_ext.conditions.sql import SqlCheck, SqlSharedCheck, db_hook, quiet, validate_query_spec

#: Rows fetched per check: a backlog larger than this is read over several checks (the query must then
#: ``ORDER BY`` the value, so that each check reads the oldest ones).
MAX_ROWS_PER_CHECK = 1000


def _query_rows(connection: Any, sql: str, parameters: Any, hook_params: Mapping[str, Any] | None) -> Any:
    """Blocking (worker thread): at most ``MAX_ROWS_PER_CHECK`` rows, through the hook's own ``run``."""
    hook = db_hook(connection, hook_params)
    quiet(hook, sql, parameters)
    rows = hook.run(sql, parameters=parameters, handler=lambda cursor: cursor.fetchmany(MAX_ROWS_PER_CHECK))
    return [tuple(row) for row in rows or ()]


class SqlValuesSharedCheck(SqlSharedCheck):
    """Fetch the rows once per group (one group per bound watermark)."""

    query = staticmethod(_query_rows)


class SqlValuesInterpreter:
    """Each row's value: ``selector(row)``, by default its first cell; a NULL is no value."""

    def __init__(self, check: Mapping[str, Any]) -> None:
        self.selector = import_object(check["selector"]) if check["selector"] else None

    def __call__(self, rows: Any) -> Outcome:
        try:
            found = [self.selector(row) if self.selector is not None else row[0] for row in rows]
        except compat.locations.CHECK_ERRORS as err:
            return outcome_from_exception(err)
        found = [value for value in found if value is not None]
        if not found:
            return NEGATIVE
        return Outcome("positive", message=f"{len(found)} value(s) after the watermark", value=found)


class SqlValuesCheck(SqlCheck):
    """A query on a connection, as ``SqlCheck`` (its shared identity, connection and concurrency key: the
    parameters hold the bound watermark, so watchers at different watermarks never share a query), read for
    every row instead of a criterion."""

    name: ClassVar[str] = "sql_values"
    keys: ClassVar[tuple[str, ...]] = ("type", "conn_id", "sql", "parameters", "hook_params", "selector")

    def validate(self, check: Mapping[str, Any]) -> None:
        validate_query_spec(check, ("selector",), refuse_blank=True)

    def describe(self, check: Mapping[str, Any]) -> str:
        words = (
            f"every row of SQL on {check['conn_id']}: {check['sql']} with parameters {check['parameters']!r}"
        )
        return words + (f" (selector={check['selector']})" if check["selector"] else "")

    def shared_check(self, check: Mapping[str, Any]) -> SharedCheck:
        return SqlValuesSharedCheck(check["conn_id"], check["sql"], check["parameters"], check["hook_params"])

    async def interpreter(self, check: Mapping[str, Any]) -> Interpreter:
        # Importing a user selector may run module code: off the loop.
        return await runtime.run_blocking(SqlValuesInterpreter, check)
