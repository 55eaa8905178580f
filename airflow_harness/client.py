"""Calls on one harness Airflow as a user makes them (``ApiClient``): REST on the 3.x api-server, and the
CLI for connections and variables (so Airflow encrypts them as it does for users)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from airflow_harness.sqlite_connect import BUSY_TIMEOUT_SECONDS
from airflow_harness.state import AirflowEnvError, EnvState

# REST calls outlast SQLite's busy timeout: on SQLite the api-server may wait that long for the lock first.
API_TIMEOUT = BUSY_TIMEOUT_SECONDS + 30.0


class ApiClient(EnvState):
    def api_token(self, username: str) -> str:
        """3.x with ``ui_users``: a JWT for that user from the simple auth manager's ``/auth/token``."""
        body = json.dumps({"username": username, "password": self.ui_passwords[username]}).encode()
        request = urllib.request.Request(
            f"{self.api_url}/auth/token",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return str(json.loads(resp.read())["access_token"])

    def api(self, method: str, path: str, body: Any = None, timeout: float = API_TIMEOUT) -> Any:
        """3.x REST call on the api-server as an admin (simple_auth_manager_all_admins, or with ``ui_users``
        a token of the first admin user)."""
        if not self.is_airflow3:
            raise AirflowEnvError("the REST API is only used on Airflow 3 (2.11 runs without webserver)")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.ui_users:
            if self._api_token is None:
                self._api_token = self.api_token(next(u for u, p in self.ui_users.items() if p is None))
            headers["Authorization"] = f"Bearer {self._api_token}"
        elif self.airflow_version.startswith("3.1."):
            # 3.1 has no all-admins middleware (3.0 and 3.2+ add the admin's header server-side): a call without a
            # token is 401 "Not authenticated". In all-admins mode GET /auth/token hands an admin's token out.
            if self._api_token is None:
                with urllib.request.urlopen(f"{self.api_url}/auth/token", timeout=30) as resp:
                    self._api_token = str(json.loads(resp.read())["access_token"])
            headers["Authorization"] = f"Bearer {self._api_token}"
        request = urllib.request.Request(f"{self.api_url}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise AirflowEnvError(
                f"{method} {path} -> HTTP {err.code}: {err.read().decode(errors='replace')}"
            ) from err
        return json.loads(payload) if payload else None

    def add_connection(self, conn_id: str, uri: str) -> None:
        self.airflow_cli("connections", "delete", conn_id, check=False)
        self.airflow_cli("connections", "add", conn_id, "--conn-uri", uri)

    def set_variable(self, key: str, value: Any) -> None:
        text = value if isinstance(value, str) else json.dumps(value)
        self.airflow_cli("variables", "set", key, text)
