"""DAG read access of the api-server's routes (3.x): 3.1+'s ``requires_access_dag`` reads the ``dag_id`` from
the query too, 3.0's only from the path (``compat.dag_access_3_0`` stands in there)."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_1_PLUS

__all__ = ["requires_dag_read"]


def requires_dag_read() -> Any:
    """The api-server dependency our routes share: DAG read access, of the ``dag_id`` asked for if any."""
    if AIRFLOW_V_3_1_PLUS:
        from airflow.api_fastapi.core_api.security import requires_access_dag

        return requires_access_dag(method="GET")
    from airflow_smart_ext.compat.dag_access_3_0 import requires_dag_read as requires_dag_read_3_0

    return requires_dag_read_3_0
