"""Live partition test DAGs (tests/integration/test_partitions_live.py), Airflow >= 3.2 only.

``tt_partitions_live_upstream``: NYSE business days of February 2026 (Presidents' Day on Mon 16th: 19 trading
days) as partitions, catchup over the month; its task produces an asset. ``tt_partitions_live_downstream``:
scheduled on that asset's partitions through Airflow's StartOfDayMapper; its EmptyOperator is completed by the
scheduler (no worker), so only the 19 upstream tasks cost a worker. Both start paused (the harness's default);
the test unpauses them. On Airflow < 3.2 this file defines no DAG (partitions do not exist there; the test
checks the parse-time error with a separate file instead).
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow import DAG

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.compat.partitions import PARTITIONS_SUPPORTED
from airflow_smart_ext.timetables import BusinessDaysTimetable

NY = "America/New_York"
# a task's DAG-file parse can time out on a loaded machine: retry it rather than fail the partition
RETRIES = {"retries": 3, "retry_delay": dt.timedelta(seconds=2)}

if PARTITIONS_SUPPORTED:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import Asset, PartitionedAssetTimetable, StartOfDayMapper

    nyse_closes = Asset(name="tt_partitions_live_nyse_closes", uri="file:///tmp/tt_partitions_live/closes")

    with DAG(
        dag_id="tt_partitions_live_upstream",
        schedule=BusinessDaysTimetable(market="NYSE", timezone=NY, partitioned=True),
        start_date=pendulum.datetime(2026, 2, 1, tz=NY),
        end_date=pendulum.datetime(2026, 2, 28, tz=NY),
        catchup=True,
        max_active_runs=4,
        default_args=RETRIES,
        tags=["airflow-smart-ext", "integration"],
    ):

        @task(outlets=[nyse_closes])
        def produce() -> None:
            pass

        produce()

    with DAG(
        dag_id="tt_partitions_live_downstream",
        schedule=PartitionedAssetTimetable(
            assets=nyse_closes,
            default_partition_mapper=StartOfDayMapper(timezone=NY, input_format="%Y-%m-%d"),
        ),
        catchup=False,
        max_active_runs=8,
        default_args=RETRIES,
        tags=["airflow-smart-ext", "integration"],
    ):
        EmptyOperator(task_id="consume")
