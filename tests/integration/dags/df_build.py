"""Builds the differential matrix's DAGs (issue 23): one DAG per (group, mode), one task per scenario row.

No DAGs here: each mode has its own small DAG file (``df_dags_<mode>.py``) so a task process parses only its
mode's DAGs (the matrix starts ~130 task processes). Task id = scenario name; the counter key of a check is
``<mode>.<scenario>[.<map index>]`` (see df_sensors). Nothing is templated, so a deferrable sensor takes the
zero-worker path wherever the Airflow version allows it (2.11 too).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from df_scenarios import COMMON, GROUPS, MODES, SCENARIOS, Scenario  # noqa: F401 (GROUPS: re-exported)
from df_sensors import CHECKS_DIR, ScriptedSensor, count_late

from airflow_smart_ext.sensors import BackoffSqlSensor

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
SQL_CONN_ID = "df_sqlite"  # the test points it at a SQLite file with table df_status(status TEXT)
_SECONDS = ("retry_delay", "execution_timeout", "dagrun_timeout")


def _timedeltas(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: dt.timedelta(seconds=v) if k in _SECONDS else v for k, v in kwargs.items()}


def _sensor(scenario: Scenario, mode: str) -> None:
    kwargs = _timedeltas({**COMMON, **scenario.kwargs, **MODES[mode]})
    if "due" in kwargs:  # a due time: its alerts are counted (df_sensors.count_late)
        kwargs["on_late"] = count_late
    key = f"{mode}.{scenario.name}"
    if scenario.sensor == "sql":
        BackoffSqlSensor(
            task_id=scenario.name,
            conn_id=SQL_CONN_ID,
            sql="SELECT status, :key FROM df_status",
            parameters={"key": key},
            selector="df_sensors.counted_status",
            success="sn_sensors.is_done",
            failure="sn_sensors.is_error",
            **kwargs,
        )
    elif scenario.mapped:
        ScriptedSensor.partial(task_id=scenario.name, **kwargs).expand_kwargs(
            [{"key": f"{key}.{i}", "script": script} for i, script in enumerate(scenario.mapped)]
        )
    else:
        ScriptedSensor(task_id=scenario.name, key=key, script=scenario.script, **kwargs)


def dag_arguments(group: str, mode: str) -> dict[str, Any]:
    """``DAG(...)`` arguments of the group's DAG for this mode."""
    return {
        "dag_id": f"df_{group}_{mode}",
        "schedule": None,
        "start_date": START,
        "catchup": False,
        "max_active_tasks": 64,  # every scenario of the group waits at once
        "tags": ["airflow-smart-ext", "integration", "differential"],
        **_timedeltas(GROUPS[group]["dag_kwargs"]),
    }


def add_sensors(group: str, mode: str) -> None:
    """One task per scenario row of the group, inside the caller's ``with DAG(...)``."""
    CHECKS_DIR.mkdir(parents=True, exist_ok=True)
    for scenario in SCENARIOS:
        if scenario.group == group:
            _sensor(scenario, mode)
