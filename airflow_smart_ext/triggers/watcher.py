"""The condition watcher's classpath: ``airflow_smart_ext.triggers.watcher.ConditionWatcher`` is what asset watchers'
trigger rows and serialized DAGs name (release 0.1.0's and this one's alike: ``wait_model/deferral_paths.py``). The
trigger lives in ``triggers/condition_watcher.py``."""

from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher

__all__ = ["ConditionWatcher"]
