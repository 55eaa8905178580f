"""The worker-first trigger's classpath: ``airflow_smart_ext.triggers.backoff.BackoffTrigger`` is what trigger rows
name (release 0.1.0's and this one's alike: ``wait_model/deferral_paths.py`` says why). The trigger lives in
``triggers/worker_first.py``."""

from airflow_smart_ext.triggers.worker_first import BackoffTrigger

__all__ = ["BackoffTrigger"]
