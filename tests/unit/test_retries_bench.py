"""Smoke test of bench/bench_retries.py: it runs at tiny size on the installed Airflow and fills its tables.

No numbers are asserted except the two that hold by construction of the HTTP-aware rules (0 retries on 4xx,
0 calls inside a Retry-After window); the benchmark itself reports the rest in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_smart_ext.compat.retry_policies import RETRY_POLICIES_SUPPORTED

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.skipif(not RETRY_POLICIES_SUPPORTED, reason="BackoffRetryPolicy needs Airflow >= 3.3.0")
def test_bench_retries_runs_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    sys.modules.pop("bench_retries", None)
    import bench_retries

    result = bench_retries.run(True)
    assert result.tables and all(table.rows for table in result.tables)
    goals = {goal.text: goal for goal in result.goals}
    assert goals["(b) 0 retries on errors that cannot succeed (4xx)"].met is True
    assert goals["(b) 0 calls inside a Retry-After window"].met is True
    assert len(result.goals) == 6
