"""Business-day partitions in a real Airflow (3.3; partitions do not exist before 3.2).

* tests/integration/dags/tt_partitions_live.py: an NYSE-partitioned upstream DAG catches up over February 2026
  and produces an asset; the downstream DAG scheduled on that asset's partitions (StartOfDayMapper) gets
  exactly the NYSE trading days of the month as partition keys (python-holidays computes them here,
  independently), with partition dates at New York midnight and no data interval;
* backfill (dry run) of June 2026 lists exactly June's trading days; a manual run keyed on a holiday is
  refused with the reason, one keyed on a trading day gets its partition date;
* 2.11: a DAG file asking for partitions shows an import error naming Airflow 3.2.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import holidays
import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import AirflowEnvError

NY = "America/New_York"
UPSTREAM, DOWNSTREAM = "tt_partitions_live_upstream", "tt_partitions_live_downstream"
UTC = dt.timezone.utc
# the first test also waits for the month's catch-up (19 worker tasks; ~1-2 min on an idle 2-core machine)
pytestmark = pytest.mark.timeout(900)


def nyse_trading_days(year: int, month: int) -> list[str]:
    closed = holidays.financial_holidays("NYSE", years=year)
    day, out = dt.date(year, month, 1), []
    while day.month == month:
        if day.weekday() < 5 and day not in closed:
            out.append(day.isoformat())
        day += dt.timedelta(days=1)
    return out


def ny_midnight(key: str) -> dt.datetime:
    return dt.datetime.combine(dt.date.fromisoformat(key), dt.time(0), tzinfo=ZoneInfo(NY)).astimezone(UTC)


def partition_runs(env: AirflowEnv, dag_id: str) -> list[dict[str, Any]]:
    return env.query_dicts(
        "SELECT run_id, run_type, state, partition_key, partition_date, logical_date, data_interval_start "
        "FROM dag_run WHERE dag_id = %s ORDER BY partition_key, id",
        (dag_id,),
    )


def wait_done(env: AirflowEnv, dag_id: str, count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        runs = [r for r in partition_runs(env, dag_id) if r["run_type"] != "manual"]
        if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs):
            return runs
        if time.monotonic() > deadline:
            raise AirflowEnvError(f"{dag_id}: {len(runs)} of {count} runs done within {timeout}s: {runs}")
        time.sleep(1)


@pytest.fixture(scope="module")
def partitioned_month(airflow_env: AirflowEnv) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if not airflow_env.is_airflow3:
        pytest.skip(
            "partitioned runs need Airflow >= 3.2; test_partitions_refused_at_parse_on_2_11 covers 2.11"
        )
    expected = nyse_trading_days(2026, 2)
    for dag_id in (DOWNSTREAM, UPSTREAM):
        airflow_env.wait_for_dag(dag_id)
        airflow_env.unpause(dag_id)
    upstream = wait_done(airflow_env, UPSTREAM, len(expected), timeout=480)
    downstream = wait_done(airflow_env, DOWNSTREAM, len(expected), timeout=120)
    return upstream, downstream


def test_upstream_runs_are_the_nyse_trading_days_of_the_month(partitioned_month: Any) -> None:
    upstream, _ = partitioned_month
    expected = nyse_trading_days(2026, 2)
    assert "2026-02-16" not in expected  # Presidents' Day: the month has a holiday on a weekday
    assert [r["partition_key"] for r in upstream] == expected
    for run in upstream:
        assert (run["run_type"], run["state"]) == ("scheduled", "success"), run
        assert run["partition_date"] == ny_midnight(run["partition_key"]), run
        assert run["logical_date"] is None and run["data_interval_start"] is None, run


def test_downstream_asset_partitions_are_exactly_the_nyse_trading_days(partitioned_month: Any) -> None:
    _, downstream = partitioned_month
    assert [r["partition_key"] for r in downstream] == nyse_trading_days(2026, 2)
    for run in downstream:
        assert (run["run_type"], run["state"]) == ("asset_triggered", "success"), run
        # StartOfDayMapper(timezone=NY) resolves our key to the same instant our partition date has
        assert run["partition_date"] == ny_midnight(run["partition_key"]), run


def test_backfill_dry_run_lists_the_trading_days(partitioned_month: Any, airflow_env: AirflowEnv) -> None:
    body = {"dag_id": UPSTREAM, "from_date": "2026-06-01T00:00:00Z", "to_date": "2026-06-30T00:00:00Z"}
    planned = airflow_env.api("POST", "/api/v2/backfills/dry_run", body)["backfills"]
    assert "2026-06-19" not in nyse_trading_days(2026, 6)  # Juneteenth
    assert [p["partition_key"] for p in planned] == nyse_trading_days(2026, 6)
    assert all(p["logical_date"] is None for p in planned)


def test_manual_runs_with_a_key(partitioned_month: Any, airflow_env: AirflowEnv) -> None:
    with pytest.raises(AirflowEnvError) as refused:
        airflow_env.api(
            "POST", f"/api/v2/dags/{UPSTREAM}/dagRuns", {"logical_date": None, "partition_key": "2026-07-03"}
        )
    assert "400" in str(refused.value) and "Independence Day" in str(refused.value), refused.value
    run = airflow_env.api(
        "POST", f"/api/v2/dags/{UPSTREAM}/dagRuns", {"logical_date": None, "partition_key": "2026-08-03"}
    )
    assert run["partition_key"] == "2026-08-03"
    stored = [r for r in partition_runs(airflow_env, UPSTREAM) if r["run_id"] == run["dag_run_id"]]
    assert stored[0]["partition_date"] == ny_midnight("2026-08-03")


REFUSED_DAG_FILE = """
import pendulum
from airflow import DAG
from airflow_smart_ext.timetables import BusinessDaysTimetable

with DAG(
    dag_id="tt_partitions_refused",
    schedule=BusinessDaysTimetable(market="NYSE", partitioned=True),
    start_date=pendulum.datetime(2026, 7, 1, tz="UTC"),
):
    pass
"""


def test_partitions_refused_at_parse_on_2_11(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    if airflow_env.is_airflow3:
        pytest.skip("Airflow 3.3 has partitions (the tests above); this checks the error of Airflow < 3.2")
    source = tmp_path / "tt_partitions_refused.py"
    source.write_text(REFUSED_DAG_FILE)
    message = airflow_env.import_error_of(source, "tt_partitions_refused")
    assert "partitioned: partitioned runs need Airflow >= 3.2" in message, message
    assert f"this is Airflow {airflow_env.airflow_version}" in message, message
