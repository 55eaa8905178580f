"""The PostgreSQL pass's shards (tests/conftest.py ``pytest_runtestloop``): run at the same time on one claims
directory, they run every test exactly once between them, each keeps one session fixture across its files,
and a shard that finds every file claimed runs nothing and still passes."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import os, pytest
from tests.conftest import pytest_runtestloop, pytest_terminal_summary  # noqa: F401 - the hooks under test

@pytest.fixture(scope="session")
def session_resource():
    with open(os.environ["SETUP_LOG"], "a") as log:
        log.write(f"session {os.getpid()}\\n")
    yield
"""
TEST_FILE = """
import time

def test_first(session_resource):
    time.sleep(0.3)

def test_second(session_resource):
    time.sleep(0.3)
"""


def run_shards(tmp_path: Path, shards: int) -> list[tuple[int, list[str]]]:
    for directory in ("alpha", "beta"):  # two directories: a shard crosses from one to the other
        (tmp_path / directory).mkdir()
        for number in range(3):
            (tmp_path / directory / f"test_{directory}_{number}.py").write_text(TEST_FILE)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SETUP_LOG": str(tmp_path / "setups.log"),
        "SMART_EXT_SHARD_CLAIMS": str(tmp_path / "claims"),
    }
    procs = []
    for index in range(shards):
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--rootdir={tmp_path}"]
        argv += [f"--junitxml={tmp_path / f'shard-{index}.xml'}", str(tmp_path)]
        procs.append(
            subprocess.Popen(
                argv,
                cwd=tmp_path,
                env={**env, "SMART_EXT_SHARD_INDEX": str(index)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    results = []
    for index, proc in enumerate(procs):
        output, _ = proc.communicate(timeout=120)
        report = ET.parse(tmp_path / f"shard-{index}.xml").getroot()
        ran = [f"{case.get('classname')}::{case.get('name')}" for case in report.iter("testcase")]
        assert proc.returncode == 0, output.decode()
        results.append((proc.returncode, ran))
    return results


def test_shards_run_every_test_once_between_them(tmp_path: Path) -> None:
    results = run_shards(tmp_path, 2)
    ran = [test for _code, tests in results for test in tests]
    assert len(ran) == 12 and len(set(ran)) == 12
    assert all(tests for _code, tests in results), "both shards took files"
    setups = (tmp_path / "setups.log").read_text().splitlines()
    assert len(setups) == 2, f"one session fixture per shard, kept across its files: {setups}"


def test_a_shard_that_finds_every_file_claimed_runs_nothing_and_passes(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    claims.mkdir()
    for directory in ("alpha", "beta"):
        for number in range(3):
            (claims / f"{directory}__test_{directory}_{number}.py").touch()
    results = run_shards(tmp_path, 1)
    assert results == [(0, [])]


def test_the_first_shard_takes_the_longest_files_first_and_a_later_one_the_shortest() -> None:
    from tests.conftest import shard_order

    files = [
        "tests/unit/test_x.py",
        "tests/integration/test_ui_live.py",
        "tests/integration/test_retries_live.py",
        "tests/integration/test_consumers_live.py",
    ]
    longest_first = shard_order(files, 1)
    assert longest_first[:2] == [
        "tests/integration/test_ui_live.py",
        "tests/integration/test_consumers_live.py",
    ]
    assert shard_order(files, 0) == longest_first[::-1]
    # Files of equal (short) weight keep their collection order.
    assert shard_order(files, 0)[:2] == ["tests/unit/test_x.py", "tests/integration/test_retries_live.py"]
