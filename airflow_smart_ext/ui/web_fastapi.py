"""The Waits and Calendars views on Airflow 3.x's api-server (a FastAPI app mounted at ``/smart-ext``).

Airflow mounts a plugin's app as it is, so authentication is ours, done with Airflow's own dependencies
(``airflow.api_fastapi.core_api.security``) the way its ``GET /api/v2/dags`` route does it:
``get_user`` takes the JWT from an ``Authorization: Bearer`` header or else from the ``_token`` cookie the
UI's login sets (httponly, same origin: the UI shows our page in an iframe, which sends it); no or a bad
token -> 401/403. ``requires_access_dag("GET")`` (``compat.dag_access.requires_dag_read``) then checks DAG read access
(of the ``dag_id`` asked for, if any) and the auth manager's ``get_authorized_dag_ids`` limits the rows to
the DAGs the user may read. (Airflow 3.0's ``get_user`` reads the header only.)
"""

from __future__ import annotations

from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from airflow_smart_ext import clock, compat
from airflow_smart_ext.conditions.runtime import connection_rate_limit
from airflow_smart_ext.ui import (
    filter_errors,
    waits_page,
    waits_report,
    waits_source,
    watchers_report,
    watchers_source,
)
from airflow_smart_ext.ui.web_common import CalendarsQuery, airflow_root, calendars_query, single_params


def _params(request: Request) -> dict[str, str]:
    """The query's parameters, checked before Airflow's access check reads ``dag_id`` (``single_params``)."""
    return single_params(request.query_params.multi_items())


def readable_dag_ids(user: GetUserDep) -> set[str]:
    """The DAG ids the user may read (what Airflow's ``ReadableDagsFilterDep`` computes)."""
    return get_auth_manager().get_authorized_dag_ids(user=user, method="GET")


ReadableDagIds = Annotated[set[str], Depends(readable_dag_ids)]


def may_read_assets(user: GetUserDep) -> bool:
    """Watchers belong to assets, not DAGs: shown to a user who may read assets (Airflow's asset list)."""
    return bool(get_auth_manager().is_authorized_asset(method="GET", user=user))


AssetReader = Annotated[bool, Depends(may_read_assets)]


def _waits_report(
    request: Request, session: Any, dag_ids: set[str], assets: bool
) -> tuple[dict[str, Any], Any]:
    query = waits_report.WaitsQuery.from_params(_params(request))
    waits, now = waits_source.load_live_waits(session, dag_ids), clock.now()
    watchers = watchers_source.load_watchers(session) if assets else []
    triggerers = waits_source.load_triggerers(session, now)
    workers = waits_source.load_worker_waits(session, dag_ids)
    report = waits_report.build_report(waits, query, now, connection_rate_limit(None), triggerers, workers)
    watchers_report.add_watchers(report, watchers, triggerers, now, query)
    return report, query


def _calendars(
    request: Request, session: Any, dag_ids: set[str]
) -> tuple[list[dict[str, Any]], CalendarsQuery]:
    query = calendars_query(_params(request))
    from airflow_smart_ext.ui import calendars_model

    if query.dag_id is not None:
        dag_ids = dag_ids & {query.dag_id}
    return calendars_model.load_calendars(session, dag_ids, clock.now(), query.runs, query.past), query


def create_app() -> FastAPI:
    app = FastAPI(
        title="airflow-smart-ext: Waits and Calendars",
        # the parameters first: Airflow's access check reads ``dag_id`` from them (a NUL there would be a 500)
        dependencies=[Depends(_params), Depends(compat.dag_access.requires_dag_read())],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(waits_report.InvalidQuery)
    async def bad_query(request: Request, error: waits_report.InvalidQuery) -> Response:
        page = filter_errors.error_page(request.url.path, str(error), dict(request.query_params))
        if page is not None:
            return HTMLResponse(page, status_code=400)
        return JSONResponse(status_code=400, content={"detail": str(error)})

    # Responses built directly: FastAPI's response-model encoding would double the time for 10,000 rows.
    @app.get("/api/waits")
    def api_waits(
        request: Request, session: SessionDep, dag_ids: ReadableDagIds, assets: AssetReader
    ) -> JSONResponse:
        return JSONResponse(_waits_report(request, session, dag_ids, assets)[0])

    @app.get("/waits")
    def waits(
        request: Request, session: SessionDep, dag_ids: ReadableDagIds, assets: AssetReader
    ) -> HTMLResponse:
        report, query = _waits_report(request, session, dag_ids, assets)
        root = airflow_root(request.scope.get("root_path", ""))

        def link(row: Any) -> str:
            return compat.web_urls.task_page_url(
                root, row["dag_id"], row["run_id"], row["task_id"], row["map_index"]
            )

        return HTMLResponse(waits_page.render_waits(report, query, link))

    @app.get("/api/calendars")
    def api_calendars(request: Request, session: SessionDep, dag_ids: ReadableDagIds) -> JSONResponse:
        return JSONResponse(_calendars(request, session, dag_ids)[0])

    @app.get("/calendars")
    def calendars(request: Request, session: SessionDep, dag_ids: ReadableDagIds) -> HTMLResponse:
        from airflow_smart_ext.ui import calendars_page

        reports, query = _calendars(request, session, dag_ids)
        root = airflow_root(request.scope.get("root_path", ""))
        return HTMLResponse(calendars_page.render_calendars(reports, root, query))

    return app
