"""The Airflow plugin that registers this package's timetables.

Every component that deserializes DAGs (scheduler, dag-processor, api-server/webserver, triggerer and
workers) must see this plugin through the ``airflow.plugins`` entry point; without it a DAG that uses one of
our timetables fails to serialize ("Timetable class ... is not registered") and a scheduler that meets such
a serialized DAG crashes.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_smart_ext.timetables import TIMETABLE_CLASSES


class SmartExtPlugin(AirflowPlugin):
    name = "airflow_smart_ext"
    timetables = list(TIMETABLE_CLASSES)
