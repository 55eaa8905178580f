"""The two paths a deferrable wait takes through the triggerer, named by the trigger class that serves it (a
trigger row's classpath says which). Rows written by earlier releases keep their classpaths and resume:
``PATH_OF_CLASSPATH`` knows those too (``triggers/start.py`` keeps the old import path working).

* **worker-first**: a worker runs check #0 and defers to ``BackoffTrigger``;
* **zero-worker**: the scheduler starts the sensor in the triggerer (``BackoffStartTrigger``), no worker at
  all on success.
"""

from __future__ import annotations

WORKER_FIRST = "worker-first"
ZERO_WORKER = "zero-worker"

BACKOFF_TRIGGER = "airflow_smart_ext.triggers.backoff.BackoffTrigger"
START_TRIGGER = "airflow_smart_ext.triggers.zero_worker.BackoffStartTrigger"
#: where release 0.1.0 kept the zero-worker trigger (its rows and serialized DAGs name it)
PREVIOUS_START_TRIGGER = "airflow_smart_ext.triggers.start.BackoffStartTrigger"

PATH_OF_CLASSPATH = {
    BACKOFF_TRIGGER: WORKER_FIRST,
    START_TRIGGER: ZERO_WORKER,
    PREVIOUS_START_TRIGGER: ZERO_WORKER,
}
