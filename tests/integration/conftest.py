"""Integration tier: one real Airflow per pytest session (one Airflow per session), marker ``integration``.

The ``airflow_env`` fixture starts lazily on first use and is torn down by PID at session end, also when
tests fail. A failing test gets the tail of every component's log attached as report sections. A component
that dies during a test fails that test (below: "Component deaths").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from airflow_harness.deaths import ComponentDeath
from airflow_harness.env import AirflowEnv, watched_envs
from airflow_harness.state import ComponentDeadError
from tests.integration.distributed import DISTRIBUTED_SETTINGS, distributed_topology

_INTEGRATION_DIR = Path(__file__).resolve().parent
_ENV_KEY = pytest.StashKey[AirflowEnv]()

# With a PostgreSQL pass, `scripts/dev.py test` runs the integration tier there (the LocalExecutor on every
# version; Airflow 2.11 on SQLite is the SequentialExecutor, one task process at a time) and sets this variable
# on the SQLite pass, which then runs only the modules below: the harness, the plugin, parse-time errors, the
# minors' live smoke (it runs on 3.0-3.2 only). (The condition-database outage locks a SQLite file in either
# pass: the PostgreSQL pass runs it, in a minute instead of 5 on 2.11's one-task-at-a-time executor.) The
# others are deselected there, not skipped: a skip is a proof left out (scripts/proofs.py), a deselected test
# runs in another pass.
SQLITE_SLICE_ENV = "SMART_EXT_SQLITE_SLICE"
SQLITE_SLICE = {
    "test_harness.py",
    "test_holiday_coverage_live.py",
    "test_minor_smoke_live.py",
    "test_partitions_live.py",
    "test_plugin.py",
}


# Modules of the slice whose proofs do not depend on the database (the plugin's registration, parse-time
# errors, the minors' smoke, the harness's own smoke: every test of the PostgreSQL pass runs the harness on
# PostgreSQL): the SQLite pass only; the PostgreSQL pass deselects them (CI's minutes).
SQLITE_ONLY = {
    "test_harness.py",
    "test_holiday_coverage_live.py",
    "test_minor_smoke_live.py",
    "test_partitions_live.py",
    "test_plugin.py",
}
# Tests that start an Airflow of their own, proving the harness, not a database or a version: the SQLite pass
# of an Airflow 3 leg only (CI's minutes).
SQLITE_PASS_ONLY = {"test_harness.py::test_a_killed_scheduler_fails_its_test"}


# The distributed pass (`scripts/dev.py test` on Airflow 3) sets this to ``celery``: the session's Airflow is
# then the topology users run (docs/deployment.md) and the pass runs DISTRIBUTED_ONLY. (The differential
# matrix ran five of its rows there too; CI's minutes: it runs whole in both PostgreSQL passes.)
TOPOLOGY_ENV = "SMART_EXT_TOPOLOGY"
DISTRIBUTED_ONLY = {"test_distributed_live.py", "test_distributed_upgrade_live.py"}


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
        if name in DISTRIBUTED_ONLY and not compat.versions.AIRFLOW_V_3_0_PLUS:
            elsewhere = postgres_pass  # skipped once, in the SQLite pass (distributed.NO_DISTRIBUTED_PASS)
        elif distributed:
            elsewhere = name not in DISTRIBUTED_ONLY
        else:
            elsewhere = (
                name in DISTRIBUTED_ONLY
                or (slice_only and name not in SQLITE_SLICE)
                or (postgres_pass and name in SQLITE_ONLY)
                or (
                    (postgres_pass or not compat.versions.AIRFLOW_V_3_0_PLUS)
                    and f"{name}::{item.name}" in SQLITE_PASS_ONLY
                )
            )
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


# Component deaths (issue 41): a death is never a pass, never a skip. The test it happens in fails with its
# exit status and log tail (pytest_runtest_makereport); after it the component is restarted so later tests run
# on a healthy Airflow, and a test whose deaths are all known Airflow defects (airflow_harness/deaths.py
# KNOWN_DEFECTS) runs once more (pytest_runtest_protocol). A component that cannot be restarted fails every
# later test of its Airflow (pytest_runtest_setup). The terminal summary lists the deaths and counts the
# re-runs ("known-defect re-runs: N", which CI prints).
_ATTEMPT_KEY = pytest.StashKey[int]()
_RERUNS_KEY = pytest.StashKey[list[tuple[str, str]]]()  # (test, outcome of its re-run)
_RERUN_SHOWN = "smart_ext_rerun_shown"  # a re-run test's first try: the one report logged for it


def _raise_if_dead(env: AirflowEnv) -> None:
    if env.dead:
        raise ComponentDeadError(
            "this test's Airflow is broken: "
            + "; ".join(f"Airflow {name} is dead: {cause}" for name, cause in sorted(env.dead.items()))
        )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """A test of an Airflow with a component that could not be restarted errors (never skips), naming it:
    the session's Airflow before any fixture waits on it, a module's own Airflow once its fixture is set up."""
    env = item.config.stash.get(_ENV_KEY, None)
    if env is not None and "airflow_env" in getattr(item, "fixturenames", ()):
        _raise_if_dead(env)
    result = yield
    for value in (getattr(item, "funcargs", None) or {}).values():
        if isinstance(value, AirflowEnv):
            _raise_if_dead(value)
    return result


def _attribute_deaths(item: pytest.Item, when: str) -> list[ComponentDeath]:
    """Deaths of any started AirflowEnv not yet pinned on a test: now this test's (this phase, this try)."""
    attempt = item.stash.get(_ATTEMPT_KEY, 1)
    new = []
    for env in watched_envs():
        env.detect_deaths()
        for death in env.deaths:
            if death.test is None:
                death.test, death.when, death.attempt = item.nodeid, when, attempt
                new.append(death)
    return new


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    deaths = _attribute_deaths(item, call.when)
    supervised = [death for death in deaths if death.supervised]
    deaths = [death for death in deaths if not death.supervised]
    if supervised:  # restarted by the test's supervisor (AirflowEnv.supervised): shown, not a failure
        text = "\n\n".join(death.describe() for death in supervised)
        report.sections.append(("Airflow component deaths restarted by the test's supervisor", text))
    if deaths:
        text = "\n\n".join(death.describe() for death in deaths)
        if report.failed:
            report.sections.append(("Airflow component deaths", text))
        else:  # passed or skipped: a death is neither
            report.outcome = "failed"
            report.longrepr = (
                f"{len(deaths)} Airflow component death(s) during this test ({call.when}): a death is never "
                f"a pass (tests/integration/conftest.py)\n\n{text}"
            )
        if hasattr(report, "wasxfail"):
            del report.wasxfail
    env = item.config.stash.get(_ENV_KEY, None)
    if report.failed and env is not None:
        for name, tail in env.component_logs_tail().items():
            report.sections.append((f"airflow {name} log (tail)", tail))
        report.sections.append(("airflow home", str(env.home)))
    return report


