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
