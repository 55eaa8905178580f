"""Registration: Airflow sees our plugin (timetables) and our provider; and what a user sees without it.

The last test documents the failure mode quoted in the README: a component on which the package is importable
but its ``airflow.plugins`` entry point is not visible (e.g. the package copied onto ``PYTHONPATH`` or into the
DAGs folder instead of being pip-installed) cannot serialize a DAG that uses one of our timetables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from airflow_harness.env import AirflowEnv
from airflow_smart_ext.timetables import TIMETABLE_CLASSES

DISTRIBUTION = "airflow-smart-ext"
PLUGIN_NAME = "airflow_smart_ext"
TIMETABLE_PATHS = {f"{cls.__module__}.{cls.__qualname__}" for cls in TIMETABLE_CLASSES}


def _json_output(stdout: str) -> Any:
    """The JSON document of an ``airflow ... -o json`` call (log lines may precede it)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(("[", "{")):
            return json.loads(line)
    raise AssertionError(f"no JSON in output:\n{stdout[-3000:]}")


def test_airflow_plugins_lists_our_timetables(airflow_env: AirflowEnv) -> None:
    plugins = _json_output(airflow_env.airflow_cli("plugins", "-o", "json").stdout)
    ours = [p for p in plugins if p["name"] == PLUGIN_NAME]
    assert len(ours) == 1, plugins
    assert set(ours[0]["timetables"]) == TIMETABLE_PATHS
    assert len(TIMETABLE_PATHS) == 4
    # Loaded through the installed distribution's entry point, not from a plugins folder.
    assert "airflow.plugins" in ours[0]["source"] and DISTRIBUTION in ours[0]["source"], ours[0]


def test_airflow_providers_list_shows_package(airflow_env: AirflowEnv) -> None:
    import airflow_smart_ext

    providers = _json_output(airflow_env.airflow_cli("providers", "list", "-o", "json").stdout)
    ours = [p for p in providers if p["package_name"] == DISTRIBUTION]
    assert len(ours) == 1, [p["package_name"] for p in providers]
    assert ours[0]["version"] == airflow_smart_ext.__version__


# Runs the real `airflow` CLI with our distribution hidden from the entry-point scan (both the stdlib
# importlib.metadata and the importlib_metadata backport Airflow uses on Python < 3.12): the package stays
# importable, only the plugin registration is missing.
_WITHOUT_PLUGIN = textwrap.dedent(
    """
    import sys
    import importlib.metadata

    modules = [importlib.metadata]
    try:
        import importlib_metadata
        modules.append(importlib_metadata)
    except ImportError:
        pass
    for module in modules:
        def distributions(_original=module.distributions, **kwargs):
            return [d for d in _original(**kwargs) if (d.metadata["Name"] or "").lower() != "airflow-smart-ext"]
        module.distributions = distributions

    from airflow.__main__ import main

    sys.argv = ["airflow", *sys.argv[1:]]
    sys.exit(main())
    """
)

_UNREGISTERED_DAG = textwrap.dedent(
    """
    import datetime as dt

    from airflow import DAG

    from airflow_smart_ext.timetables import DelayedDailyTimetable

    with DAG(
        dag_id="tt_unregistered_probe",
        schedule=DelayedDailyTimetable(delay=dt.timedelta(hours=2), timezone="Europe/Berlin"),
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
    ):
        pass
    """
)


def _run_without_plugin(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__DATABASE__LOAD_DEFAULT_CONNECTIONS": "False",
            "PYTHONWARNINGS": "ignore",
        }
    )
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_PLUGIN, *args],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


def test_without_plugin_registration_dag_fails_to_serialize(tmp_path: Path) -> None:
    """What a user sees when a component has the package but not its plugin entry point."""
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "tt_unregistered_probe.py").write_text(_UNREGISTERED_DAG)

    migrate = _run_without_plugin(tmp_path, "db", "migrate")
    assert migrate.returncode == 0, (migrate.stdout[-3000:], migrate.stderr[-3000:])

    # `airflow dags reserialize` parses and serializes like the dag-processor does.
    result = _run_without_plugin(tmp_path, "dags", "reserialize")
    output = result.stdout + result.stderr
    expected = (
        "Failed to serialize DAG 'tt_unregistered_probe': Timetable class "
        "'airflow_smart_ext.timetables.delayed_daily.DelayedDailyTimetable' is not registered"
    )
    assert expected in output, output[-5000:]
