"""Issue 41 without Airflow: a component death is never a pass (airflow_harness/env.py, airflow_harness/deaths.py,
the hooks of tests/integration/conftest.py).

``FakeEnv`` is an AirflowEnv whose components are plain Python processes: each says it is ready, then exits
with status 1 after printing its "last words" once the test writes them (a death with a cause in its log).
The hooks are checked in an inner pytest session (a subprocess) whose ``airflow_env`` is a FakeEnv.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_harness.deaths import KNOWN_DEFECTS, known_defect
from airflow_harness.env import _WATCHED, AirflowEnv, unwatch
from airflow_harness.state import REPO_ROOT, ComponentDeadError

LOCKED = (
    "Traceback (most recent call last):\n"
    '  File "airflow/jobs/scheduler_job_runner.py", line 1, in _orphan_unreferenced_assets\n'
    "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked\n"
    "[SQL: UPDATE asset SET ...]\n"
    "(Background on this error at: https://sqlalche.me/e/20/e3q8)"
)

_FAKE_COMPONENT = """
import pathlib, sys, time
print("fake component ready", flush=True)
words = pathlib.Path(sys.argv[1])
while not words.exists():
    time.sleep(0.05)
print(words.read_text(), flush=True)
words.unlink()
raise SystemExit(1)
"""


class FakeEnv(AirflowEnv):
    """No Airflow: three components (scheduler, triggerer, dag-processor) that die when told to (``die``).
    A name in ``unstartable`` exits at start (its restart fails)."""

    def __init__(self, home: Path) -> None:
        super().__init__(pg_dsn="", home=home, state_sample_interval=None)
        self.unstartable: set[str] = set()

    @property
    def component_names(self) -> list[str]:
        return ["scheduler", "triggerer", "dag-processor"]

    def start(self, timeout: float = 30.0) -> FakeEnv:
        self._started = True
        _WATCHED.append(self)
        self.env = {"PATH": os.environ.get("PATH", "")}
        self.component_log_folder.mkdir(parents=True, exist_ok=True)
        for name in self.component_names:
            self.start_component(name, timeout=timeout)
        return self

    def _last_words(self, name: str) -> Path:
        return self.home / f"{name}.last-words"

    def _component_argv(self, name: str) -> list[str]:
        if name in self.unstartable:
            return [
                sys.executable,
                "-c",
                "print('ImportError: no module named airflow_fake'); raise SystemExit(3)",
            ]
        return [sys.executable, "-c", _FAKE_COMPONENT, str(self._last_words(name))]

    def _component_env(self, name: str) -> dict[str, str]:
        return dict(os.environ)

    def _max_job_id(self, name: str) -> int:
        return 0

    def _component_ready(self, name: str, after_job_id: int) -> bool:
        return "fake component ready" in self.component_log(name).split("\n===== ")[-1]

    def die(self, name: str, last_words: str) -> None:
        """The component prints ``last_words`` and exits 1; returns once it did."""
        process = self.components[name].process
        assert process is not None
        self._last_words(name).write_text(last_words)
        process.wait(timeout=30)


@pytest.fixture
def fake_env(tmp_path: Path) -> Iterator[FakeEnv]:
    env = FakeEnv(tmp_path / "home").start()
    try:
        yield env
    finally:
        env.stop()
        unwatch(env)


def test_known_defects_are_cited_and_match_only_their_exit() -> None:
    for defect in KNOWN_DEFECTS:
        assert defect.citation and (".md" in defect.citation or "apache/airflow#" in defect.citation)
    assert known_defect("scheduler", 1, "exit 1: sqlalchemy.exc.OperationalError: database is locked")
    assert known_defect("scheduler-2", 1, "exit 1: OperationalError: connection refused")
    assert known_defect(
        "dag-processor", 1, "exit 1: OperationalError: server closed the connection unexpectedly"
    )
    assert known_defect(
        "dag-processor",
        1,
        'exit 1: sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server at "127.0.0.1", '
        "port 52737 failed: Connection refused",
    )
    assert known_defect(
        "scheduler",
        1,
        'exit 1: sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server at "127.0.0.1", '
        "port 53065 failed: FATAL:  the database system is shutting down",
    )
    assert known_defect(
        "triggerer-2", 1, "exit 1: OperationalError: FATAL:  the database system is starting up"
    )
    assert known_defect("triggerer", 1, "exit 1: OperationalError: database is locked") is None
    assert known_defect("scheduler", 1, "exit 1: ValueError: boom") is None
    assert known_defect("scheduler", -9, "killed by SIGKILL") is None  # a signal is never Airflow's defect


def test_a_death_raises_with_cause_and_tail_and_is_not_restarted_by_a_check(fake_env: FakeEnv) -> None:
    fake_env.check_components()  # all up
    old = fake_env.components["scheduler"]
    fake_env.die("scheduler", LOCKED)
    for _ in range(2):  # every check says it again; the death is recorded once
        with pytest.raises(ComponentDeadError) as raised:
            fake_env.check_components()
        assert str(raised.value).startswith(
            "Airflow scheduler died (exit 1: sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) "
            "database is locked); known Airflow defect: SQLite"
        ), raised.value
    assert fake_env.components["scheduler"] is old and not old.running  # a check restarts nothing
    (death,) = fake_env.deaths
    assert death.returncode == 1 and death.known is KNOWN_DEFECTS[0] and death.restart == ""
    assert "database is locked" in death.tail and "fake component ready" in death.tail
    assert "Last lines of its log:" in fake_env.incidents[0]

    assert fake_env.restart_dead() == [death]
    new = fake_env.components["scheduler"]
    assert new is not old and new.running and new.restarts == 1 and new.death is None
    assert death.restart == "restarted"
    fake_env.check_components()  # healthy again
    assert fake_env.restart_dead() == []


def test_kill_component_is_a_death_and_stop_component_is_none(fake_env: FakeEnv) -> None:
    fake_env.stop_component("triggerer", crash=True)  # on purpose: the test's own fault
    assert fake_env.detect_deaths() == []
    fake_env.kill_component("scheduler", signal.SIGKILL)
    (death,) = fake_env.detect_deaths()
    assert (death.component, death.cause, death.known) == ("scheduler", "killed by SIGKILL", None)
    assert death.headline == "Airflow scheduler died (killed by SIGKILL); not a known Airflow defect"


def test_a_component_that_cannot_restart_is_dead_for_every_later_check(fake_env: FakeEnv) -> None:
    fake_env.unstartable.add("dag-processor")
    fake_env.die("dag-processor", "KeyError: 'bundle'")
    (death,) = fake_env.restart_dead()
    assert death.restart.startswith("could not be restarted: Airflow dag-processor exited with code 3")
    for _ in range(2):
        with pytest.raises(ComponentDeadError, match=r"Airflow dag-processor is dead: exit 1: KeyError"):
            fake_env.check_components()
    assert fake_env.restart_dead() == []  # given up on: not started again before every test
    assert len(fake_env.deaths) == 1


def test_stop_records_what_died_before_it(tmp_path: Path) -> None:
    env = FakeEnv(tmp_path / "home").start()
    try:
        env.die("triggerer", "RuntimeError: gone")
    finally:
        env.stop()
        unwatch(env)
    assert [d.component for d in env.deaths] == ["triggerer"]


# The inner session: each test's outcome is what the hooks must make of it.
_INNER_CONFTEST = """
import pytest

