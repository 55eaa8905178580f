"""### Business-day partitions: NYSE trade files keyed by trading day, and a DAG downstream of them

``nyse_trades_by_trading_day``: ``BusinessDaysTimetable(market="NYSE", lag=1, partitioned=True)`` - one run
per NYSE trading day D, at 06:00 New York time on the next trading day (T+1, when the day's files are
complete). Each run's ``partition_key`` is D (``"2026-07-02"``), its ``partition_date`` D 00:00 New York;
holidays and weekends have no partition: Juneteenth (Fri 2026-06-19) is outside this window, Independence Day
observed (Fri 2026-07-03) and the weekend are skipped, so 07-02's run starts Mon 07-06 06:00.

``nyse_trades_report``: scheduled on the trades asset's partitions through Airflow's
``StartOfDayMapper`` (our keys are dates, so any temporal mapper reads them): one run per trading day, with
the same key and date.

Partitions need Airflow >= 3.2. On older Airflow the pair runs unpartitioned (``partitioned=`` follows
``PARTITIONS_SUPPORTED``; the report is triggered by the dataset instead); asking for
``partitioned=True`` there fails at DAG parse, naming 3.2.
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow import DAG

from airflow_smart_ext.compat.locations import Asset, task
from airflow_smart_ext.compat.partitions import PARTITIONS_SUPPORTED
from airflow_smart_ext.timetables import BusinessDaysTimetable

NEW_YORK = "America/New_York"

nyse_trades = Asset("file:///tmp/airflow-smart-ext/nyse-trades")  # 2.11 Dataset: the URI only

with DAG(
    dag_id="nyse_trades_by_trading_day",
    schedule=BusinessDaysTimetable(
        market="NYSE",
        lag=1,
        delay=dt.timedelta(hours=6),
        timezone=NEW_YORK,
        partitioned=PARTITIONS_SUPPORTED,
    ),
    start_date=pendulum.datetime(2026, 6, 29, tz=NEW_YORK),
    end_date=pendulum.datetime(2026, 7, 7, tz=NEW_YORK),
    catchup=True,
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables", "partitions"],
    doc_md=__doc__,
):

    @task(outlets=[nyse_trades])
    def load_trades(dag_run=None):
        print(f"loading the trades of trading day {getattr(dag_run, 'partition_key', None)}")

    load_trades()

if PARTITIONS_SUPPORTED:
    from airflow.sdk import PartitionedAssetTimetable, StartOfDayMapper

    report_schedule = PartitionedAssetTimetable(
        assets=nyse_trades,
        default_partition_mapper=StartOfDayMapper(timezone=NEW_YORK, input_format="%Y-%m-%d"),
    )
else:
    report_schedule = [nyse_trades]

with DAG(
    dag_id="nyse_trades_report",
    schedule=report_schedule,
    start_date=pendulum.datetime(2026, 6, 29, tz=NEW_YORK),
    max_active_runs=2,
    tags=["airflow-smart-ext", "timetables", "partitions"],
    doc_md=__doc__,
):

    @task
    def report(dag_run=None):
        key = getattr(dag_run, "partition_key", None)
        print(f"report for trading day {key} (partition date {getattr(dag_run, 'partition_date', None)})")

    report()
