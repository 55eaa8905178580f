"""What a 2.11 user sees (issue 34 part 5): docs/watchers.md's DAG shape, run as written on 2.11, fails with the
error the docs name; where our import runs first, the first error is ours, naming 3.0 and what to use instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_smart_ext import compat

pytestmark = pytest.mark.skipif(
    compat.asset_watchers.ASSET_WATCHERS_SUPPORTED,
    reason="what Airflow 2.11 (no asset watchers) does with a watcher DAG",
)

DOCS = (Path(__file__).resolve().parents[2] / "docs" / "watchers.md").read_text()
OUR_IMPORT = "from airflow_smart_ext.watchers import ConditionWatcher, sql_condition\n"


def documented_dag() -> str:
    """The first Python block of docs/watchers.md: the shape a user copies."""
    match = re.search(r"```python\n(.*?)```", DOCS, re.S)
    assert match is not None
    return match.group(1)


def first_error(source: str) -> BaseException:
    with pytest.raises(BaseException) as raised:
        exec(compile(source, "dags/orders.py", "exec"), {"__name__": "orders"})
    return raised.value


def test_the_documented_dag_fails_with_the_error_the_docs_name() -> None:
    source = documented_dag()
    assert source.index("from airflow.sdk import") < source.index(OUR_IMPORT)  # as the docs show it
    error = first_error(source)
    assert isinstance(error, ModuleNotFoundError) and error.name == "airflow.sdk"
    assert f"```\n{type(error).__name__}: {error}\n```" in DOCS


def test_where_our_import_runs_first_the_first_error_is_ours() -> None:
    source = documented_dag()
    error = first_error(OUR_IMPORT + source.replace(OUR_IMPORT, ""))
    assert isinstance(error, ImportError) and isinstance(
        error, compat.asset_watchers.AssetWatchersUnsupported
    )
    message = str(error)
    assert message.startswith("airflow_smart_ext.watchers.ConditionWatcher needs Airflow >= 3.0.0")
    assert "deferrable sensor" in message and "BackoffSqlSensor(..., deferrable=True)" in message
    # The docs quote it: its start and its advice, word for word (the docs wrap the lines).
    quoted = " ".join(DOCS.split())
    assert message.split(" (")[0] in quoted
    assert message.split("On this version ")[1] in quoted


def test_the_conditions_still_import_on_2_11() -> None:
    """Only the watcher is refused: the condition builders share the sensors' rules (tests/unit/wait_model)."""
    from airflow_smart_ext.watchers import sql_condition

    assert sql_condition("warehouse", "SELECT 1")["type"] == "sql"