from tests.unit.test_harness_deaths import FakeEnv


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory):
    env = FakeEnv(tmp_path_factory.mktemp("fake-airflow")).start()
    yield env
    env.stop()
"""

_INNER_TESTS = """
import pytest

from tests.unit.test_harness_deaths import LOCKED

TRIES = {}


def tried(name):
    TRIES[name] = TRIES.get(name, 0) + 1
    return TRIES[name]


def test_known_defect_once(airflow_env):
    if tried("known") == 1:
        airflow_env.die("scheduler", LOCKED)
    assert airflow_env.components["scheduler"].running


def test_known_defect_twice(airflow_env):
    tried("twice")
    airflow_env.die("scheduler", LOCKED)


def test_unknown_death(airflow_env):
    tried("unknown")
    airflow_env.die("triggerer", "Traceback (most recent call last):\\nValueError: boom")


def test_death_then_skip(airflow_env):
    airflow_env.die("triggerer", "RuntimeError: gone")
    pytest.skip("a skip must not hide the death")


def test_death_then_failure(airflow_env):
    airflow_env.die("triggerer", "RuntimeError: again")
    airflow_env.check_components()


def test_later_test_runs_on_restarted_components(airflow_env):
    assert all(c.running for c in airflow_env.components.values())
    assert airflow_env.components["scheduler"].restarts == 3
    assert airflow_env.components["triggerer"].restarts == 3


