"""The ASGI app our plugin registers on Airflow 3.x; it builds the FastAPI app on its first request.

Every Airflow component imports the plugin (it registers our timetables), but only the api-server serves
``fastapi_apps``: building the app lazily keeps FastAPI and Airflow's API modules out of the scheduler,
the triggerer and the workers.
"""

from __future__ import annotations

from typing import Any


class SmartExtWebApp:
    """ASGI app: the Waits and Calendars pages and JSON (``ui.web_fastapi``), built when first called."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from airflow_smart_ext.ui.web_fastapi import create_app

            self._app = create_app()
        await self._app(scope, receive, send)
