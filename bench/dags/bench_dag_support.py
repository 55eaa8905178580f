"""What the bench DAG files share; copied into the DAGs folder next to them (``benchlib.bench_dag_files``),
which Airflow puts on ``sys.path``, so they import it by name in the dag-processor and in task processes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def dag_params(dag_file: str) -> dict[str, Any]:
    """The parameters the bench wrote next to this DAG file: ``<file stem>.json``."""
    params: dict[str, Any] = json.loads(Path(dag_file).with_suffix(".json").read_text())
    return params


def start_counter(path: str) -> Callable[[Any], None]:
    """An ``on_execute_callback`` appending one JSON line per task-process start to ``path``."""

    def count_start(context: Any) -> None:
        # Runs in the task process before every execution (resumes included).
        record = {"dag_id": context["dag"].dag_id, "task_id": context["ti"].task_id, "at": time.time()}
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)

    return count_start
