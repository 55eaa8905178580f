"""Differential matrix (issue 23): the reschedule mode's DAGs, one per scenario group (see df_build)."""

from __future__ import annotations

import os

from airflow import DAG
from df_build import GROUPS, add_sensors, dag_arguments

from airflow_smart_ext import compat

if compat.versions.AIRFLOW_V_3_0_PLUS:
    # Reschedules at least 10 s apart (the default is 5 s), read by the task processes that parse this file.
    # The matrix starts ~70 task processes on 2 cores; the scheduler then drained a run's "success" event up
    # to 30 s late, after the next run was queued, and failed the task (apache/airflow #71172): a cell that
    # proves nothing. A longer gap means fewer process starts and a wider margin; the cells stay the same.
    os.environ.setdefault("AIRFLOW__SMART_EXT__RESCHEDULE_MIN_GAP_SECONDS", "10")

for group in GROUPS:
    with DAG(**dag_arguments(group, "reschedule")):
        add_sensors(group, "reschedule")
