"""### Late data: the NYSE trades file is due at 09:30 New York, told once, then waited for

One run per NYSE trading day D (``BusinessDaysTimetable``). The run waits for D's trades file, which is due at
the first NYSE session's 09:30 New York at or after the end of D's data interval (T+0, ``DueTime``): Tuesday
2024-11-26's file is due Wednesday at 09:30; Wednesday 27th's on Friday 29th, since the exchange is closed
for Thanksgiving.

The first check scheduled at or after the due time that finds no file says once that the wait is late: a
WARNING line ``Late: ... was due at ... and is ... late``, the ``smart_ext.sensor.late`` metric and
``on_late``. The wait then goes on to its own timeout. Here ``on_late`` logs; in production pass a notifier,
such as ``SlackNotifier(...)`` or ``SmtpNotifier(...)`` (docs/late-data.md).

These runs are from 2024, so each one is late from its first check. ``deliver`` makes the file appear about
8 s later, and each wait succeeds on try 1.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow import DAG
from sensor_common import RUN_DIR_TEMPLATE, FileArrivedSensor, deliver_later

from airflow_smart_ext.compat.locations import task
from airflow_smart_ext.timetables import BusinessDaysTimetable, DueTime

NEW_YORK = "America/New_York"
TRADES_FILE = RUN_DIR_TEMPLATE + "/trades.csv"


def tell_the_desk(context: Any) -> None:
    """Stands in for a notifier: ``context["late"]`` says which wait, its due time and how late it is."""
    late = context["late"]
    logging.getLogger(__name__).warning(
        "The trades file of %s is %s late (due %s)", context["ds"], late["late_by"], late["due"]
    )


with DAG(
    dag_id="late_trades_nyse",
    schedule=BusinessDaysTimetable(market="NYSE", timezone=NEW_YORK),
    start_date=pendulum.datetime(2024, 11, 26, tz=NEW_YORK),
    end_date=pendulum.datetime(2024, 11, 28, 12, tz=NEW_YORK),
    catchup=True,
    max_active_runs=1,
    tags=["airflow-smart-ext", "sensors", "late-data"],
    doc_md=__doc__,
):

    @task
    def deliver(path: str) -> str:
        deliver_later(8, "file", path, "symbol,qty,price\nIBM,100,221.5\n")
        return path

    deliver(TRADES_FILE) >> FileArrivedSensor(
        task_id="trades_file",
        path=TRADES_FILE,
        mode="reschedule",
        poke_interval=3,
        max_wait=10,
        timeout=300,
        due=DueTime("09:30", market="NYSE", timezone=NEW_YORK),
        on_late=tell_the_desk,
    )
