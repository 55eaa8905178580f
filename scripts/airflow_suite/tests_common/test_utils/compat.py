"""Names Airflow's tests import from ``tests_common.test_utils.compat``."""

from __future__ import annotations

from tests_common.test_utils.version_compat import timezone

__all__ = ["timezone"]
