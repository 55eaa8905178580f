"""Airflow version flags and ``timezone`` as Airflow's tests import them."""

from __future__ import annotations

from airflow import __version__
from packaging.version import Version

_BASE = Version(Version(__version__).base_version)
AIRFLOW_V_3_0_PLUS = Version("3.0.0") <= _BASE
AIRFLOW_V_3_1_PLUS = Version("3.1.0") <= _BASE
AIRFLOW_V_3_2_PLUS = Version("3.2.0") <= _BASE
AIRFLOW_V_3_3_PLUS = Version("3.3.0") <= _BASE

if AIRFLOW_V_3_0_PLUS:
    from airflow.sdk import timezone
else:
    from airflow.utils import timezone  # type: ignore[no-redef]

__all__ = ["AIRFLOW_V_3_0_PLUS", "AIRFLOW_V_3_1_PLUS", "AIRFLOW_V_3_2_PLUS", "AIRFLOW_V_3_3_PLUS", "timezone"]
