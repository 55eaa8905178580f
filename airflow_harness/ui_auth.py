"""TEST-ONLY auth manager for Airflow 3 (the UI test): Airflow's simple auth manager, except that users named in
``SMART_EXT_UI_DAG_PREFIXES`` (JSON ``{"user": "dag_id_prefix"}``) may read only DAGs whose id starts with
their prefix. The simple auth manager lets every role read every DAG; this gives the test a user without
access to one DAG through the same public hook Airflow's own routes ask (``is_authorized_dag``)."""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

PREFIXES_ENV = "SMART_EXT_UI_DAG_PREFIXES"


class DagPrefixAuthManager(SimpleAuthManager):
    """Simple auth manager + a DAG id prefix per restricted user."""

    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        prefix = json.loads(os.environ.get(PREFIXES_ENV) or "{}").get(user.get_name())
        if prefix is not None and details is not None and details.id and not details.id.startswith(prefix):
            return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
