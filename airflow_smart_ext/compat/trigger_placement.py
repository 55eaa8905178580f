"""Which triggerers may run a trigger row (issue 35): 3.2+ a row has a ``queue`` (only a triggerer started with
``--queues`` including it takes a row with one; one without ``--queues`` takes rows without), 3.3+ a
``team_name`` (with ``[core] multi_team`` only a triggerer of that team takes it). 2.11-3.1: any triggerer."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_2_PLUS, AIRFLOW_V_3_3_PLUS

__all__ = ["trigger_placement_columns"]


def trigger_placement_columns() -> dict[str, Any]:
    """The Trigger columns that restrict which triggerer takes a row, by name (``queue``, ``team``), as
    ``Trigger.ids_for_triggerer`` filters on this version: the team only counts with ``[core] multi_team``."""
    from airflow.models.trigger import Trigger

    columns: dict[str, Any] = {}
    if AIRFLOW_V_3_2_PLUS:
        columns["queue"] = Trigger.queue
    if AIRFLOW_V_3_3_PLUS:
        from airflow.configuration import conf

        if conf.getboolean("core", "multi_team", fallback=False):
            columns["team"] = Trigger.team_name
    return columns
