"""A refused filter on a page is answered with the page itself (the error above the form that holds what was
typed), with the same 400 status; the JSON paths answer with ``{"detail": ...}``. Pure: both web glues call it."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_smart_ext.ui import airflow_style, calendars_page, waits_page


def error_page(
    path: str,
    message: str,
    params: Mapping[str, str],
    default_timezone: str | None = None,
    layout: airflow_style.Layout = airflow_style.standalone,
) -> str | None:
    """The HTML page for a refused filter on ``path``; None for a JSON path (and anything else)."""
    if "/api/" in path:
        return None
    if path.endswith("/waits"):
        return waits_page.render_waits_error(message, params, default_timezone, layout)
    if path.endswith("/calendars"):
        return calendars_page.render_calendars_error(message, params, layout)
    return None