def test_supervised_known_defect(airflow_env):
    with airflow_env.supervised("the fault under test"):
        airflow_env.die("scheduler", LOCKED)
        airflow_env.check_components()  # restarts it, raises nothing
    assert airflow_env.components["scheduler"].running


def test_supervised_unknown_death(airflow_env):
    with airflow_env.supervised("the fault under test"):
        airflow_env.die("triggerer", "RuntimeError: not the fault under test")
        airflow_env.check_components()


def test_unrestartable(airflow_env):
    airflow_env.unstartable.add("dag-processor")
    airflow_env.die("dag-processor", "KeyError: 'bundle'")


def test_uses_the_broken_airflow(airflow_env):
    pass


def test_without_airflow():
    assert TRIES == {"known": 2, "twice": 2, "unknown": 1}
"""


def test_hooks_fail_the_test_a_death_happens_in_and_rerun_known_defects_once(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(_INNER_CONFTEST))
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(_INNER_TESTS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMART_EXT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.integration.conftest", "-p", "no:cacheprovider"]
        + ["-rfE", "-v", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    out = inner.stdout + inner.stderr
    assert inner.returncode == 1, out
    summary = inner.stdout.strip().splitlines()[-1]
    for part in ("6 failed", "4 passed", "1 error", "2 rerun"):
        assert part in summary, summary
    assert "skipped" not in summary, summary

    def status(test: str) -> list[str]:
        words = [line.split()[1] for line in out.splitlines() if line.startswith(f"test_inner.py::{test} ")]
        return [word for word in words if word in {"PASSED", "FAILED", "ERROR", "RERUN", "SKIPPED"}]

    assert status("test_known_defect_once") == ["RERUN", "PASSED"]
    assert status("test_known_defect_twice") == ["RERUN", "FAILED"]
    assert status("test_unknown_death") == ["FAILED"]  # no re-run
    assert status("test_death_then_skip") == ["FAILED"]  # never a skip
    assert status("test_death_then_failure") == ["FAILED"]
    assert status("test_later_test_runs_on_restarted_components") == ["PASSED"]
    assert status("test_supervised_known_defect") == ["PASSED"]  # restarted at once, shown, no re-run
    assert status("test_supervised_unknown_death") == ["FAILED"]  # a supervisor forgives known defects only
    assert status("test_unrestartable") == ["FAILED"]
    assert status("test_uses_the_broken_airflow") == ["ERROR"]  # an error, not a skip
    assert status("test_without_airflow") == ["PASSED"]

    # The failing test's report: the component, its exit status and cause, its log tail.
    assert "1 Airflow component death(s) during this test (call): a death is never a pass" in out
    assert "Airflow triggerer died (exit 1: ValueError: boom); not a known Airflow defect. Last lines" in out
    assert "ComponentDeadError: Airflow triggerer died (exit 1: RuntimeError: again)" in out
    assert "ComponentDeadError: this test's Airflow is broken: Airflow dag-processor is dead: " in out
    assert "Airflow dag-processor is dead: exit 1: KeyError: 'bundle'; its restart failed: " in out

    # The terminal summary: every death, where, and how it was handled; the counts CI greps.
    section = out[out.index("Airflow component deaths ===") :]
    assert (
        "test_inner.py::test_known_defect_once (call, try 1): Airflow scheduler died (exit 1: "
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked); known Airflow defect"
    ) in section
    assert "test_inner.py::test_unknown_death (call, try 1): Airflow triggerer died" in section
    assert "test_inner.py::test_known_defect_twice (call, try 2): Airflow scheduler died" in section
    assert (
        "re-run once (known Airflow defect): test_inner.py::test_known_defect_once: passed on its re-run"
        in (section)
    )
    assert (
        "test_unrestartable (call, try 1): Airflow dag-processor died (exit 1: KeyError: 'bundle')" in section
    )
    assert (
        "test_inner.py::test_supervised_known_defect (call, try 1): Airflow scheduler died (exit 1: "
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked); known Airflow defect"
    ) in section
    assert (
        "; restarted by the test's supervisor (the fault under test); restarted by the supervisor" in section
    )
    assert "component deaths: 9 (known Airflow defects: 4; restarted by a test's supervisor: 1)" in section
    assert "known-defect re-runs: 2 (passed on re-run: 1)" in section
