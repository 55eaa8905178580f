"""Airflow UI views of this package (Waits and Calendars): pure data models, DB glue, pages and web glue."""
