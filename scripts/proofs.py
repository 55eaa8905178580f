#!/usr/bin/env python3
"""What a test run proved: read the JUnit reports of its pytest passes and tell what was left out.

    python3 scripts/proofs.py REPORT.xml [REPORT.xml ...] [--every-file [--or-allowed-skips]] [--claims docs/claims.md]

Left out, each a failure:
- a skip whose reason is not on the allow-list (tests/allowed_skips.txt: a skip is a proof that did not run,
  allowed only for a reason written down there, e.g. a feature the Airflow version under test lacks);
- with ``--every-file``: a ``tests/**/test_*.py`` file none of whose tests ran (passed, failed or xfailed) in
  any of the reports — CI passes the reports of all its legs, so every file must run somewhere; with
  ``--or-allowed-skips`` (one leg: scripts/dev.py) a file whose every test was skipped for an allowed reason
  counts too (e.g. the tests of Airflow 2.11's refusals, in a 3.x leg);
- with ``--claims``: a test named in the claims ledger (docs/claims.md) that did not pass in any report.
A failed test is the passes' own failure (they exit non-zero); it is counted here, not judged again.

Standard library only: scripts/dev.py runs it before or without any virtualenv.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED_SKIPS = ROOT / "tests" / "allowed_skips.txt"
CLAIMS = ROOT / "docs" / "claims.md"


@dataclass(frozen=True)
class Case:
    file: str  # tests/unit/test_x.py
    name: str  # test_y[param] or TestC::test_y[param]
    outcome: str  # passed | failed | error | skipped | xfailed
    reason: str = ""  # a skip's reason, a failure's message

    @property
    def node(self) -> str:
        """The node id without its parameters: what the claims ledger names."""
        return f"{self.file}::{self.name.split('[')[0]}"


@dataclass(frozen=True)
class AllowedSkip:
    pattern: re.Pattern[str]
    why: str


@dataclass
class Verdict:
    cases: list[Case]
    bad_skips: list[Case] = field(default_factory=list)
    files_not_run: list[str] = field(default_factory=list)
    claims_not_proven: list[str] = field(default_factory=list)

    @property
    def left_out(self) -> int:
        return len(self.bad_skips) + len(self.files_not_run) + len(self.claims_not_proven)

    def count(self, outcome: str) -> int:
        return sum(case.outcome == outcome for case in self.cases)

    def report(self) -> list[str]:
        # Each failure once more, with its message: where a long log is cut, the verdict still says why.
        lines = [
            f"{case.outcome}: {case.file}::{case.name}: {case.reason}"
            for case in self.cases
            if case.outcome in ("failed", "error")
        ]
        lines += [
            f"not run: skipped for a reason not on {ALLOWED_SKIPS.relative_to(ROOT)}: {case.file}::{case.name}"
            f" ({case.reason})"
            for case in self.bad_skips
        ]
        lines += [f"not run: no test of {name} ran" for name in self.files_not_run]
        lines += [
            f"not proven: the claims ledger names {node}, which did not pass"
            for node in self.claims_not_proven
        ]
        ran = self.count("passed") + self.count("failed") + self.count("error") + self.count("xfailed")
        allowed = self.count("skipped") - len(self.bad_skips)
        lines.append(
            f"proofs: {ran} tests ran ({self.count('passed')} passed, {self.count('failed') + self.count('error')}"
            f" failed, {self.count('xfailed')} xfailed as documented upstream behaviour), {allowed} skipped for"
            f" allow-listed reasons, {self.left_out} left out"
        )
        return lines


def test_file(classname: str) -> tuple[str, str]:
    """``tests.unit.x.test_f.TestC`` -> (``tests/unit/x/test_f.py``, ``TestC::``): the longest module prefix
    that is a file of the checkout."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / path).is_file():
            return path.as_posix(), "".join(f"{part}::" for part in parts[cut:])
    return "/".join(parts) + ".py", ""


def read_reports(paths: Iterable[Path]) -> list[Case]:
    cases = []
    for path in paths:
        for element in ElementTree.parse(path).getroot().iter("testcase"):
            classname, name = element.get("classname", ""), element.get("name", "")
            if not classname:  # a module that could not be collected: pytest reports it under its dotted name
                classname, name = name, "(collection)"
            file, prefix = test_file(classname)
            outcome, reason = "passed", ""
            for child in element:
                if child.tag == "skipped":
                    xfail = child.get("type") == "pytest.xfail"
                    outcome, reason = ("xfailed" if xfail else "skipped"), child.get("message", "")
                elif child.tag in ("failure", "error"):
                    outcome = "failed" if child.tag == "failure" else "error"
                    reason = " ".join((child.get("message") or "").split())[:300]
            cases.append(Case(file, prefix + name, outcome, reason))
    return cases


def load_allowed_skips(path: Path = ALLOWED_SKIPS) -> list[AllowedSkip]:
    """One entry a line: ``REASON-PATTERN | WHY`` (a regular expression matched at the start of the reason)."""
    allowed = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pattern, sep, why = line.partition(" | ")
        if not sep or not why.strip():
            raise SystemExit(f"{path}:{number}: write 'REASON-PATTERN | WHY' (the why is required)")
        allowed.append(AllowedSkip(re.compile(pattern.strip()), why.strip()))
    return allowed


def claimed_tests(path: Path = CLAIMS) -> list[str]:
    """The node ids of the ledger's ``test`` column (a Markdown table: | id | where | claim | test |)."""
    nodes = []
    for line in path.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not line.lstrip().startswith("|"):
            continue
        for entry in re.split(r"<br>|,", cells[-1]):
            entry = entry.strip().strip("`").strip()
            if entry.startswith("tests/"):
                nodes.append(entry)
    return nodes


def all_test_files() -> list[str]:
    return sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py"))


def judge(
    cases: list[Case],
    allowed: list[AllowedSkip],
    every_file: bool = False,
    or_allowed_skips: bool = False,
    claims: list[str] | None = None,
) -> Verdict:
    verdict = Verdict(cases)
    verdict.bad_skips = [
        case
        for case in cases
        if case.outcome == "skipped" and not any(a.pattern.match(case.reason) for a in allowed)
    ]
    if every_file:
        ran = {case.file for case in cases if case.outcome != "skipped"}
        only_allowed_skips = {case.file for case in cases if case.outcome == "skipped"} - {
            case.file for case in verdict.bad_skips
        }
        accepted = ran | only_allowed_skips if or_allowed_skips else ran
        verdict.files_not_run = [name for name in all_test_files() if name not in accepted]
    if claims is not None:
        passed = {case.node for case in cases if case.outcome == "passed"}
        verdict.claims_not_proven = sorted(set(claims) - passed)
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--every-file", action="store_true", help="every tests/**/test_*.py file must run")
    parser.add_argument(
        "--or-allowed-skips",
        action="store_true",
        help="with --every-file: a file only skipped for allowed reasons counts",
    )
    parser.add_argument("--claims", type=Path, help="every test the claims ledger names must pass")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.reports if not path.is_file()]
    if missing:
        print(f"[proofs] FAILED: no report at {', '.join(missing)} (a pass that wrote none did not run)")
        return 1
    verdict = judge(
        read_reports(args.reports),
        load_allowed_skips(),
        every_file=args.every_file,
        or_allowed_skips=args.or_allowed_skips,
        claims=claimed_tests(args.claims) if args.claims else None,
    )
    for line in verdict.report():
        print(f"[proofs] {line}")
    return 1 if verdict.left_out else 0


if __name__ == "__main__":
    sys.exit(main())
