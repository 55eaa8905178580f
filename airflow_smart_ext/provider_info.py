"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-smart-ext",
        "name": "Smart Ext",
        "description": "Business-day, rolling-window and delayed-daily timetables; backoff-aware sensors; "
        "a de-duplicating deferrable backoff trigger.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Smart Ext",
                "external-doc-url": "https://airflow.apache.org/",
                "tags": ["software"],
            }
        ],
        "sensors": [
            {
                "integration-name": "Smart Ext",
                "python-modules": [
                    "airflow_smart_ext.sensors.base",
                    "airflow_smart_ext.sensors.sql",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Smart Ext",
                "python-modules": [
                    "airflow_smart_ext.triggers.backoff",
                    "airflow_smart_ext.triggers.watcher",
                ],
            }
        ],
    }
