"""The claims ledger (docs/claims.md): every claim of the docs names the tests that prove it.

The table's format is shared with CI's JUnit check (a stdlib script in scripts/): the ``test`` cells split on
``<br>`` and ``,``, stripped of backticks and spaces; entries starting with ``tests/`` are node ids. The parser
here is self-contained on purpose; nothing imports a test module (test modules are read with ``ast``).
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LEDGER = REPO_ROOT / "docs" / "claims.md"
COLUMNS = ["id", "where", "claim", "test"]
NODE_ID = re.compile(r"^(tests/[\w/]+\.py)::(?:(Test\w+)::)?(test\w*)$")
BENCH_REF = re.compile(r"^bench:([\w./-]+\.md)#([\w-]+)$")
ID_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*$")
NONE = "none"


def split_row(line: str) -> list[str]:
    """The cells of one Markdown table row (no cell of the ledger contains a pipe)."""
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")):
        raise ValueError(f"not a table row: {line!r}")
    return [cell.strip() for cell in line[1:-1].split("|")]


def parse_table(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the rows of the first table in ``text``."""
    lines = [line for line in text.splitlines() if line.strip().startswith("|")]
    if len(lines) < 2:
        raise ValueError("no table")
    header = split_row(lines[0])
    if not all(re.fullmatch(r":?-{3,}:?", cell) for cell in split_row(lines[1])):
        raise ValueError(f"no separator row under the header: {lines[1]!r}")
    rows = []
    for line in lines[2:]:
        cells = split_row(line)
        if len(cells) != len(header):
            raise ValueError(f"{len(cells)} cells, expected {len(header)}: {line!r}")
        rows.append(dict(zip(header, cells, strict=True)))
    return header, rows


