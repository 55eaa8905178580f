"""Test-wide isolation: never touch a developer's ~/airflow.

Runs before any test module imports Airflow: points AIRFLOW_HOME at a private temporary directory (with
its own SQLite file) and disables the example DAGs. Unit tests that need a migrated metadata DB use the
``airflow_db`` fixture.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_TEST_HOME = Path(tempfile.mkdtemp(prefix="smart-ext-unit-airflow-"))
for _key in [k for k in os.environ if k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))]:
    del os.environ[_key]
os.environ["AIRFLOW_HOME"] = str(_TEST_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_TEST_HOME / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_TEST_HOME / 'airflow.db'}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A unit test's PostgreSQL variant (marker ``postgres``) runs in the PostgreSQL pass (``-m "integration or
    postgres"``): the SQLite pass beside it deselects it (a skip would be a proof left out)."""
    if os.environ.get("SMART_EXT_SQLITE_SLICE") != "1":
        return
    deselected = [item for item in items if item.get_closest_marker("postgres")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("postgres")]


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB for unit tests (the private AIRFLOW_HOME's airflow.db)."""
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    return _TEST_HOME / "airflow.db"


@pytest.fixture(scope="session", autouse=True)
def _remove_private_airflow_home() -> Iterator[None]:
    yield
    shutil.rmtree(_TEST_HOME, ignore_errors=True)
