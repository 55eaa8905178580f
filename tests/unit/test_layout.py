"""The deferrable wing's shape (issue 14): data flows one way — conditions <- sensors, conditions <- triggers."""

from __future__ import annotations

import subprocess
import sys


def _modules_after_import(module: str) -> set[str]:
    code = (
        f"import sys, {module}; from airflow_smart_ext.conditions import check_types; check_types(); "
        "print('\\n'.join(m for m in sys.modules if m.startswith('airflow_smart_ext')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_conditions_import_neither_sensors_nor_triggers() -> None:
    loaded = _modules_after_import("airflow_smart_ext.conditions")
    assert {"airflow_smart_ext.conditions.sensor", "airflow_smart_ext.conditions.sql"} <= loaded
    assert not {
        m for m in loaded if m.startswith(("airflow_smart_ext.sensors", "airflow_smart_ext.triggers"))
    }


def test_triggers_do_not_import_sensors() -> None:
    loaded = _modules_after_import("airflow_smart_ext.triggers")
    assert not {m for m in loaded if m.startswith("airflow_smart_ext.sensors")}


def test_check_types_are_discovered_from_their_modules() -> None:
    from airflow_smart_ext.conditions import check_types

    assert set(check_types()) == {"sensor", "sql"}


def test_no_trigger_or_condition_source_imports_sensors_even_lazily() -> None:
    """Import-time checks miss an import inside a function; read every import statement instead."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "airflow_smart_ext"
    offenders = []
    for folder in ("triggers", "conditions"):
        for path in sorted((package / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                offenders += [
                    f"{path.name}:{node.lineno} {name}"
                    for name in names
                    if name.startswith("airflow_smart_ext.sensors")
                ]
    assert offenders == []
