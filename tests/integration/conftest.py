"""Integration tier: one real Airflow per pytest session (Contract B), marker ``integration``.

The ``airflow_env`` fixture starts lazily on first use and is torn down by PID at session end, also when
tests fail. A failing test gets the tail of every component's log attached as report sections.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.integration.harness import AirflowEnv

_INTEGRATION_DIR = Path(__file__).resolve().parent
_ENV_KEY = pytest.StashKey[AirflowEnv]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def airflow_env(request: pytest.FixtureRequest) -> Iterator[AirflowEnv]:
    """The session's real Airflow (see tests/integration/harness.py for the API)."""
    # 20 worker slots: the differential matrix holds ~17 poke-mode sensors at once (one DAG run per mode) while
    # the other modes still need slots (the LocalExecutor forks its workers up front: memory, not CPU). Its
    # ~130 task processes parse their DAG file at once on 2 cores: allow 120 s instead of 30 s for that.
    env = AirflowEnv(parallelism=20, extra_env={"AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120"})
    request.config.stash[_ENV_KEY] = env
    try:
        env.start()
        yield env
    finally:
        env.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    env = item.config.stash.get(_ENV_KEY, None)
    if report.failed and env is not None:
        for name, tail in env.component_logs_tail().items():
            report.sections.append((f"airflow {name} log (tail)", tail))
        report.sections.append(("airflow home", str(env.home)))
    return report