def cell_entries(cell: str) -> list[str]:
    """A ``test`` cell's entries, as CI reads them: split on ``<br>`` and ``,``, backticks and spaces off."""
    parts = re.split(r"<br\s*/?>|,", cell)
    return [entry for entry in (part.replace("`", "").strip() for part in parts) if entry]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link keeps its text
    text = text.lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in " -_" or category[0] in "LN" or category == "Mn":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading anchor of a Markdown file (fenced code skipped; repeats get -1, -2, … as on GitHub)."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        base = slug(match.group(1))
        count = counts.get(base, 0)
        counts[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def defined_tests(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every test function a module defines (read, not imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, functions) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, functions) and item.name.startswith("test"):
                    names.add(f"{node.name}::{item.name}")
    return names


def problems(rows: list[dict[str, str]], root: Path) -> list[str]:
    """What is wrong with the ledger's rows, in words (empty: nothing)."""
    found: list[str] = []
    seen: set[str] = set()
    tests_of: dict[Path, set[str]] = {}
    anchors_of: dict[Path, set[str]] = {}

    def file_anchors(path: Path) -> set[str]:
        if path not in anchors_of:
            anchors_of[path] = anchors(path.read_text(encoding="utf-8"))
        return anchors_of[path]

    for row in rows:
        row_id = row["id"]
        if not ID_SLUG.fullmatch(row_id):
            found.append(f"{row_id!r}: the id is not a short slug")
        if row_id in seen:
            found.append(f"{row_id!r}: the id is not unique")
        seen.add(row_id)
        if not row["claim"]:
            found.append(f"{row_id}: no claim")
        doc, _, anchor = row["where"].partition("#")
        doc_path = root / doc
        if not doc or not doc_path.is_file():
            found.append(f"{row_id}: where {row['where']!r} names no file")
        elif anchor and anchor not in file_anchors(doc_path):
            found.append(f"{row_id}: where {row['where']!r}: no heading with that anchor")
        entries = cell_entries(row["test"])
        if not entries:
            found.append(f"{row_id}: no test")
        if NONE in entries and len(entries) > 1:
            found.append(f"{row_id}: 'none' with tests beside it")
        for entry in entries:
            if entry == NONE:
                continue
            bench = BENCH_REF.fullmatch(entry)
            if bench:
                path = root / bench.group(1)
                if not path.is_file():
                    found.append(f"{row_id}: {entry}: no such file")
                elif bench.group(2) not in file_anchors(path):
                    found.append(f"{row_id}: {entry}: no heading with that anchor")
                continue
            node = NODE_ID.fullmatch(entry)
            if not node:
                found.append(f"{row_id}: {entry!r} is not a node id (tests/...py::[TestClass::]test_name)")
                continue
            path = root / node.group(1)
            if not path.is_file():
                found.append(f"{row_id}: {entry}: no such test file")
                continue
            if path not in tests_of:
                tests_of[path] = defined_tests(path)
            name = f"{node.group(2)}::{node.group(3)}" if node.group(2) else node.group(3)
            if name not in tests_of[path]:
                found.append(f"{row_id}: {entry}: no such test in {node.group(1)}")
    return found


@pytest.fixture(scope="module")
def ledger() -> tuple[list[str], list[dict[str, str]]]:
    return parse_table(LEDGER.read_text(encoding="utf-8"))


def test_the_ledger_has_the_columns(ledger: tuple[list[str], list[dict[str, str]]]) -> None:
    header, rows = ledger
    assert header == COLUMNS
    assert len(rows) >= 60, f"only {len(rows)} claims"


def test_every_row_names_real_tests_files_and_sections(
    ledger: tuple[list[str], list[dict[str, str]]],
) -> None:
    _header, rows = ledger
    assert problems(rows, REPO_ROOT) == []


def test_the_ids_are_unique(ledger: tuple[list[str], list[dict[str, str]]]) -> None:
    ids = [row["id"] for row in ledger[1]]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_most_claims_name_a_test_not_none(ledger: tuple[list[str], list[dict[str, str]]]) -> None:
    untested = [row["id"] for row in ledger[1] if cell_entries(row["test"]) == [NONE]]
    assert len(untested) <= len(ledger[1]) // 10, untested


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """Made-up rows: every kind of mistake is reported, and a good row is not."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "def test_real():\n    pass\n\nclass TestK:\n    def test_m(self):\n        pass\n\ndef helper():\n    pass\n"
    )
    (tmp_path / "doc.md").write_text("# Doc\n\n## 1. A section (issue 9)\n\n```\n# not a heading\n```\n")
    table = "\n".join(
        [
            "| id | where | claim | test |",
            "| --- | --- | --- | --- |",
            "| good | doc.md#1-a-section-issue-9 | fine | `tests/test_x.py::test_real`<br>"
            "tests/test_x.py::TestK::test_m, bench:doc.md#doc |",
            "| good | doc.md#not-a-heading | repeated id, fenced heading | tests/test_x.py::test_gone |",
            "| Bad_Id | nowhere.md | missing file | tests/test_y.py::test_real |",
            "| badref | doc.md | bad references | tests/test_x.py::test_real[1]<br>bench:doc.md#nope<br>none |",
            "| empty | doc.md | |  |",
        ]
    )
    header, rows = parse_table(table)
    assert header == COLUMNS
    assert cell_entries(rows[0]["test"]) == [
        "tests/test_x.py::test_real",
        "tests/test_x.py::TestK::test_m",
        "bench:doc.md#doc",
    ]
    found = problems(rows, tmp_path)
    assert not [p for p in found if p.startswith("good: tests/test_x.py::test_real")]
    expected = [
        "'good': the id is not unique",
        "good: where 'doc.md#not-a-heading': no heading with that anchor",
        "good: tests/test_x.py::test_gone: no such test in tests/test_x.py",
        "'Bad_Id': the id is not a short slug",
        "Bad_Id: where 'nowhere.md' names no file",
        "Bad_Id: tests/test_y.py::test_real: no such test file",
        "badref: 'none' with tests beside it",
        "badref: 'tests/test_x.py::test_real[1]' is not a node id (tests/...py::[TestClass::]test_name)",
        "badref: bench:doc.md#nope: no heading with that anchor",
        "empty: no claim",
        "empty: no test",
    ]
    assert found == expected
    with pytest.raises(ValueError, match="5 cells, expected 4"):
        parse_table("| id | where | claim | test |\n| --- | --- | --- | --- |\n| a | b | c | d | e |\n")


def test_anchors_are_githubs() -> None:
    assert slug("Condition watchers (Airflow ≥ 3.0)") == "condition-watchers-airflow--30"
    assert slug("Every value, in order: `every_value=True`") == "every-value-in-order-every_valuetrue"
    assert (
        slug("16. 10,000 zero-worker waits over two triggerers")
        == "16-10000-zero-worker-waits-over-two-triggerers"
    )
    assert anchors("# A\n## A\n") == {"a", "a-1"}


def test_the_documented_guard_defaults_are_the_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """README/docs: unset, reschedule mode keeps 5 s between reschedules on Airflow 3 (0 on 2.11), and
    ``BackoffTrigger`` holds its event 5 s on Airflow 3; the behaviour itself is tested with patched values
    (tests/unit/sensors/test_sensor_reschedule.py, tests/unit/triggers/test_trigger_schedule.py)."""
    from airflow_smart_ext import compat
    from airflow_smart_ext.sensors import reschedule

    monkeypatch.delenv("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", raising=False)
    expected = 5.0 if compat.versions.AIRFLOW_V_3_0_PLUS else 0.0
    assert reschedule.min_gap_seconds() == expected == compat.rescheduling.RESCHEDULE_MIN_GAP_SECONDS
    assert expected == compat.deferral.TRIGGER_MIN_EVENT_DELAY_SECONDS
