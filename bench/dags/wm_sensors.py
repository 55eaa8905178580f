"""bench_wait_memory.py's sensor (a module of the DAGs folder, so the triggerer imports it by name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_smart_ext.sensors import BackoffSensor


class NeverFileSensor(BackoffSensor):
    template_fields = ("path",)

    def __init__(self, *, path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path

    def poke(self, context: Any) -> bool:
        return Path(self.path).exists()
