"""The zero-worker trigger's import path in earlier releases: their trigger rows and serialized DAGs name
``airflow_smart_ext.triggers.start.BackoffStartTrigger`` and resume through it. The trigger lives in
``triggers/zero_worker.py``."""

from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger

__all__ = ["BackoffStartTrigger"]
