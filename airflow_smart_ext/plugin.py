"""The Airflow plugin: this package's timetables, its deadline reference (3.3+), and the Waits and Calendars
views.

Every component that deserializes DAGs (scheduler, dag-processor, api-server/webserver, triggerer and
workers) must see this plugin through the ``airflow.plugins`` entry point; without it a DAG that uses one of
our timetables fails to serialize ("Timetable class ... is not registered") and a scheduler that meets such
a serialized DAG crashes. The web parts depend on how Airflow serves plugin pages (``compat.web_urls.PLUGIN_PAGES``,
:func:`ui_parts`) and are cheap to
import: the views' web app is built by the server that serves it, on its first request.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_smart_ext import compat
from airflow_smart_ext.deadlines import DueTimeDeadline
from airflow_smart_ext.timetables import TIMETABLE_CLASSES
from airflow_smart_ext.ui.pages import PAGES, URL_PREFIX


def ui_parts() -> dict[str, Any]:
    """The plugin attributes that serve the Waits and Calendars views on this Airflow.

    3.1+: the api-server's FastAPI app and two entries under Browse shown inside the UI (``url_route``);
    3.0: the app alone (its UI has no ``external_views``; the app's name says so in ``airflow plugins``);
    2.11: a Flask blueprint and two Browse menu links. Nothing here imports FastAPI, Flask-AppBuilder or the
    views: every component imports the plugin; the server that serves them builds them.
    """
    base = compat.web_urls.airflow_base_path()
    if compat.web_urls.PLUGIN_PAGES in ("in_ui", "api_only"):
        from airflow_smart_ext.ui.web_asgi import SmartExtWebApp

        app_name = "Waits and Calendars views"
        if compat.web_urls.PLUGIN_PAGES == "api_only":
            # 3.0's UI keeps its token out of cookies and its api-server reads only the header: no browser page
            app_name += (
                f" (Airflow 3.0: no menu entry and no browser sign-in for plugin pages; use {URL_PREFIX}/api/waits"
                f" and {URL_PREFIX}/api/calendars with a bearer token, or python -m airflow_smart_ext.waits)"
            )
        parts: dict[str, Any] = {
            "fastapi_apps": [{"app": SmartExtWebApp(), "url_prefix": URL_PREFIX, "name": app_name}]
        }
        if compat.web_urls.PLUGIN_PAGES == "in_ui":
            # The UI puts ``href`` into an iframe as it is: keep a sub-path Airflow is served at.
            parts["external_views"] = [
                {
                    "name": name,
                    "href": f"{base}{URL_PREFIX}{path}",
                    "destination": "nav",
                    "category": "browse",
                    "url_route": f"smart-ext{path.replace('/', '-')}",
                }
                for name, path in PAGES
            ]
        return parts
    from airflow_smart_ext.ui.web_blueprint import SmartExtBlueprint

    return {
        "flask_blueprints": [SmartExtBlueprint()],
        "appbuilder_menu_items": [
            {"name": name, "href": f"{base}{URL_PREFIX}{path}", "category": "Browse"} for name, path in PAGES
        ],
    }


_UI_PARTS = ui_parts()


class SmartExtPlugin(AirflowPlugin):
    name = "airflow_smart_ext"
    timetables = list(TIMETABLE_CLASSES)
    # 3.3+: the scheduler finds a DAG's DeadlineAlert reference class here by its import path.
    deadline_references = [DueTimeDeadline] if compat.deadlines.CUSTOM_DEADLINE_REFERENCES else []
    fastapi_apps = _UI_PARTS.get("fastapi_apps", [])
    external_views = _UI_PARTS.get("external_views", [])
    flask_blueprints = _UI_PARTS.get("flask_blueprints", [])
    appbuilder_menu_items = _UI_PARTS.get("appbuilder_menu_items", [])
