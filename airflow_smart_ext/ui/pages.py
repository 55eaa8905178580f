"""Where the Waits and Calendars views are served: what the plugin registers (no import: the plugin, which
every Airflow component imports, reads these without loading the views)."""

from __future__ import annotations

URL_PREFIX = "/smart-ext"
#: (menu name, path below ``URL_PREFIX``) of the pages shown in Airflow's navigation.
PAGES = (("Waits", "/waits"), ("Calendars", "/calendars"))
