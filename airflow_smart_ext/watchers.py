"""Condition watchers: DAGs that start when the data lands, with no sensor task (Airflow >= 3.0).

::

    from airflow.sdk import Asset, AssetWatcher
    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    orders = Asset("orders_daily", watchers=[AssetWatcher(name="orders_loaded", trigger=ConditionWatcher(
        sql_condition("warehouse", "SELECT max(day) FROM orders_loaded"), poke_interval=60))])

A DAG scheduled on ``orders`` then runs once per new ``max(day)``, the value in the triggering asset event's
``extra["payload"]["value"]``. See docs/watchers.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.conditions.runtime import callable_path, json_problem
from airflow_smart_ext.conditions.sql import CRITERIA, build_spec
from airflow_smart_ext.sensors.to_triggerer import class_shipping_problem
from airflow_smart_ext.wait_model import parameters as wait_parameters
from airflow_smart_ext.wait_model.parameters import WatcherArgumentError

__all__ = ["ConditionWatcher", "WatcherArgumentError", "sensor_condition", "sql_condition"]

if compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
    from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher
else:

    def __getattr__(name: str) -> Any:
        # 2.11: importing the watcher fails at once with what to use instead (where a DAG file imports it
        # before its own ``from airflow.sdk import ...``, which fails first there: docs/watchers.md)
        if name == "ConditionWatcher":
            compat.asset_watchers.require_asset_watchers(f"{__name__}.ConditionWatcher")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The task id a watched sensor is re-created with (it runs in no DAG run; its poke context has no dates).
WATCHED_SENSOR_TASK_ID = "condition_watcher"


def _criterion_path(name: str, criterion: Any) -> str | None:
    """A criterion the table already accepted (None, a callable, a dotted path that imports) as its path."""
    if criterion is None or isinstance(criterion, str):
        return criterion
    path = callable_path(criterion)
    if path is None:
        raise WatcherArgumentError(wait_parameters.not_importable_by_name(name, criterion))
    return path


def sql_condition(
    conn_id: str,
    sql: str,
    *,
    parameters: Any = None,
    hook_params: Mapping[str, Any] | None = None,
    selector: Any = None,
    success: Any = None,
) -> dict[str, Any]:
    """A SQL condition: the value is ``selector(first row)`` (default: its first cell), reported when
    ``success(value)`` holds (default: the value is truthy; no row or NULL: no value yet).

    ``parameters`` are bound (never formatted into the SQL). Criteria: module-level callables or dotted paths.
    Under ``ConditionWatcher(every_value=True)`` every row is a value, ``selector(row)``, and the watcher binds
    its watermark as the parameter ``after`` (the last one when ``parameters`` is a list).
    """
    given = {
        "conn_id": conn_id,
        "sql": sql,
        "parameters": parameters,
        "hook_params": hook_params,
        "selector": selector,
        "success": success,
    }
    rows = [row for row in wait_parameters.SQL_PARAMETERS if row.name in given]
    try:  # the sensor's rows: what BackoffSqlSensor refuses, a watcher refuses with the same message
        wait_parameters.check_arguments(rows, given, rules=())
        problem = wait_parameters.untemplated_problem(given)
        if problem is not None:
            raise ValueError(problem)
        criteria = {
            "selector": _criterion_path("selector", selector),
            "success": _criterion_path("success", success),
        }
    except ValueError as err:
        raise WatcherArgumentError(str(err)) from None
    spec = build_spec(
        conn_id=conn_id,
        sql=sql,
        parameters=parameters,
        hook_params=hook_params,
        criteria={name: criteria.get(name) for name in CRITERIA},
        fail_on_empty=False,
    )
    for name in ("parameters", "hook_params"):
        problem = json_problem(spec[name])
        if problem is not None:
            raise WatcherArgumentError(wait_parameters.not_json(name, spec[name], problem))
    return spec


def sensor_condition(sensor_class: Any, **sensor_kwargs: Any) -> dict[str, Any]:
    """A sensor's ``poke`` as the condition, unchanged (a ``BackoffSensor`` subclass, or any sensor).

    The triggerer re-creates ``sensor_class(task_id=..., **sensor_kwargs)``; the value is the
    ``PokeReturnValue``'s XCom value when the poke is done (``value_key=`` on the watcher picks one key of a dict).
    The poke runs outside any DAG run: its context has no run dates.
    """
    if not (isinstance(sensor_class, type) and issubclass(sensor_class, compat.locations.BaseSensorOperator)):
        raise WatcherArgumentError(
            f"sensor_class must be a sensor class (BaseSensorOperator subclass); got {sensor_class!r}"
        )
    problem = class_shipping_problem(sensor_class, sensor_kwargs)
    if problem is not None:
        raise WatcherArgumentError(f"sensor_condition({sensor_class.__name__}): {problem}")
    classpath = callable_path(sensor_class)
    assert classpath is not None  # class_shipping_problem refuses a class without one
    return {
        "type": "sensor",
        "classpath": classpath,
        "kwargs": dict(sensor_kwargs),
        "context": {"task_id": WATCHED_SENSOR_TASK_ID},
    }
