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
    # 10 worker slots (default 4): the differential matrix starts ~130 task processes, ~17 of them poke-mode
    # sensors holding a slot for their whole wait; more slots only overload 2 cores (task processes then fail
    # at start-up talking to the one api-server worker). Tasks beyond them wait in `scheduled`, which changes
    # no sensor's outcome (the deadline counts from the start of the try). Parsing a DAG file under that
    # load can pass Airflow's 30 s import timeout: allow 120 s.
    env = AirflowEnv(parallelism=10, extra_env={"AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120"})
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
