"""A condition watcher's absence alert (issue 45) in a real Airflow 3.3 on PostgreSQL, with two triggerers.

Two watchers due at one time of day (no calendar: every day counts), LEAD_SECONDS after the test writes their
DAG file (tests/integration/dags/wl_late_alerts.py is their ``on_late``: one row per alert in the condition
database, written through an Airflow connection). ``wl_late`` sees no value; ``wl_on_time`` sees one before its
due time. Once ``wl_late`` said it is late, a second triggerer starts, the one holding the watcher is killed
(-9) and the other one takes it over (Airflow's health threshold) and checks on.

Two more watchers see no value either: ``wl_holiday``, whose calendar makes the due day a holiday, and
``wl_make_up``, whose calendar's weekend is the due day's weekday but makes the due day a working day.

Proven: ``wl_late`` and ``wl_make_up`` say so once, within one check of their due time; the other triggerer,
reading the record in Airflow's asset state store, does not say it again; ``wl_on_time`` and ``wl_holiday``
never say it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import PG_DSN_ENV
from airflow_smart_ext import compat
from tests.integration.live import (
    absence_record,
    add_postgres_connection,
    pg_cursor,
    wait_for,
    watchers_running,
)

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get(PG_DSN_ENV),
        reason="two triggerers need PostgreSQL: this runs in the PostgreSQL pass (set SMART_EXT_TEST_PG_DSN)",
    ),
    pytest.mark.skipif(
        not compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED,
        reason="the asset state store (AIP-103) needs Airflow >= 3.3 (a watcher's due=; its refusal before 3.3 "
        "is unit-tested)",
    ),
    pytest.mark.timeout(900),
]

CONN_ID = CONDITION_DB = "wl_conditions"
DAG_ID = "wl_late_consumer"
LATE, ON_TIME, HOLIDAY, MAKE_UP = "wl_late", "wl_on_time", "wl_holiday", "wl_make_up"
WATCHERS = (LATE, ON_TIME, HOLIDAY, MAKE_UP)
#: Seconds from writing the DAG file to the due time: parsing it, unpausing and starting both watchers on a
#: loaded machine take up to about a minute; a watcher that began after its due time fails the test.
LEAD_SECONDS = 120.0
CHECK_SECONDS = 4.0  # the watchers' max_wait: a check at least this often
HEALTH_THRESHOLD = 20  # seconds without a heartbeat before the other triggerer takes the watcher over
DAG_FILE = """
import datetime as dt

import wl_late_alerts
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetAny, AssetWatcher

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables import DueTime
from airflow_smart_ext.watchers import ConditionWatcher, sql_condition


def watched(name, calendar=None):
    watcher = ConditionWatcher(
        sql_condition("wl_conditions", f"SELECT max(day) FROM {name}"),
        poke_interval=2,
        max_wait=4,
        jitter="none",
        state_key=name,
        due=DueTime("{at}", calendar=calendar),
        on_late=[wl_late_alerts.record_late],
    )
    return Asset(name, watchers=[AssetWatcher(name=name, trigger=watcher)])


# The due day a holiday; the due day's weekday a weekend, but the due day a make-up working day.
HOLIDAY = BusinessCalendar(weekend=[], extra_holidays=["{day}"])
MAKE_UP = BusinessCalendar(weekend=[{weekday}], extra_business_days=["{day}"])

with DAG(
    "wl_late_consumer",
    schedule=AssetAny(
        watched("wl_late"), watched("wl_on_time"), watched("wl_holiday", HOLIDAY), watched("wl_make_up", MAKE_UP)
    ),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
):
    EmptyOperator(task_id="consume")
