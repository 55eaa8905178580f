"""The harness module every Airflow process it starts imports by name: SQLite connect args, and the
CeleryExecutor topology's hostname callable.

Airflow reads ``[database] sql_alchemy_connect_args`` (and on 3.1+ ``sql_alchemy_connect_args_async``) as an
import path to a dict and passes it to the driver's ``connect()`` (``airflow/settings.py``, 2.11 and 3.x).
pysqlite and aiosqlite wait ``timeout`` seconds for a lock (SQLite's busy timeout) before raising
``database is locked``; their default, 5 s, is shorter than a write can hold the lock when the scheduler,
dag-processor, triggerer and api-server share 2 busy cores, and the scheduler dies of it
(``_orphan_unreferenced_assets``). Plain dicts: Airflow imports this module while it initialises itself.
"""

from __future__ import annotations

import os
import socket

BUSY_TIMEOUT_SECONDS = 60

SYNC = {"timeout": BUSY_TIMEOUT_SECONDS}
ASYNC = {"timeout": BUSY_TIMEOUT_SECONDS}

# Set by the harness for each Celery worker (airflow_harness/env.py); the other components keep the machine's.
HOSTNAME_ENV = "SMART_EXT_HARNESS_HOSTNAME"


def component_hostname() -> str:
    """``[core] hostname_callable``: a worker's own name, recorded as the hostname of the tries it runs."""
    return os.environ.get(HOSTNAME_ENV) or socket.getfqdn()