def _restart_dead() -> None:
    for env in watched_envs():
        env.restart_dead()


def _attempt(item: pytest.Item, nextitem: pytest.Item | None, attempt: int) -> list[pytest.TestReport]:
    item.stash[_ATTEMPT_KEY] = attempt
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    _restart_dead()  # also after a death in a test not re-run: the next test runs on a healthy Airflow
    return reports


def _rerun_reason(item: pytest.Item) -> list[ComponentDeath] | None:
    """The first try's deaths when the test runs again: all of them known Airflow defects, all restarted
    (or their Airflow stopped with its module: the re-run starts a new one)."""
    deaths = [
        death
        for env in watched_envs()
        for death in env.deaths
        if death.test == item.nodeid and not death.supervised
    ]
    if not deaths or not all(death.known and not death.restart.startswith("could not") for death in deaths):
        return None
    return deaths


def _prepare_rerun(item: pytest.Item) -> None:
    """A fixture that failed on the first try is set up again (pytest caches a fixture's exception for its
    scope); pytest-timeout's timer starts again for the second try."""
    for defs in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
        for fixturedef in defs:
            cached = fixturedef.cached_result
            if cached is not None and cached[2] is not None:
                fixturedef.cached_result = None
    with contextlib.suppress(Exception):  # its private settings reader; without it, one timer for both
        import pytest_timeout

        settings = pytest_timeout._get_item_settings(item)
        if settings.timeout and not settings.func_only:
            hook = item.config.pluginmanager.hook
            hook.pytest_timeout_cancel_timer(item=item)
            hook.pytest_timeout_set_timer(item=item, settings=settings)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """pytest's protocol (setup, call, teardown, then the reports), restarting what died after the test; a
    test whose every death was a known Airflow defect runs once more, its first try logged as one re-run
    report (R). Any other death: no re-run, the test stays failed."""
    reports = _attempt(item, nextitem, 1)
    if _rerun_reason(item) is not None:
        shown = next((r for r in reports if r.failed or r.when == "call"), reports[0])
        shown.outcome = "rerun"  # type: ignore[assignment]
        setattr(shown, _RERUN_SHOWN, True)
        item.ihook.pytest_runtest_logreport(report=shown)
        _prepare_rerun(item)
        reports = _attempt(item, nextitem, 2)
        outcome = "failed" if any(r.failed for r in reports) else "passed"
        item.config.stash.setdefault(_RERUNS_KEY, []).append((item.nodeid, outcome))
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A death no test report carried (after the last test's report, e.g. in a later unit test) still fails
    the session."""
    stray = [death for env in watched_envs() for death in env.deaths if death.test is None]
    if stray and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    envs = watched_envs()
    if not envs:
        return
    deaths = [death for env in envs for death in env.deaths]
    reruns = config.stash.get(_RERUNS_KEY, [])
    terminalreporter.section("Airflow component deaths")
    for death in deaths:
        where = (
            f"{death.test} ({death.when}, try {death.attempt})"
            if death.test
            else "outside any test (fails the session)"
        )
        restart = death.restart or "not restarted (its Airflow was stopped)"
        terminalreporter.write_line(f"{where}: {death.headline}; {restart}")
    for nodeid, outcome in reruns:
        terminalreporter.write_line(f"re-run once (known Airflow defect): {nodeid}: {outcome} on its re-run")
    known = sum(death.known is not None for death in deaths)
    supervised = sum(death.supervised is not None for death in deaths)
    terminalreporter.write_line(
        f"component deaths: {len(deaths)} (known Airflow defects: {known}; "
        f"restarted by a test's supervisor: {supervised})"
    )
    passed = sum(outcome == "passed" for _, outcome in reruns)
    terminalreporter.write_line(f"known-defect re-runs: {len(reruns)} (passed on re-run: {passed})")