"""


def alerts(dsn: str) -> list[dict[str, Any]]:
    with pg_cursor(dsn) as cur:
        cur.execute("SELECT late FROM late_alerts ORDER BY due")
        return [json.loads(late) for (late,) in cur.fetchall()]


def holder(env: AirflowEnv, asset: str) -> str | None:
    """The harness's name of the live triggerer holding the asset's watcher (None: none)."""
    rows = env.query(
        'SELECT t.triggerer_id FROM asset a JOIN asset_watcher w ON w.asset_id = a.id JOIN "trigger" t '
        "ON t.id = w.trigger_id WHERE a.name = %s",
        (asset,),
    )
    jobs = {c.job_id: name for name, c in env.components.items() if c.job_id is not None and c.running}
    return jobs.get(rows[0][0]) if rows else None


@pytest.fixture(scope="module")
def condition_dsn(airflow_env: AirflowEnv) -> str:
    server = os.environ[PG_DSN_ENV]
    with pg_cursor(server) as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {CONDITION_DB}")
        cur.execute(f"CREATE DATABASE {CONDITION_DB}")
    dsn = server.rsplit("/", 1)[0] + f"/{CONDITION_DB}"
    with pg_cursor(dsn) as cur:
        for name in WATCHERS:
            cur.execute(f"CREATE TABLE {name} (day text)")
        cur.execute("CREATE TABLE late_alerts (watcher text, due text, resent boolean, late text)")
    add_postgres_connection(airflow_env, CONN_ID, dsn)
    return dsn


@pytest.fixture(scope="module")
def story(airflow_env: AirflowEnv, condition_dsn: str, tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    env, dsn = airflow_env, condition_dsn
    added = {"AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEALTH_THRESHOLD)}
    env.env.update(added)
    env.triggerers = 2
    story: dict[str, Any] = {}
    try:
        env.stop_component("triggerer")  # started again with the threshold above
        env.start_component("triggerer")
        due = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=LEAD_SECONDS)).replace(microsecond=0)
        story["due"] = due.timestamp()
        source = Path(tmp_path_factory.mktemp("wl")) / "wl_late_dags.py"
        text = DAG_FILE.replace("{at}", due.strftime("%H:%M:%S")).replace("{day}", due.date().isoformat())
        source.write_text(text.replace("{weekday}", str(due.weekday())))
        env.add_dag_file(source)
        env.wait_for_dag(DAG_ID)
        env.unpause(DAG_ID)
        watchers_running(env, list(WATCHERS))
        wait_for(
            lambda: all(absence_record(env, asset) for asset in WATCHERS),
            60,
            "the watchers' late records",
            env,
        )
        story["since"] = {asset: absence_record(env, asset)["since"] for asset in WATCHERS}  # type: ignore[index]
        for asset, since in story["since"].items():  # else this proves nothing: it was not watching then
            assert since < story["due"], (
                f"{asset} began after its due time: raise LEAD_SECONDS={LEAD_SECONDS}"
            )
        with pg_cursor(dsn) as cur:  # a new value for wl_on_time, after it began and before its due time
            cur.execute(f"INSERT INTO {ON_TIME} VALUES ('2026-03-02')")
            cur.execute("SELECT extract(epoch FROM clock_timestamp())")
            landed_at = float(cur.fetchone()[0])
        assert landed_at < story["due"] - 2 * CHECK_SECONDS, (
            f"too late to be on time: raise LEAD_SECONDS={LEAD_SECONDS}"
        )
        wait_for(
            lambda: {alert["watcher"] for alert in alerts(dsn)} >= {LATE, MAKE_UP},
            max(0.0, story["due"] - time.time()) + 60,
            "the late alerts",
            env,
        )
        # The record is written before the alert and marked done after it: kill the holder once it is done,
        # with a second triggerer running (started only now: a triggerer that starts beside a busy one can take
        # its watchers for a while, which would move the alert, not test it).
        wait_for(lambda: not absence_record(env, LATE)["telling"], 30, "the alert's record done", env)  # type: ignore[index]
        env.start_component("triggerer-2")
        killed = holder(env, LATE)
        assert killed is not None, "no live triggerer holds the late watcher"
        story["killed"] = killed
        env.stop_component(killed, crash=True)
        wait_for(
            lambda: holder(env, LATE) not in (None, killed),
            HEALTH_THRESHOLD + 120,
            "the other triggerer taking the late watcher over",
            env,
        )
        story["took_over"] = holder(env, LATE)
        time.sleep(5 * CHECK_SECONDS)  # checks on the other triggerer, after its due time
        story["alerts"] = alerts(dsn)
        story["records"] = {asset: absence_record(env, asset) for asset in WATCHERS}
        yield story
    finally:
        env.pause(DAG_ID)
        for name in added:
            env.env.pop(name, None)
        env.stop_components(env.triggerer_names, grace=10.0)
        env.components.pop("triggerer-2", None)
        env.triggerers = 1
        env.start_component("triggerer")


def test_a_watcher_with_no_new_value_by_its_due_time_says_so_once(story: dict[str, Any]) -> None:
    # once each, through a kill -9 and the other triggerer's take-over; none on a holiday or with a value
    by_watcher = {alert["watcher"]: alert for alert in story["alerts"]}
    assert sorted(alert["watcher"] for alert in story["alerts"]) == sorted([LATE, MAKE_UP]), story["alerts"]
    due = dt.datetime.fromtimestamp(story["due"], dt.timezone.utc)
    for alert in by_watcher.values():
        assert alert["due"].startswith(due.strftime("%Y-%m-%dT%H:%M:%S")), alert
        assert alert["resent"] is False and alert["last_outcome"] == "not met", alert
        # within one check of the due time (a check at least every CHECK_SECONDS), plus a loaded event loop
        assert 0 <= alert["late_by_seconds"] <= CHECK_SECONDS + 10, alert
        assert alert["link"].endswith("/smart-ext/waits?late=true"), alert
    assert by_watcher[LATE]["assets"] == [LATE], by_watcher
    assert story["took_over"] not in (None, story["killed"]), story


def test_a_holiday_has_no_due_time_and_a_make_up_working_day_has_one(story: dict[str, Any]) -> None:
    """The calendar moves the due time: none on the due day made a holiday (the next one is tomorrow); one on
    the due day made a working day although its weekday is the calendar's weekend."""
    holiday, make_up = story["records"][HOLIDAY], story["records"][MAKE_UP]
    assert holiday["told"] is None, holiday
    assert make_up["told"] == story["due"] and make_up["telling"] is False, make_up


def test_the_record_in_the_asset_state_store_says_which_due_time_was_told(story: dict[str, Any]) -> None:
    late, on_time = story["records"][LATE], story["records"][ON_TIME]
    assert late["told"] == story["due"] and late["telling"] is False, late
    assert on_time["told"] is None and on_time["landed"] is not None, on_time  # its value met the due time
