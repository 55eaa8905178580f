"""scripts/airflow_sensor_suite.py's bookkeeping: the allow-list, and a JUnit report the proofs verdict reads
(a listed difference is an allowed skip, anything else that failed fails)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import airflow_sensor_suite as suite  # noqa: E402
import proofs  # noqa: E402


def test_every_allow_list_entry_gives_its_reason_and_covers_its_parametrizations() -> None:
    allowed = suite.read_allowed(suite.ALLOWED)
    assert allowed and all(why for why in allowed.values())
    name = "task_sdk/test_sensor.py::TestBaseSensor::test_sensor_with_exponential_backoff_on_and_small_poke_interval"
    assert name in allowed
    assert suite.allowed_reason(name + "[0.1]", allowed) == allowed[name]
    assert suite.allowed_reason("task_sdk/test_sensor.py::TestBaseSensor::test_ok", allowed) is None


def test_an_entry_without_a_reason_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "allowed.txt"
    path.write_text("# a comment\nsome/test.py::test_x |  \n")
    with pytest.raises(SystemExit, match="test_x has no reason"):
        suite.read_allowed(path)


def _verdict(tmp_path: Path, outcomes: list[suite.Outcome]) -> proofs.Verdict:
    report = tmp_path / "suite.xml"
    suite.write_junit(report, outcomes, "test")
    return proofs.judge(proofs.read_reports([report]), proofs.load_allowed_skips())


def test_a_listed_difference_is_an_allowed_skip_and_an_unlisted_failure_fails(tmp_path: Path) -> None:
    listed = suite.Outcome("task_sdk/test_sensor.py::TestBaseSensor::test_invalid_mode", "failed", "E ...")
    listed.allowed_because = "Message wording: ..."
    passed = suite.Outcome("task_sdk/test_sensor.py::TestBaseSensor::test_ok[1]", "passed")
    verdict = _verdict(tmp_path, [listed, passed])
    assert (verdict.left_out, verdict.count("skipped"), verdict.count("passed")) == (0, 1, 1)
    assert {case.node for case in verdict.cases} == {
        "task_sdk/test_sensor.py::TestBaseSensor::test_invalid_mode",
        "task_sdk/test_sensor.py::TestBaseSensor::test_ok",  # the node: no parameters
    }
    unlisted = suite.Outcome("standard/test_time.py::TestTimeSensor::test_timezone", "failed", "E assert ...")
    verdict = _verdict(tmp_path, [listed, passed, unlisted])
    assert verdict.count("failed") == 1


def test_airflows_own_skip_keeps_its_reason(tmp_path: Path) -> None:
    skipped = suite.Outcome("standard/test_date_time.py::T::test_old", "skipped", "Test only for AF < 3.3")
    verdict = _verdict(tmp_path, [skipped])
    assert verdict.left_out == 0  # on tests/allowed_skips.txt
    assert [case.reason for case in verdict.cases] == ["Test only for AF < 3.3"]


SAMPLE_TESTS = """
import pytest

def test_listed_fails():
    assert False, "a listed difference"

def test_unlisted_fails():
    assert False, "a break"

def test_listed_passes():
    pass

@pytest.mark.xfail(reason="Airflow's own expected failure")
def test_upstream_xfail():
    assert False
"""


def test_a_listed_test_runs_as_an_expected_failure_and_anything_else_keeps_its_outcome(
    tmp_path: Path,
) -> None:
    """The allow-list reaches pytest: a listed failure is reported as ``xfailed`` (pytest's summary shows no
    failure for it), an unlisted one fails, a listed one that passes passes, and Airflow's own ``xfail``
    marker is not mistaken for ours."""
    shutil.copytree(suite.HARNESS, tmp_path, dirs_exist_ok=True)
    (tmp_path / "test_sample.py").write_text(SAMPLE_TESTS)
    allowed = {"test_sample.py::test_listed_fails": "a reason", "test_sample.py::test_listed_passes": "stale"}
    outcomes = {
        o.id.split("::")[-1]: o.outcome
        for o in suite.run_pytest(sys.executable, tmp_path, allowed, suite.ROOT, 120)
    }
    assert outcomes == {
        "test_listed_fails": "xfailed",
        "test_unlisted_fails": "failed",
        "test_listed_passes": "passed",
        "test_upstream_xfail": "skipped",
    }
