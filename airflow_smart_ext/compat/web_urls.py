"""Web URLs: where Airflow is served (``[api] base_url`` on 3.x, ``[webserver] base_url`` on 2.11) and the
paths of its own DAG, run and task pages (the 3.x React UI and the 2.11 grid view differ)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_1_PLUS

__all__ = ["PLUGIN_PAGES", "airflow_base_path", "airflow_base_url", "dag_page_path", "task_page_url"]


#: How this Airflow serves a plugin's pages: ``"in_ui"`` (3.1+: a FastAPI app on the api-server, shown inside the
#: UI through ``external_views``), ``"api_only"`` (3.0: the app, but no plugin pages in the UI and no browser
#: sign-in for them), ``"flask"`` (2.11: a blueprint and menu items in the FAB webserver).
PLUGIN_PAGES = "in_ui" if AIRFLOW_V_3_1_PLUS else "api_only" if AIRFLOW_V_3_0_PLUS else "flask"


def airflow_base_path() -> str:
    """The path Airflow's UI is served at, without a trailing slash ('' at the root)."""
    from airflow.configuration import conf

    section = "api" if AIRFLOW_V_3_0_PLUS else "webserver"
    return urlsplit(conf.get(section, "base_url", fallback="") or "/").path.rstrip("/")


def airflow_base_url() -> str:
    """Airflow's full ``base_url`` (``[api]`` on 3.x, ``[webserver]`` on 2.11) without a trailing slash: the
    start of a link in an alert."""
    from airflow.configuration import conf

    section = "api" if AIRFLOW_V_3_0_PLUS else "webserver"
    return (conf.get(section, "base_url", fallback="") or "").rstrip("/")


def dag_page_path(dag_id: str, run_id: str | None = None) -> str:
    """Airflow's own page of a DAG (or of one of its runs), below the path Airflow is served at."""
    if AIRFLOW_V_3_0_PLUS:
        path = f"/dags/{quote(dag_id, safe='')}"
        return path if run_id is None else f"{path}/runs/{quote(run_id, safe='')}"
    path = f"/dags/{quote(dag_id, safe='')}/grid"
    return path if run_id is None else f"{path}?{urlencode({'dag_run_id': run_id})}"


def task_page_url(airflow_root: str, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """Airflow's own page of one task instance, below ``airflow_root`` (the path Airflow is served at): the
    page of its run (``dag_page_path``) narrowed to the task."""
    run_page = airflow_root + dag_page_path(dag_id, run_id)
    if AIRFLOW_V_3_0_PLUS:
        url = f"{run_page}/tasks/{quote(task_id, safe='')}"
        return f"{url}/mapped/{map_index}" if map_index >= 0 else url
    params: dict[str, Any] = {"task_id": task_id}
    if map_index >= 0:
        params["map_index"] = map_index
    return f"{run_page}&{urlencode(params)}"
