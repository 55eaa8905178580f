"""Backoff-aware sensors: swap ``BaseSensorOperator`` for :class:`BackoffSensor`; SQL: :class:`BackoffSqlSensor`."""

from __future__ import annotations

from airflow_smart_ext.sensors.base import BackoffSensor
from airflow_smart_ext.sensors.sql import BackoffSqlSensor

__all__ = ["BackoffSensor", "BackoffSqlSensor"]
