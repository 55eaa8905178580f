"""Fixtures of the view tests: DAGs parsed and stored in a real metadata DB as Airflow stores them."""

from __future__ import annotations

import datetime
import importlib
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_smart_ext import compat

UTC = datetime.timezone.utc

# --- the metadata DB ------------------------------------------------------------------------------------------

DAG_FILE = """
import datetime
from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.sensors import BackoffSqlSensor
from airflow_smart_ext.timetables import BusinessDaysTimetable, DueTime

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2.11
    from airflow import DAG

START = datetime.datetime(2026, 11, 24, 5, tzinfo=datetime.timezone.utc)
with DAG("cal_business", schedule=BusinessDaysTimetable(BusinessCalendar(country="US"),
         timezone="America/New_York", delay=datetime.timedelta(hours=6)), start_date=START, catchup=False):
    BackoffSqlSensor(task_id="trades", conn_id="c", sql="SELECT 1", mode="reschedule",
                     due=DueTime("09:30", market="NYSE", timezone="America/New_York"))
    BackoffSqlSensor.partial(task_id="prices", conn_id="c", mode="reschedule",
                             due=DueTime("07:00", country="GB", timezone="Europe/London", lag=1)
                             ).expand(sql=["SELECT 1", "SELECT 2"])
    BackoffSqlSensor(task_id="no_due", conn_id="c", sql="SELECT 1", mode="reschedule")
    BackoffSqlSensor.partial(task_id="fx", conn_id="c", sql="SELECT 1", mode="reschedule").expand(
        due=[DueTime("08:00", timezone="Europe/London"), DueTime("16:00", timezone="Asia/Tokyo")])
with DAG("cal_cron", schedule="@daily", start_date=START, catchup=False,
         dagrun_timeout=datetime.timedelta(minutes=90)):
    pass
"""


def _store_dags_3(folder: Path) -> None:
    """Parse ``folder`` and store its DAGs in bundle ``dags-folder`` as the DAG processor does. The DagBag is in
    ``airflow.dag_processing.dagbag`` from 3.2, in ``airflow.models.dagbag`` on 3.0/3.1; 3.0 stores with
    ``DagBag.sync_to_db``, 3.1+ with ``sync_bag_to_db``."""
    where = "airflow.dag_processing.dagbag" if compat.versions.AIRFLOW_V_3_2_PLUS else "airflow.models.dagbag"
    module = importlib.import_module(where)
    bag = module.DagBag(dag_folder=str(folder), bundle_path=folder)
    assert not bag.import_errors, bag.import_errors
    if compat.versions.AIRFLOW_V_3_1_PLUS:
        module.sync_bag_to_db(bag, "dags-folder", None)
    else:
        bag.sync_to_db("dags-folder", None)


@pytest.fixture
def calendars_db(airflow_db: Any, tmp_path: Path) -> Iterator[None]:
    """Two DAGs parsed and stored as Airflow stores them (one with our timetable) and three runs of ours."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete, insert

    (tmp_path / "cal_dags.py").write_text(textwrap.dedent(DAG_FILE))
    if compat.versions.AIRFLOW_V_3_0_PLUS:
        from airflow.dag_processing.bundles.manager import DagBundlesManager

        DagBundlesManager().sync_bundles_to_db()
        _store_dags_3(tmp_path)
    else:
        from airflow.models.dagbag import DagBag as LegacyDagBag

        legacy = LegacyDagBag(dag_folder=str(tmp_path))
        assert not legacy.import_errors, legacy.import_errors
        legacy.sync_to_db()  # type: ignore[attr-defined,unused-ignore]
    with create_session() as session:
        for index, state in enumerate(("success", "failed", "running")):
            start = datetime.datetime(2026, 11, 16 + index, 5, tzinfo=UTC)
            row = {
                "dag_id": "cal_business",
                "run_id": f"scheduled__{index}",
                "run_type": "scheduled",
                "state": state,
                compat.metadata_db.dag_run_logical_date().key: start,
                "data_interval_start": start,
                "data_interval_end": start + datetime.timedelta(days=1),
            }
            if "run_after" in DagRun.__table__.c:
                row["run_after"] = start + datetime.timedelta(days=1, hours=6)
            session.execute(insert(DagRun.__table__).values(**row))
    yield
    with create_session() as session:
        session.execute(delete(DagRun.__table__).where(DagRun.dag_id == "cal_business"))
