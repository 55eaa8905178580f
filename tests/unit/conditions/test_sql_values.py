"""Check type ``"sql_values"`` (a watcher's ``every_value=True`` on SQL): every row of a bound query, against a
real SQLite file; the rows read per check are bounded."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from airflow_smart_ext.conditions import sql_values, validate_check_spec
from tests.unit.clock import FakeClock


def values_check(**overrides: Any) -> dict[str, Any]:
    check = {
        "type": "sql_values",
        "conn_id": "smart_ext_unit_sqlite",
        "sql": "SELECT name, state FROM partitions WHERE name > :after ORDER BY name",
        "parameters": {"after": "p0"},
        "hook_params": None,
        "selector": None,
    }
    check.update(overrides)
    return check


def second_cell(row: Any) -> Any:
    return row[1]


async def test_the_rows_after_the_bound_value_at_most_max_rows_per_check(
    clock: FakeClock, sqlite_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with sqlite3.connect(sqlite_conn) as db:
        db.executemany("INSERT INTO partitions VALUES (?, ?)", [(f"p{n}", f"s{n}") for n in range(4)])
    monkeypatch.setattr(sql_values, "MAX_ROWS_PER_CHECK", 2)
    kind = sql_values.SqlValuesCheck()
    rows = await kind.shared_check(values_check()).run({})
    assert rows == [("p1", "s1"), ("p2", "s2")]  # p0 is not after "p0"; p3 waits for the next check
    outcome = (await kind.interpreter(values_check()))(rows)
    assert (outcome.status, outcome.value) == ("positive", ["p1", "p2"])
    selected = (await kind.interpreter(values_check(selector=f"{__name__}.second_cell")))(rows)
    assert selected.value == ["s1", "s2"]


# (case, rows, the outcome's status and value)
INTERPRETED = [
    ("no rows: not yet", [], "negative", None),
    ("a NULL is no value", [(None,), ("p1",)], "positive", ["p1"]),
    ("only NULLs: not yet", [(None,)], "negative", None),
]


@pytest.mark.parametrize(
    ("rows", "status", "value"), [c[1:] for c in INTERPRETED], ids=[c[0] for c in INTERPRETED]
)
def test_each_row_is_one_value(rows: list[Any], status: str, value: Any) -> None:
    outcome = sql_values.SqlValuesInterpreter(values_check())(rows)
    assert (outcome.status, outcome.value) == (status, value)


def test_a_selector_that_raises_is_a_check_error() -> None:
    outcome = sql_values.SqlValuesInterpreter(values_check(selector=f"{__name__}.second_cell"))([("p1",)])
    assert outcome.status == "error"
    assert "IndexError" in outcome.message


# (case, spec overrides, the words of the error)
BAD_SPECS = [
    ("blank sql", {"sql": "   "}, "check['sql'] must be a non-empty string"),
    ("no connection", {"conn_id": ""}, "check['conn_id'] must be a non-empty string"),
    (
        "a selector that is no dotted path",
        {"selector": "first"},
        "check['selector'] must be None or the dotted",
    ),
]


@pytest.mark.parametrize(("overrides", "words"), [c[1:] for c in BAD_SPECS], ids=[c[0] for c in BAD_SPECS])
def test_bad_specs_are_refused(overrides: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        validate_check_spec(values_check(**overrides))
