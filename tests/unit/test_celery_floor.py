"""The distributed pass's executor imports with the declared Celery range, on every leg (the floors too).

celery 5.7.0 breaks the Celery provider's executor import (`cannot import name 'retry' from
'celery.backends.database'`); pyproject.toml pins `celery<5.7` (docs/deployment.md).
"""

from __future__ import annotations

from importlib import metadata

from packaging.version import Version


def test_the_celery_executor_imports_under_the_pinned_celery() -> None:
    from airflow.providers.celery.executors.celery_executor import CeleryExecutor

    assert Version(metadata.version("celery")) < Version("5.7")
    assert CeleryExecutor.__name__ == "CeleryExecutor"
