"""DAG read access on Airflow 3.0 only (chosen in ``compat.dag_access.requires_dag_read``): its
``requires_access_dag`` checks the ``dag_id`` of the path alone; 3.1+ check a ``dag_id`` query parameter too,
which our routes take. Imported only on 3.0: it needs the api-server's FastAPI modules."""

from __future__ import annotations

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import HTTPException, Request, status

__all__ = ["requires_dag_read"]


def requires_dag_read(request: Request, user: GetUserDep) -> None:
    """403 unless the user may read DAGs, and the DAG of the path's or the query's ``dag_id`` if given."""
    dag_id = request.path_params.get("dag_id") or request.query_params.get("dag_id")
    if not get_auth_manager().is_authorized_dag(method="GET", details=DagDetails(id=dag_id), user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
