"""Where the Waits and Calendars views are served: what the plugin registers (no import: the plugin, which
every Airflow component imports, reads these without loading the views)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

URL_PREFIX = "/smart-ext"
#: (menu name, path below ``URL_PREFIX``) of the pages shown in Airflow's navigation.
PAGES = (("Waits", "/waits"), ("Calendars", "/calendars"))


def waits_link(**params: Any) -> str:
    """The Waits view's address, filtered by ``params`` (e.g. ``dag_id``), as a late alert links to it."""
    from airflow_smart_ext import compat

    query = f"?{urlencode(params)}" if params else ""
    return f"{compat.web_urls.airflow_base_url()}{URL_PREFIX}/waits{query}"
