"""Shared pieces of the sensor example DAGs (this module defines no DAG).

* ``FileArrivedSensor`` -- an ordinary custom sensor whose only change for smart backoff is its base class
  (``BaseSensorOperator`` -> ``BackoffSensor``).
* ``is_loaded`` / ``is_day`` -- SQL success criteria importable by name (deferrable sensors and watchers
  ship criteria by path, and importing this module in the triggerer defaults the example connection).
* ``deliver_later`` -- makes each example self-sufficient: an upstream task schedules "the data arrives"
  a few seconds later in a detached process, so the sensors really have to wait.

Why a separate module: a sensor class (or SQL criterion) used with ``deferrable=True`` is re-imported by
name in the triggerer, and classes defined inside a DAG file cannot be. Modules in the DAGs folder are
importable as top-level modules (here ``sensor_common``) by workers, the DAG processor and the triggerer.

**Connection** ``smart_ext_example_sqlite``: the SQL examples use a SQLite database file. If the
environment variable ``AIRFLOW_CONN_SMART_EXT_EXAMPLE_SQLITE`` is not set, importing this module sets it
to ``$AIRFLOW_HOME/smart_ext_examples/example.db``, so the examples run with no setup. To use another
database, export ``AIRFLOW_CONN_SMART_EXT_EXAMPLE_SQLITE`` for every Airflow component (an environment
variable wins over this default; a connection stored in the metadata DB would be shadowed by it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow_smart_ext.sensors import BackoffSensor

EXAMPLE_CONN_ID = "smart_ext_example_sqlite"
EXAMPLES_DIR = Path(os.environ.get("AIRFLOW_HOME") or tempfile.gettempdir()) / "smart_ext_examples"
EXAMPLE_DB = EXAMPLES_DIR / "example.db"
os.environ.setdefault(
    "AIRFLOW_CONN_" + EXAMPLE_CONN_ID.upper(),
    f"sqlite://{quote(str(EXAMPLE_DB), safe='')}",  # host form -> file:/abs/path for the sqlite hook
)

# A per-run drop location, rendered by Jinja (run ids contain ':' and '+').
RUN_DIR_TEMPLATE = (
    str(EXAMPLES_DIR) + "/{{ dag.dag_id }}/{{ run_id | replace(':', '-') | replace('+', '-') }}"
)


class FileArrivedSensor(BackoffSensor):  # was: class FileArrivedSensor(BaseSensorOperator)
    """Wait until ``path`` exists. Written exactly like a ``BaseSensorOperator`` subclass."""

    template_fields = ("path",)

    def __init__(self, *, path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path

    def poke(self, context: Any) -> bool:
        self.log.info("Looking for %s", self.path)
        return os.path.exists(self.path)


def is_loaded(status: Any) -> bool:
    """SQL success criterion (importable by name, so it also works with ``deferrable=True``)."""
    return status == "loaded"


def is_day(value: Any) -> bool:
    """Watcher criterion (example watcher_orders): ``max(day)`` is a day once the first one has landed."""
    return isinstance(value, str) and len(value) == 10


def is_failed(status: Any) -> bool:
    """SQL failure criterion: the load reported an error -> the sensor fails at once, without retries."""
    return status == "failed"


def sqlite_path(conn_id: str = EXAMPLE_CONN_ID) -> str:
    """Filesystem path of the SQLite database behind a connection."""
    from airflow_smart_ext.compat.locations import SensorBaseHook

    uri = SensorBaseHook.get_connection(conn_id).get_hook().get_uri()  # sqlite:////abs/path.db
    return uri.split("sqlite:///", 1)[1].split("?", 1)[0]


_DELIVERY_SCRIPT = """
import sqlite3, sys, time, pathlib
delay, kind, target = float(sys.argv[1]), sys.argv[2], sys.argv[3]
time.sleep(delay)
if kind == "file":
    path = pathlib.Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_text(sys.argv[4])
    tmp.rename(path)  # appears atomically
else:
    conn = sqlite3.connect(target, timeout=30)
    with conn:
        conn.execute(sys.argv[4], tuple(sys.argv[5:]))
    conn.close()
"""


def deliver_later(delay: float, kind: str, target: str, *args: str) -> None:
    """Run the delivery ``delay`` seconds from now in a detached process that outlives the task.

    ``kind="file"``: write ``args[0]`` to the file ``target``; ``kind="sql"``: run ``args[0]`` with bound
    parameters ``args[1:]`` on the SQLite database file ``target``.
    """
    subprocess.Popen(  # noqa: S603 - fixed interpreter and script, arguments are not shell-parsed
        [sys.executable, "-c", _DELIVERY_SCRIPT, str(delay), kind, target, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not killed with the task's process group
    )
