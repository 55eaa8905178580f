"""What a wait is, for every face of it: the sensor (poke, reschedule), both triggers (worker-first and
zero-worker), the condition watcher and the Waits view / CLI.

* ``parameters``: the one table of accepted values (and messages) every entry point asks;
* ``timeline``: a wait's deadline, anchor, the time of check *k*, the next check and the checks made at any
  instant, per path.

Pure: no Airflow import beyond ``compat`` (the ground floor). The faces call it; none restates it.
"""
