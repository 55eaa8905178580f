"""The clock-change watcher's alert (tests/integration/test_watcher_clock_change_live.py): each alert one JSON line
in ``$AIRFLOW_HOME/watcher_late.jsonl``, with when it was said. A module of the DAGs folder: the triggerer
imports it by name."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

ALERTS_FILE = "watcher_late.jsonl"


def record_late(context: Any) -> None:
    line = json.dumps({**context["late"], "at": time.time()}, default=str)
    with (Path(os.environ["AIRFLOW_HOME"]) / ALERTS_FILE).open("a") as alerts:
        alerts.write(line + "\n")
