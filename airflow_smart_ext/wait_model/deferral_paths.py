"""The two paths a deferrable wait takes through the triggerer, named by the trigger class that serves it (a
trigger row's classpath says which). ``PATH_OF_CLASSPATH`` knows every classpath a row of ours may carry.

* **worker-first**: a worker runs check #0 and defers to ``BackoffTrigger``;
* **zero-worker**: the scheduler starts the sensor in the triggerer (``BackoffStartTrigger``), no worker at
  all on success.
"""

from __future__ import annotations

WORKER_FIRST = "worker-first"
ZERO_WORKER = "zero-worker"

#: What worker-first rows name. The trigger lives in ``triggers/worker_first.py``; rows keep release 0.1.0's path
#: (``triggers/backoff.py`` re-exports it), for the same reason as the start trigger's below.
BACKOFF_TRIGGER = "airflow_smart_ext.triggers.backoff.BackoffTrigger"
#: The trigger's own import path (a row naming it would need this release's triggerer; none is written).
BACKOFF_TRIGGER_MODULE_PATH = "airflow_smart_ext.triggers.worker_first.BackoffTrigger"
#: What zero-worker rows and serialized DAGs name. The trigger lives in ``triggers/zero_worker.py``; rows keep
#: release 0.1.0's path (``triggers/start.py`` re-exports it), so that during a rolling upgrade or a rollback a
#: triggerer of either release runs a row a scheduler of the other wrote.
START_TRIGGER = "airflow_smart_ext.triggers.start.BackoffStartTrigger"
#: The trigger's own import path (a row naming it would need this release's triggerer; none is written).
START_TRIGGER_MODULE_PATH = "airflow_smart_ext.triggers.zero_worker.BackoffStartTrigger"

#: A condition watcher's trigger (an asset watcher's row: no task instance, ``asset_watcher`` links it). It lives
#: in ``triggers/condition_watcher.py``; rows keep release 0.1.0's path (``triggers/watcher.py`` re-exports it).
CONDITION_WATCHER = "airflow_smart_ext.triggers.watcher.ConditionWatcher"

PATH_OF_CLASSPATH = {
    BACKOFF_TRIGGER: WORKER_FIRST,
    BACKOFF_TRIGGER_MODULE_PATH: WORKER_FIRST,
    START_TRIGGER: ZERO_WORKER,
    START_TRIGGER_MODULE_PATH: ZERO_WORKER,
}
