"""DAGs for the real-browser UI test (tests/integration/test_ui_live.py): deferrable SQL sensors that stay
waiting (``SELECT 0`` is never true, timeout 1 h) and one business-day timetable for the Calendars view.

``ui_open_*`` DAGs are readable by the test's restricted user, ``ui_hidden_waits`` is not.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow import DAG

from airflow_smart_ext import compat
from airflow_smart_ext.sensors import BackoffSqlSensor
from airflow_smart_ext.timetables import BusinessDaysTimetable, DueTime, MonthlyBusinessDayTimetable

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
CONN_ID = "ui_sqlite"
# Long enough for the test, short gaps so several checks are made: poke 30 s, up to 120 s between checks.
# One retry, soon: a first try lost on a loaded machine is told by the test, and the page still has its wait.
WAIT: dict[str, Any] = {
    "poke_interval": 30,
    "max_wait": 120,
    "timeout": 3600,
    "deferrable": True,
    "retries": 1,
    "retry_delay": dt.timedelta(seconds=5),
}
SHARED_TASKS = ("shared_1", "shared_2", "shared_3")


#: the open DAG's runs time out before their waits' own 1 h timeout: the view shows the run's deadline
RUN_TIMEOUT = dt.timedelta(minutes=30)


def _dag(dag_id: str, schedule: Any, dagrun_timeout: dt.timedelta | None = None) -> DAG:
    return DAG(
        dag_id=dag_id,
        start_date=START,
        catchup=False,
        tags=["airflow-smart-ext", "integration"],
        schedule=schedule,
        dagrun_timeout=dagrun_timeout,
    )


with _dag("ui_open_waits", schedule=None, dagrun_timeout=RUN_TIMEOUT):
    for task_id in SHARED_TASKS:  # one condition, three tasks: one shared check
        BackoffSqlSensor(
            task_id=task_id, conn_id=CONN_ID, sql="SELECT 0 AS shared", start_from_trigger=False, **WAIT
        )
    BackoffSqlSensor(task_id="zero_worker", conn_id=CONN_ID, sql="SELECT 0 AS zero_worker", **WAIT)
    BackoffSqlSensor(
        task_id="worker_first",
        conn_id=CONN_ID,
        sql="SELECT 0 AS worker_first",
        start_from_trigger=False,
        **WAIT,
    )
    # Issue 44: a zero-worker wait whose query names a Variable (rendered in the triggerer, 3.3+) and a
    # worker-first twin on the literal it renders to: one condition, one shared check, one group on the page.
    BackoffSqlSensor(
        task_id="var_templated", conn_id=CONN_ID, sql="SELECT 0 AS {{ var.value.ui_table }}", **WAIT
    )
    BackoffSqlSensor(
        task_id="var_twin", conn_id=CONN_ID, sql="SELECT 0 AS ui_var_table", start_from_trigger=False, **WAIT
    )
    BackoffSqlSensor(
        task_id="templated",
        conn_id=CONN_ID,
        sql="SELECT 0 AS templated WHERE :token IS NOT NULL",
        parameters={"token": "{{ conn.ui_secret_conn.password }}"},
        start_from_trigger=False,
        **WAIT,
    )

# Late data: due 1 s after the run's reference instant, so its trigger's first check finds it late; the alert
# (a worker's short resume) is sent and it waits on: the page shows its due time, how late, and the count.
with _dag("ui_open_late", schedule=None):
    BackoffSqlSensor(
        task_id="late",
        conn_id=CONN_ID,
        sql="SELECT 0 AS late",
        start_from_trigger=False,
        due=DueTime(after=dt.timedelta(seconds=1)),
        **{**WAIT, "poke_interval": 5, "max_wait": 10},
    )

# Late waits whose checks run in a worker (no trigger row): reschedule mode, and poke mode (it holds one of the
# executor's slots: the test runs it only beside an executor with more than one). The Waits view shows them
# from their task instances and their DAG's serialized due times.
WORKER_WAIT: dict[str, Any] = {
    **WAIT,
    "deferrable": False,
    "poke_interval": 5,
    "max_wait": 10,
    "due": DueTime(after=dt.timedelta(seconds=1)),
}
with _dag("ui_open_late_workers", schedule=None):
    BackoffSqlSensor(
        task_id="late_reschedule", conn_id=CONN_ID, sql="SELECT 0 AS r", mode="reschedule", **WORKER_WAIT
    )

with _dag("ui_open_late_poke", schedule=None):
    BackoffSqlSensor(task_id="late_poke", conn_id=CONN_ID, sql="SELECT 0 AS p", mode="poke", **WORKER_WAIT)

with _dag("ui_hidden_waits", schedule=None):
    BackoffSqlSensor(
        task_id="hidden_reschedule", conn_id=CONN_ID, sql="SELECT 0 AS h", mode="reschedule", **WORKER_WAIT
    )
    BackoffSqlSensor(
        task_id="hidden", conn_id=CONN_ID, sql="SELECT 0 AS hidden", start_from_trigger=False, **WAIT
    )
    # every check an OperationalError ("no such table"), ridden out as transient: its last outcome says so
    BackoffSqlSensor(task_id="erroring", conn_id=CONN_ID, sql="SELECT ok FROM ui_no_such_table", **WAIT)


def _next_weekday(days_ahead: int) -> dt.date:
    """A Monday-Friday date ``days_ahead`` days or a little more from today: a holiday among the next runs."""
    day = dt.date.today() + dt.timedelta(days=days_ahead)
    while day.weekday() >= 5:
        day += dt.timedelta(days=1)
    return day


EXTRA_HOLIDAY = _next_weekday(3)

with _dag(
    "ui_open_calendar",
    schedule=BusinessDaysTimetable(country="US", extra_holidays=[EXTRA_HOLIDAY], timezone="UTC"),
):
    # Their due times, on the page's next runs: 09:30 New York on the timetable's own calendar (so each run's
    # data is due on the next run's day), a mapped task's 07:00 London T+1 given in its .partial(), and
    # another's per mapped instance.
    BackoffSqlSensor(
        task_id="never_runs",
        conn_id=CONN_ID,
        sql="SELECT 1",
        due=DueTime("09:30", country="US", extra_holidays=[EXTRA_HOLIDAY], timezone="America/New_York"),
        **WAIT,
    )
    BackoffSqlSensor.partial(
        task_id="never_runs_mapped",
        conn_id=CONN_ID,
        due=DueTime("07:00", country="GB", timezone="Europe/London", lag=1),
        **WAIT,
    ).expand(sql=["SELECT 1"])
    # one due time per mapped task instance, given in .expand()
    BackoffSqlSensor.partial(task_id="never_runs_items", conn_id=CONN_ID, sql="SELECT 1", **WAIT).expand(
        due=[DueTime("06:00", timezone="Asia/Tokyo"), DueTime("18:00", timezone="America/Chicago")]
    )

# A clock change on the Calendars page: monthly runs span both of New York's (any 8 months hold one), and the
# month's data is due at 09:30 New York on the next NYSE session either side of it.
with _dag(
    "ui_open_monthly",
    schedule=MonthlyBusinessDayTimetable(n=1, country="US", timezone="America/New_York"),
):
    BackoffSqlSensor(
        task_id="month_opened",
        conn_id=CONN_ID,
        sql="SELECT 1",
        due=DueTime("09:30", market="NYSE", timezone="America/New_York"),
        **WAIT,
    )

if (
    compat.asset_watchers.ASSET_WATCHERS_SUPPORTED
):  # 3.x: one condition watcher for the Waits view's watchers table
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import Asset, AssetWatcher

    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    WATCHED_ASSET, WATCHER = "ui_orders", "ui_orders_loaded"
    orders = Asset(
        WATCHED_ASSET,
        watchers=[
            AssetWatcher(
                name=WATCHER,
                trigger=ConditionWatcher(
                    sql_condition(CONN_ID, "SELECT 'day-1' AS ui_watch"), poke_interval=5, state_key=WATCHER
                ),
            )
        ],
    )
    with _dag("ui_open_consumer", schedule=[orders]):
        EmptyOperator(task_id="consume")
