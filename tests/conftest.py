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
from typing import Any

import pytest

_TEST_HOME = Path(tempfile.mkdtemp(prefix="smart-ext-unit-airflow-"))
for _key in [k for k in os.environ if k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))]:
    del os.environ[_key]
os.environ["AIRFLOW_HOME"] = str(_TEST_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_TEST_HOME / "dags")
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_TEST_HOME / 'airflow.db'}"


# The tests of the project's own tooling (scripts/dev.py, scripts/proofs.py, the shards, the harness's death
# hooks, the Airflow-suite runner): they depend on no Airflow version, so CI runs them in one leg. A leg run with
# ``dev.py test --tooling-in-another-leg`` (CI's 2.11.2 leg) skips them with an allow-listed reason;
# scripts/proofs.py still fails CI when they ran in no leg.
TOOLING_FILES = {
    "tests/unit/test_airflow_sensor_suite.py",
    "tests/unit/test_dev_script.py",
    "tests/unit/test_harness_deaths.py",
    "tests/unit/test_proofs.py",
    "tests/unit/test_shards.py",
}
TOOLING_ELSEWHERE_ENV = "SMART_EXT_TOOLING_IN_ANOTHER_LEG"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tooling tests are skipped in a leg that leaves them to another (above). A unit test's PostgreSQL
    variant (marker ``postgres``) runs in the PostgreSQL pass (``-m "integration or postgres"``): the SQLite
    pass beside it deselects it (a skip would be a proof left out)."""
    if os.environ.get(TOOLING_ELSEWHERE_ENV) == "1":
        skip = pytest.mark.skip(reason="the project's tooling is tested in another leg of this run")
        for item in items:
            if item.nodeid.split("::")[0] in TOOLING_FILES:
                item.add_marker(skip)
    if os.environ.get("SMART_EXT_SQLITE_SLICE") != "1":
        return
    deselected = [item for item in items if item.get_closest_marker("postgres")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("postgres")]


# Shards of one pass (scripts/dev.py runs the PostgreSQL pass as one pytest process per lane that joins it):
# each shard collects the same tests and runs a test file only once it has claimed the file (an exclusive
# create in the claims directory), so the shards share the files as they free up. Odd shards (lane 1, which
# starts the pass at once) take the longest files first; even shards (lane 0, which joins after its own steps)
# the shortest first: the two meet on short files, so the lanes end close together. A file no shard ran is
# absent from every report, which scripts/proofs.py fails ("every file ran in some pass").
SHARD_CLAIMS_ENV = "SMART_EXT_SHARD_CLAIMS"
SHARD_INDEX_ENV = "SMART_EXT_SHARD_INDEX"
# Seconds each long file of the PostgreSQL pass took in CI (the slower Airflow leg, rounded; CI's rehearsals of
# 2026-11-29). Only the order matters: a file missing here counts as short.
FILE_SECONDS = {
    "test_ui_live.py": 250,
    "test_differential_live.py": 230,
    "test_watchers_live.py": 230,
    "test_deferrable_live.py": 190,
    "test_sensors_live.py": 530,
    "test_provider_sensors_live.py": 150,
    "test_watcher_late_live.py": 190,
    "test_ha_triggerers_live.py": 160,
    "test_due_clock_change_live.py": 170,
    "test_watcher_clock_change_live.py": 230,
    "test_watcher_exactly_once_live.py": 125,
    "test_zero_worker_live.py": 120,
    "test_upgrade_live.py": 120,
    "test_timetables_live.py": 100,
    "test_connection_hiccup_live.py": 100,
    "test_outage_live.py": 90,
    "test_trigger_queues_live.py": 90,
    "test_secrets_live.py": 55,
    "test_consumers_live.py": 50,
}
SHORT_FILE_SECONDS = 10


def shard_order(files: list[str], shard_index: int) -> list[str]:
    """The order a shard claims test files in (collection order among files of equal weight)."""
    shortest_first = sorted(files, key=lambda f: FILE_SECONDS.get(Path(f).name, SHORT_FILE_SECONDS))
    return shortest_first[::-1] if shard_index % 2 else shortest_first


_SHARD_KEY = pytest.StashKey[tuple[list[str], list[str]]]()  # (files this shard ran, files left to others)


def _claim(claims: Path, test_file: str) -> bool:
    try:
        os.close(os.open(claims / test_file.replace("/", "__"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """pytest's run loop, over the test files this shard claims (only when it runs as a shard)."""
    claims_dir = os.environ.get(SHARD_CLAIMS_ENV)
    if not claims_dir or session.config.option.collectonly:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    claims = Path(claims_dir)
    claims.mkdir(parents=True, exist_ok=True)
    groups: dict[Path, list[pytest.Item]] = {}
    for item in session.items:
        groups.setdefault(Path(str(item.path)), []).append(item)
    by_file = {str(path): group for path, group in groups.items()}
    order = [by_file[f] for f in shard_order(list(by_file), int(os.environ.get(SHARD_INDEX_ENV, "0")))]
    ran: list[str] = []
    left: list[str] = []

    def next_claimed(position: int) -> tuple[int, list[pytest.Item] | None]:
        while position < len(order):
            group = order[position]
            position += 1
            test_file = group[0].nodeid.split("::", 1)[0]
            if _claim(claims, test_file):
                ran.append(test_file)
                return position, group
            left.append(test_file)
        return position, None

    position, current = next_claimed(0)
    provisional: pytest.Item | None = None
    while current is not None:
        for index, item in enumerate(current):
            last = index == len(current) - 1
            # A file's last test tears down what the next file in this shard's order does not share; the
            # file after it is claimed only then (a shard holds one file at a time).
            provisional = order[position][0] if last and position < len(order) else None
            item.config.hook.pytest_runtest_protocol(
                item=item, nextitem=current[index + 1] if not last else provisional
            )
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        position, following = next_claimed(position)
        if following is not None and provisional is not following[0]:
            session._setupstate.teardown_exact(following[0])  # pytest's own runner keeps this state
        current = following
    session.config.stash[_SHARD_KEY] = (ran, left)
    return True


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    shard = config.stash.get(_SHARD_KEY, None)
    if shard is None:
        return
    ran, left = shard
    terminalreporter.section("shard")
    terminalreporter.write_line(f"test files run in this shard ({len(ran)}): {', '.join(ran) or 'none'}")
    terminalreporter.write_line(f"test files another shard claimed first: {len(left)}")


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
