"""The Flask blueprint our plugin registers on Airflow 2.11; it adds its views when the webserver registers it.

Every 2.11 component imports the plugin (it registers our timetables), but only the webserver registers
``flask_blueprints``: adding the views (``ui.web_flask``) then keeps the Waits model and the pages out of the
scheduler, the triggerer and the workers.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from airflow_smart_ext.ui.pages import URL_PREFIX


class SmartExtBlueprint(Blueprint):
    """The Waits and Calendars pages and JSON below ``URL_PREFIX``, their views added on first registration."""

    def __init__(self) -> None:
        super().__init__("smart_ext", "airflow_smart_ext.ui.web_flask", url_prefix=URL_PREFIX)
        self.views_added = False

    def register(self, app: Any, options: dict[str, Any]) -> None:
        if not self.views_added:  # Flask refuses setup calls once a blueprint was registered
            from airflow_smart_ext.ui.web_flask import add_views

            add_views(self)
            self.views_added = True
        super().register(app, options)
