"""scripts/proofs.py: what a test run left out, read from its passes' JUnit reports (the test command's and
CI's closing verdict)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import proofs  # noqa: E402

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.unit.test_proofs" name="test_a[x]" time="0.1"/>
  <testcase classname="tests.unit.test_proofs" name="test_b" time="0.1">
    <skipped type="pytest.skip" message="needs a server nobody started">skip</skipped></testcase>
  <testcase classname="tests.unit.test_backoff" name="test_c" time="0.1">
    <skipped type="pytest.skip" message="2.11: no asset watchers">skip</skipped></testcase>
  <testcase classname="tests.unit.test_errors.TestThing" name="test_d" time="0.1">
    <failure message="boom">boom</failure></testcase>
  <testcase classname="tests.unit.test_errors" name="test_e" time="0.1">
    <skipped type="pytest.xfail" message="upstream #1">xfail</skipped></testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def cases(tmp_path: Path) -> list[proofs.Case]:
    report = tmp_path / "pass.xml"
    report.write_text(REPORT)
    return proofs.read_reports([report])


def test_reports_are_read_into_files_outcomes_and_reasons(cases: list[proofs.Case]) -> None:
    assert [(c.file, c.name, c.outcome) for c in cases] == [
        ("tests/unit/test_proofs.py", "test_a[x]", "passed"),
        ("tests/unit/test_proofs.py", "test_b", "skipped"),
        ("tests/unit/test_backoff.py", "test_c", "skipped"),
        ("tests/unit/test_errors.py", "TestThing::test_d", "failed"),
        ("tests/unit/test_errors.py", "test_e", "xfailed"),
    ]
    assert cases[0].node == "tests/unit/test_proofs.py::test_a"
    assert cases[1].reason == "needs a server nobody started"


def test_a_skip_off_the_allow_list_is_left_out_one_on_it_is_not(cases: list[proofs.Case]) -> None:
    allowed = [proofs.AllowedSkip(re.compile(r"2\.11: "), "2.11 lacks it")]
    verdict = proofs.judge(cases, allowed)
    assert [c.name for c in verdict.bad_skips] == ["test_b"]
    assert verdict.left_out == 1
    assert verdict.report()[-1].endswith("1 skipped for allow-listed reasons, 1 left out")
    # a failure is named again with its message (CI's log may be cut before the pass that printed it)
    assert verdict.report()[0] == "failed: tests/unit/test_errors.py::TestThing::test_d: boom"


def test_every_file_must_run_somewhere(cases: list[proofs.Case]) -> None:
    allowed = [proofs.AllowedSkip(re.compile(".*"), "anything")]
    strict = proofs.judge(cases, allowed, every_file=True)
    lenient = proofs.judge(cases, allowed, every_file=True, or_allowed_skips=True)
    # test_backoff.py only skipped: not run across CI, accepted for one leg; test_errors.py ran (failed, xfail).
    assert "tests/unit/test_backoff.py" in strict.files_not_run
    assert "tests/unit/test_backoff.py" not in lenient.files_not_run
    assert not {"tests/unit/test_proofs.py", "tests/unit/test_errors.py"} & set(strict.files_not_run)
    assert "tests/unit/test_layout.py" in lenient.files_not_run  # in no report at all


def test_a_claimed_test_must_have_passed(cases: list[proofs.Case]) -> None:
    claims = ["tests/unit/test_proofs.py::test_a", "tests/unit/test_errors.py::TestThing::test_d"]
    verdict = proofs.judge(cases, [], claims=claims)
    assert verdict.claims_not_proven == ["tests/unit/test_errors.py::TestThing::test_d"]


def test_the_claims_ledger_column_is_read(tmp_path: Path) -> None:
    ledger = tmp_path / "claims.md"
    ledger.write_text(
        "| id | where | claim | test |\n|---|---|---|---|\n"
        "| a | README.md | x | `tests/unit/test_a.py::test_x`<br>tests/unit/test_b.py::T::test_y |\n"
        "| b | README.md | y | bench:docs/benchmarks.md#one |\n"
    )
    assert proofs.claimed_tests(ledger) == ["tests/unit/test_a.py::test_x", "tests/unit/test_b.py::T::test_y"]


def test_the_allow_list_gives_a_why_for_every_entry_and_refuses_one_without(tmp_path: Path) -> None:
    entries = proofs.load_allowed_skips()
    assert entries and all(entry.why for entry in entries)
    assert any(entry.pattern.match("2.11: no asset watchers") for entry in entries)
    # What the test command now installs and starts is never an allowed reason to skip.
    for reason in ("SMART_EXT_TEST_PG_DSN is not set", "NO BROWSER: x", "the session's Airflow is broken"):
        assert not any(entry.pattern.match(reason) for entry in entries), reason
    bad = tmp_path / "allowed.txt"
    bad.write_text("some reason without a why\n")
    with pytest.raises(SystemExit, match="the why is required"):
        proofs.load_allowed_skips(bad)


def test_a_missing_report_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert proofs.main([str(tmp_path / "none.xml")]) == 1
    assert "a pass that wrote none did not run" in capsys.readouterr().out


def test_a_leg_that_leaves_the_tooling_to_another_skips_it_on_the_allow_list_and_only_then(
    tmp_path: Path,
) -> None:
    """CI's 2.11.2 leg (``--tooling-in-another-leg``) skips the Airflow-independent tooling tests with an
    allowed reason; without the switch they run. Either way a file that ran in no leg is left out."""
    from tests.conftest import TOOLING_ELSEWHERE_ENV, TOOLING_FILES

    root = Path(__file__).resolve().parents[2]
    assert all((root / name).is_file() for name in TOOLING_FILES)
    node = "tests/unit/test_proofs.py::test_the_claims_ledger_column_is_read"
    outcomes = {}
    for switch in ("1", ""):
        report = tmp_path / f"tooling-{switch or 'run'}.xml"
        env = {**os.environ, TOOLING_ELSEWHERE_ENV: switch}
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node, f"--junitxml={report}"]
        subprocess.run(argv, cwd=root, env=env, capture_output=True, timeout=120, check=False)
        (case,) = proofs.read_reports([report])
        verdict = proofs.judge([case], proofs.load_allowed_skips(), every_file=True, or_allowed_skips=True)
        outcomes[switch] = (case.outcome, case.reason, verdict.bad_skips)
    assert outcomes["1"] == ("skipped", "the project's tooling is tested in another leg of this run", [])
    assert outcomes[""][0] == "passed"


def test_a_module_that_could_not_be_collected_is_a_failure_of_its_file(tmp_path: Path) -> None:
    """pytest reports a collection error with an empty classname and the module's dotted name (seen when a
    helper module moved): the verdict names the file, and counts it failed (it crashed proofs.py before)."""
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite><testcase classname="" name="tests.unit.test_proofs" time="0">'
        '<error message="collection failure">ModuleNotFoundError</error></testcase></testsuite></testsuites>'
    )
    (case,) = proofs.read_reports([report])
    assert (case.file, case.name, case.outcome) == ("tests/unit/test_proofs.py", "(collection)", "error")
