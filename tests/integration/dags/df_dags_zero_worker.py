"""Differential matrix (issue 23): the zero_worker mode's DAGs, one per scenario group (see df_build)."""

from __future__ import annotations

from airflow import DAG
from df_build import GROUPS, add_sensors, dag_arguments

for group in GROUPS:
    with DAG(**dag_arguments(group, "zero_worker")):
        add_sensors(group, "zero_worker")
