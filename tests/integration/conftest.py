"""Integration tier: one real Airflow per pytest session (one Airflow per session), marker ``integration``.

The ``airflow_env`` fixture starts lazily on first use and is torn down by PID at session end, also when
tests fail. A failing test gets the tail of every component's log attached as report sections.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from airflow_harness.env import AirflowEnv, ComponentDeadError
from tests.integration.distributed import DISTRIBUTED_SETTINGS, distributed_topology

_INTEGRATION_DIR = Path(__file__).resolve().parent
_ENV_KEY = pytest.StashKey[AirflowEnv]()

# With a PostgreSQL pass, `scripts/dev.py test` runs the integration tier there (the LocalExecutor on every
# version; Airflow 2.11 on SQLite is the SequentialExecutor, one task process at a time) and sets this variable
# on the SQLite pass, which then runs only the modules below: the ones about the SQLite database itself (the
# outage), the harness, the plugin, parse-time errors, the minors' live smoke. The others are deselected
# there, not skipped: a skip is a proof left out (scripts/proofs.py), a deselected test runs in another pass.
SQLITE_SLICE_ENV = "SMART_EXT_SQLITE_SLICE"
SQLITE_SLICE = {
    "test_harness.py",
    "test_holiday_coverage_live.py",
    "test_minor_smoke_live.py",
    "test_outage_live.py",
    "test_partitions_live.py",
    "test_plugin.py",
}


# The distributed pass (`scripts/dev.py test` on Airflow 3) sets this to ``celery``: the session's Airflow is
# then the topology users run (docs/deployment.md) and the pass runs DISTRIBUTED_SLICE.
TOPOLOGY_ENV = "SMART_EXT_TOPOLOGY"
DISTRIBUTED_ONLY = {"test_distributed_live.py", "test_distributed_upgrade_live.py"}
DISTRIBUTED_SLICE = {*DISTRIBUTED_ONLY, "test_differential_live.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Route each integration test to its pass: what another pass runs is deselected here."""
    from airflow_smart_ext import compat

    slice_only = os.environ.get(SQLITE_SLICE_ENV) == "1"
    distributed = os.environ.get(TOPOLOGY_ENV) == "celery"
    postgres_pass = bool(os.environ.get("SMART_EXT_TEST_PG_DSN")) and not distributed
    kept, deselected = [], []
    for item in items:
        name = Path(str(item.path)).name
        if _INTEGRATION_DIR not in Path(str(item.path)).resolve().parents:
            kept.append(item)
            continue
        item.add_marker(pytest.mark.integration)
        if name in DISTRIBUTED_ONLY and not compat.AIRFLOW_V_3_0_PLUS:
            elsewhere = postgres_pass  # skipped once, in the SQLite pass (distributed.NO_DISTRIBUTED_PASS)
        elif distributed:
            elsewhere = name not in DISTRIBUTED_SLICE
        else:
            elsewhere = name in DISTRIBUTED_ONLY or (slice_only and name not in SQLITE_SLICE)
        (deselected if elsewhere else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(scope="session")
def airflow_env(request: pytest.FixtureRequest) -> Iterator[AirflowEnv]:
    """The session's real Airflow (see airflow_harness/env.py for the API)."""
    # 10 worker slots (default 4): the differential matrix starts ~130 task processes, ~17 of them poke-mode
    # sensors holding a slot for their whole wait; more slots only overload 2 cores (task processes then fail
    # at start-up talking to the one api-server worker). Tasks beyond them wait in `scheduled`, which changes
    # no sensor's outcome (the deadline counts from the start of the try). Parsing a DAG file under that
    # load can pass Airflow's 30 s import timeout: allow 120 s.
    extra_env = {"AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120"}
    if os.environ.get(TOPOLOGY_ENV) == "celery":
        env = AirflowEnv(**distributed_topology(), extra_env={**extra_env, **DISTRIBUTED_SETTINGS})
    else:
        env = AirflowEnv(parallelism=10, extra_env=extra_env)
    request.config.stash[_ENV_KEY] = env
    try:
        env.start()
        yield env
    finally:
        env.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture: restart what died since the last test (reported once by the harness); once a
    component cannot be restarted, skip the remaining tests naming it, instead of a cascade of errors."""
    env = item.config.stash.get(_ENV_KEY, None)
    if env is not None:
        try:
            env.check_components()
        except ComponentDeadError as dead:
            pytest.skip(f"the session's Airflow is broken: {dead}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    env = config.stash.get(_ENV_KEY, None)
    if env is not None and env.incidents:
        terminalreporter.section("Airflow components that died during the session")
        for incident in env.incidents:
            terminalreporter.write_line(incident)


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
