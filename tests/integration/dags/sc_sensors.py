"""Sensor class for the sealed-secret integration test (issue 23; no DAGs in this module).

In a module of the DAGs folder (imported by name as ``sc_sensors``) so the triggerer can import the class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_smart_ext.sensors import BackoffSensor


class TokenFileSensor(BackoffSensor):
    """Done when the file at ``path`` holds ``token`` (a rendered connection password): the condition only
    comes true where the token arrived intact, so a sealed value must be opened in the triggerer."""

    template_fields = ("path", "token")

    def __init__(self, *, path: str, token: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.token = token

    def poke(self, context: Any) -> bool:
        target = Path(self.path)
        return target.exists() and target.read_text().strip() == self.token
