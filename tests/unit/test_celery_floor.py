"""The distributed pass's executor imports with the declared Celery range, on every leg (the floors too).

celery 5.7.0 breaks the Celery provider's executor import (`cannot import name 'retry' from
'celery.backends.database'`); pyproject.toml caps `celery<5.7` (docs/deployment.md).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11 (CI runs 3.11)")

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _declared(name: str) -> Requirement:
    """The requirement on ``name`` pyproject.toml's test group declares (the distributed pass's)."""
    test_group = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["test"]
    (requirement,) = [req for req in map(Requirement, test_group) if req.name == name]
    return requirement


def test_the_celery_executor_imports_under_the_declared_celery() -> None:
    from airflow.executors.base_executor import BaseExecutor
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor

    celery = _declared("celery")
    installed = Version(metadata.version("celery"))
    # Installed within the declared range (on the lowest leg: its floor), whose cap keeps out the release
    # that breaks the import above.
    assert celery.specifier.contains(installed), f"celery {installed} is outside the declared {celery}"
    assert not celery.specifier.contains(Version("5.7.0")), f"{celery} lets celery 5.7.0 in"
    assert issubclass(CeleryExecutor, BaseExecutor)
    # The executor Airflow loads by name (the distributed pass's [core] executor) is the one imported here.
    assert _executor_by_name("CeleryExecutor") is CeleryExecutor


def _executor_by_name(name: str) -> type:
    """The class Airflow's executor table names for ``[core] executor = <name>``."""
    from airflow.executors.executor_loader import ExecutorLoader

    module, _, attribute = ExecutorLoader.executors[name].rpartition(".")
    return getattr(importlib.import_module(module), attribute)
