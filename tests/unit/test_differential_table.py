"""The differential matrix's tables (issue 23) are well-formed and docs/sensors.md shows the allowed
differences exactly as the matrix applies them (tests/integration/differential.py)."""

from __future__ import annotations

import pytest

from tests.integration import differential as df

SCRIPT_STEPS = set("FTXEPSHW")
ACTIONS = {None, "clear", "kill_triggerer"}


def test_docs_table_equals_the_allowed_differences() -> None:
    assert df.docs_table_in(df.DOCS_SENSORS.read_text()) == df.docs_rows()


@pytest.mark.parametrize("allowed", df.ALLOWED_DIFFERENCES, ids=lambda a: f"{a.field}")
def test_allowed_difference_names_real_cells(allowed: df.AllowedDifference) -> None:
    names = {s.name for s in df.SCENARIOS}
    assert allowed.field in df.FIELDS
    assert allowed.modes and set(allowed.modes) <= set(df.MODES) - {df.ORACLE}
    assert allowed.scenarios == ("*",) or set(allowed.scenarios) <= names
    assert len(allowed.reason) > 30 and "|" not in allowed.reason


@pytest.mark.parametrize("scenario", df.SCENARIOS, ids=lambda s: s.name)
def test_scenario_row_is_valid(scenario: df.Any) -> None:
    assert [s.name for s in df.SCENARIOS].count(scenario.name) == 1
    assert scenario.group in df.GROUPS and scenario.action in ACTIONS
    assert set(scenario.script) <= SCRIPT_STEPS and all(set(m) <= SCRIPT_STEPS for m in scenario.mapped)
    assert scenario.sensor in {"scripted", "sql"}
    # W (true once cleared) without a clear would wait to its timeout; a clear without W could end try 1 first
    assert ("W" in scenario.script) == (scenario.action == "clear")
