"""Deferrable backoff trigger: runs a sensor's backoff schedule in the triggerer and shares identical checks."""

from __future__ import annotations

from airflow_smart_ext.triggers.worker_first import BackoffTrigger

__all__ = ["BackoffTrigger"]
