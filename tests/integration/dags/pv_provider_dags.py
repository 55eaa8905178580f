"""Provider sensors with the base class swapped (tests/integration/test_provider_sensors_live.py, issue 42).

Six sensors users run, each twice per mode it offers: Airflow's own class (``stock__<sensor>__<mode>``) and
the same class with ``BackoffSensor`` beneath its methods (``swapped__<sensor>__<mode>``), built as a user
swaps a provider sensor's base: ``class FileSensor(FileSensor, BackoffSensor)``, BackoffSensor's defaults, no
other change. Modes: poke, reschedule, and the sensor's own deferral where it has one (``FileSensor
(deferrable=True)``, ``DateTimeSensorAsync``: BackoffSensor leaves a subclass's own deferral to it).

``pv_met``: the condition turns true once the test says so (``dag_run.conf``: ``flag``, a file the test
creates, ``table``, a table it inserts into, and ``upstream_date``, the logical date of the ``pv_upstream``
run the test then triggers, whose task ``ExternalTaskSensor`` waits for; the date-time sensors wait 20 s past
the run's start).
``pv_timeout``: never true, each wait times out (6 s; reschedule cells 30 s). An own deferral Airflow's base
gives no trigger timeout (``NO_TRIGGER_TIMEOUT``) is a ``pv_met`` cell only.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from airflow import DAG

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS
from airflow_smart_ext.sensors import BackoffSensor

try:  # Airflow 3: the standard provider
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.providers.standard.sensors.bash import BashSensor
    from airflow.providers.standard.sensors.date_time import DateTimeSensor, DateTimeSensorAsync
    from airflow.providers.standard.sensors.external_task import ExternalTaskSensor
    from airflow.providers.standard.sensors.filesystem import FileSensor
    from airflow.providers.standard.sensors.python import PythonSensor
except ImportError:  # Airflow 2.11: core
    from airflow.operators.empty import EmptyOperator  # type: ignore[no-redef]
    from airflow.sensors.bash import BashSensor  # type: ignore[no-redef]
    from airflow.sensors.date_time import DateTimeSensor, DateTimeSensorAsync  # type: ignore[no-redef]
    from airflow.sensors.external_task import ExternalTaskSensor  # type: ignore[no-redef]
    from airflow.sensors.filesystem import FileSensor  # type: ignore[no-redef]
    from airflow.sensors.python import PythonSensor  # type: ignore[no-redef]
from airflow.providers.common.sql.sensors.sql import SqlSensor

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
FS_CONN_ID = "pv_fs"  # the test creates it (type fs, no base path: the flag path is absolute)
SQL_CONN_ID = "sn_sqlite"  # tests/integration/live.py sqlite_db()
FLAG = "{{ dag_run.conf['flag'] }}"


def flag_exists(path: str) -> bool:
    return Path(path).exists()


def upstream_date(logical_date: dt.datetime, dag_run: Any, **_: Any) -> dt.datetime:
    """ExternalTaskSensor's ``execution_date_fn``: the pv_upstream run this DAG run waits for."""
    return dt.datetime.fromisoformat(dag_run.conf["upstream_date"])


def swapped(cls: type) -> type:
    """The provider's class with BackoffSensor beneath its methods, under the provider's name."""
    return type(cls.__name__, (cls, BackoffSensor), {"__module__": __name__})


# sensor -> (class, its arguments, its modes: poke, reschedule, own = its own deferral)
SENSORS: dict[str, tuple[type, dict[str, Any], tuple[str, ...]]] = {
    "file": (FileSensor, {"filepath": FLAG, "fs_conn_id": FS_CONN_ID}, ("poke", "reschedule", "own")),
    "python": (
        PythonSensor,
        {"python_callable": flag_exists, "op_kwargs": {"path": FLAG}},
        ("poke", "reschedule"),
    ),
    "bash": (BashSensor, {"bash_command": f"test -e '{FLAG}'"}, ("poke", "reschedule")),
    "sql": (
        SqlSensor,
        {"conn_id": SQL_CONN_ID, "sql": "SELECT COUNT(*) FROM {{ dag_run.conf['table'] }}"},
        ("poke", "reschedule"),
    ),
    "external": (
        ExternalTaskSensor,
        {"external_dag_id": "pv_upstream", "external_task_id": "done", "execution_date_fn": upstream_date},
        ("poke", "reschedule", "own"),
    ),
    "datetime": (DateTimeSensor, {}, ("poke", "reschedule")),
    "datetime_async": (DateTimeSensorAsync, {}, ("own",)),
}
SWAPPED = {sensor: swapped(cls) for sensor, (cls, _, _) in SENSORS.items()}
#: When the date-time sensors' moment comes, per DAG.
MOMENTS = {
    "pv_met": "{{ dag_run.start_date + macros.timedelta(seconds=20) }}",
    "pv_timeout": "{{ dag_run.start_date + macros.timedelta(days=1) }}",
}
TIMEOUTS = {"pv_met": 300, "pv_timeout": 6}
#: Each reschedule-mode poke is a worker process of its own. A poke queued again before the executor's event
#: of the last one reached the scheduler is failed by it (apache/airflow#71172). Under load a poke's process
#: takes seconds to end (rehearsal at load 15: cells lost in 3 of 3 DAG runs at 2 s), so reschedule cells
#: wait 15 s between pokes, and their pv_timeout deadline is two intervals.
RESCHEDULE_POKE_INTERVAL = 15
#: Own deferrals Airflow's base gives no trigger timeout (they wait for their moment, or for ever): not
#: pv_timeout cells. Airflow 2.11's ExternalTaskSensor defers with ``timeout=execution_timeout`` (3.x: its
#: ``timeout``).
NO_TRIGGER_TIMEOUT = {("datetime_async", "own")} | (
    {("external", "own")} if not AIRFLOW_V_3_0_PLUS else set()
)


def cells(dag_id: str) -> list[tuple[str, str]]:
    """(sensor, mode) of every cell of the DAG."""
    return [
        (sensor, mode)
        for sensor, (_, _, modes) in SENSORS.items()
        for mode in modes
        if not (dag_id == "pv_timeout" and (sensor, mode) in NO_TRIGGER_TIMEOUT)
    ]


def task_id(variant: str, sensor: str, mode: str) -> str:
    return f"{variant}__{sensor}__{mode}"


for dag_id in ("pv_met", "pv_timeout"):
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_tasks=64,
        tags=["airflow-smart-ext", "integration"],
    ):
        for sensor, mode in cells(dag_id):
            cls, kwargs, _ = SENSORS[sensor]
            if sensor.startswith("datetime"):
                kwargs = {"target_time": MOMENTS[dag_id]}
            common: dict[str, Any] = {"poke_interval": 2, "timeout": TIMEOUTS[dag_id]}
            if mode == "reschedule":
                common["poke_interval"] = RESCHEDULE_POKE_INTERVAL
                common["timeout"] = max(TIMEOUTS[dag_id], 2 * RESCHEDULE_POKE_INTERVAL)
            if mode != "own":
                common["mode"] = mode
            elif sensor in ("file", "external"):  # DateTimeSensorAsync always defers
                common["deferrable"] = True
            for variant, klass in (("stock", cls), ("swapped", SWAPPED[sensor])):
                klass(task_id=task_id(variant, sensor, mode), **kwargs, **common)

with DAG(
    dag_id="pv_upstream",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["airflow-smart-ext", "integration"],
):
    EmptyOperator(task_id="done")
