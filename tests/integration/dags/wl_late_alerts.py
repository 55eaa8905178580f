"""The late watchers' alert (tests/integration/test_watcher_late_live.py): each alert is one row of the condition
database's table ``late_alerts``, written through the Airflow connection, as a user's function calls a notifier.
A module of the DAGs folder: the triggerer imports it by name."""

from __future__ import annotations

import json
from typing import Any


def record_late(context: Any) -> None:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    late = context["late"]
    PostgresHook(postgres_conn_id="wl_conditions").run(
        "INSERT INTO late_alerts (watcher, due, resent, late) VALUES (%s, %s, %s, %s)",
        parameters=(late["watcher"], late["due"], late["resent"], json.dumps(late)),
    )
