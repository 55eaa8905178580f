"""Which Airflow line is running: the flags every other compat module branches on (2.11 and 3.0-3.3)."""

from __future__ import annotations

from airflow import __version__ as AIRFLOW_VERSION_STRING
from packaging.version import Version

__all__ = [
    "AIRFLOW_BASE_VERSION",
    "AIRFLOW_VERSION_STRING",
    "AIRFLOW_V_3_0_PLUS",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_2_PLUS",
    "AIRFLOW_V_3_3_PLUS",
]

#: The running Airflow's version without pre-release or local parts (``3.3.2rc1`` -> ``3.3.2``).
AIRFLOW_BASE_VERSION = Version(Version(AIRFLOW_VERSION_STRING).base_version)

AIRFLOW_V_3_0_PLUS = Version("3.0.0") <= AIRFLOW_BASE_VERSION
AIRFLOW_V_3_1_PLUS = Version("3.1.0") <= AIRFLOW_BASE_VERSION
AIRFLOW_V_3_2_PLUS = Version("3.2.0") <= AIRFLOW_BASE_VERSION
AIRFLOW_V_3_3_PLUS = Version("3.3.0") <= AIRFLOW_BASE_VERSION
