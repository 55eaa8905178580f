"""The Airflow plugin: this package's timetables, and the Waits and Calendars views.

Every component that deserializes DAGs (scheduler, dag-processor, api-server/webserver, triggerer and
workers) must see this plugin through the ``airflow.plugins`` entry point; without it a DAG that uses one of
our timetables fails to serialize ("Timetable class ... is not registered") and a scheduler that meets such
a serialized DAG crashes. The web parts depend on the Airflow version (``compat.plugin_ui_parts``) and are
cheap to import: the views' web app is built by the server that serves it, on its first request.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_smart_ext import compat
from airflow_smart_ext.timetables import TIMETABLE_CLASSES

_UI_PARTS = compat.plugin_ui_parts()


class SmartExtPlugin(AirflowPlugin):
    name = "airflow_smart_ext"
    timetables = list(TIMETABLE_CLASSES)
    fastapi_apps = _UI_PARTS.get("fastapi_apps", [])
    external_views = _UI_PARTS.get("external_views", [])
    flask_blueprints = _UI_PARTS.get("flask_blueprints", [])
    appbuilder_menu_items = _UI_PARTS.get("appbuilder_menu_items", [])
