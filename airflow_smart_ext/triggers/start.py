"""The zero-worker trigger's classpath: ``airflow_smart_ext.triggers.start.BackoffStartTrigger`` is what trigger
rows and serialized DAGs name (release 0.1.0's and this one's alike: ``wait_model/deferral_paths.py`` says why). The trigger
lives in ``triggers/zero_worker.py``."""

from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger

__all__ = ["BackoffStartTrigger"]
