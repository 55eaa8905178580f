"""Our timetables inside a real Airflow: dag-processor serialization, scheduler-created runs, API/CLI details.

* every example DAG (example_dags/timetable_*.py) is serialized without import error and the scheduler's
  first planned data interval equals the known dates documented in the example; unpaused, the scheduler
  creates runs whose data intervals are exactly the timetable's (decoded from the serialized DAG);
* the tests/integration/dags/tt_live_dags.py DAGs (catchup from a few days ago) get exactly the runs, with the
  local-midnight data intervals, computed here independently (zoneinfo + holidays) and by the timetable
  decoded from the serialized DAG;
* a catchup=False DAG with a start_date years ago gets the latest due run planned, as the timetable says;
* summary and description of every example and live DAG reach the REST API (3.x) / ``airflow dags details``
  (2.11).
"""

from __future__ import annotations

import datetime as dt
import json
import time
import zlib
from typing import Any
from zoneinfo import ZoneInfo

import holidays
import pendulum
import pytest
import time_machine

from airflow_harness.env import AirflowEnv
from airflow_harness.state import AirflowEnvError
from airflow_smart_ext.compat.serialization import decode_timetable
from airflow_smart_ext.compat.timetables import TimeRestriction
from tests.integration.dags.tt_live_today import today_file

UTC = dt.timezone.utc


def local_midnight(day: dt.date, tz: str) -> dt.datetime:
    """00:00 local time of ``day`` in ``tz``, as an aware UTC datetime."""
    return dt.datetime.combine(day, dt.time(0), tzinfo=ZoneInfo(tz)).astimezone(UTC)


def session_day(env: AirflowEnv, dag_id: str) -> dt.date:
    """The local day a live DAG's start_date counts from ("today" of the DAG file), read from where its first
    parse stored it (tests/integration/dags/tt_live_today.py).

    Not this test's own clock: the dag-processor re-parses every few seconds, so a start_date of "today - 3"
    computed at each parse moves at local midnight, and a test computing "today" at another moment than the
    parse the scheduler used expects other days (at 18:16 UTC, just after Kathmandu's midnight, runs from D-3
    while the DAG had scheduled from D-4). One stored day serves every parse and the test alike."""
    path = today_file(env.home, dag_id)
    assert path.exists(), f"{dag_id}: no stored day at {path} (is the DAG parsed?)"
    return dt.date.fromisoformat(path.read_text())


def intervals(runs: list[dict[str, Any]]) -> list[tuple[dt.datetime, dt.datetime]]:
    return [(r["data_interval_start"], r["data_interval_end"]) for r in runs]


def serialized_timetable(env: AirflowEnv, dag_id: str) -> Any:
    """The timetable exactly as the scheduler sees it: decoded from the serialized DAG in the metadata DB."""
    rows = env.query("SELECT data, data_compressed FROM serialized_dag WHERE dag_id = %s", (dag_id,))
    assert rows, f"{dag_id} is not serialized"
    data, compressed = rows[-1]
    if data is None:
        data = zlib.decompress(bytes(compressed))
    document = json.loads(data) if isinstance(data, (str, bytes, bytearray)) else data
    return decode_timetable(document["dag"]["timetable"])


def expected_by_timetable(
    timetable: Any, start: dt.datetime, until: dt.datetime | None = None
) -> list[tuple[dt.datetime, dt.datetime]]:
    """The runs due now according to the timetable object itself (catchup from ``start``); with ``until``, only
    those whose data interval ends by then (a live DAG's session day: the runs its test expects)."""
    now = dt.datetime.now(UTC)
    return [
        (info.data_interval.start, info.data_interval.end)
        for info in timetable.iter_runs(start, 50)
        if info.run_after <= now and (until is None or info.data_interval.end <= until)
    ]


# ---------------------------------------------------------------------------------------------- examples
NY, BERLIN, JERUSALEM = "America/New_York", "Europe/Berlin", "Asia/Jerusalem"
EXAMPLE_FIRST_INTERVALS = {
    # [2024-03-08 00:00 EST, 2024-03-09 00:00 EST)
    "timetable_delayed_daily": (
        local_midnight(dt.date(2024, 3, 8), NY),
        local_midnight(dt.date(2024, 3, 9), NY),
    ),
    # 3-day window starting at the start_date: [03-28, 03-31) Berlin, 72 h (before the DST change)
    "timetable_rolling_window": (
        local_midnight(dt.date(2024, 3, 28), BERLIN),
        local_midnight(dt.date(2024, 3, 31), BERLIN),
    ),
    # Monday 2024-11-25 (first NYSE business day of the range, no previous run yet): that day only
    "timetable_business_days": (
        local_midnight(dt.date(2024, 11, 25), NY),
        local_midnight(dt.date(2024, 11, 26), NY),
    ),
    # first 5-day window whose logical date is >= start_date: Monday 2024-07-01's [06-27, 07-02)
    "timetable_business_rolling": (
        local_midnight(dt.date(2024, 6, 27), NY),
        local_midnight(dt.date(2024, 7, 2), NY),
    ),
    # January close on Wednesday 2024-01-31: [01-01, 02-01)
    "timetable_month_end_close": (
        local_midnight(dt.date(2024, 1, 1), NY),
        local_midnight(dt.date(2024, 2, 1), NY),
    ),
    # Friday 2024-12-20, both NYSE and LSE open; it runs at T+2 (Tuesday 12-24 06:00), the interval stays D
    "timetable_cross_market_settlement": (
        local_midnight(dt.date(2024, 12, 20), NY),
        local_midnight(dt.date(2024, 12, 21), NY),
    ),
    # Thursday 2024-12-05 in Israel (Sunday-Thursday week); the next run, Sunday 12-08, covers Fri-Sun
    "timetable_israel_business_days": (
        local_midnight(dt.date(2024, 12, 5), JERUSALEM),
        local_midnight(dt.date(2024, 12, 6), JERUSALEM),
    ),
}
# The second run of the issue-16 examples, also independent of the timetable code: Israel's Sunday run
# reaches back over its Fri/Sat weekend; the cross-market run of Monday 12-23 settles on Friday 12-27 (12-25
# both closed, 12-26 LSE closed).
EXAMPLE_SECOND_RUNS = {
    "timetable_israel_business_days": (
        local_midnight(dt.date(2024, 12, 6), JERUSALEM),
        local_midnight(dt.date(2024, 12, 9), JERUSALEM),
        local_midnight(dt.date(2024, 12, 9), JERUSALEM),
    ),
    "timetable_cross_market_settlement": (
        local_midnight(dt.date(2024, 12, 23), NY),
        local_midnight(dt.date(2024, 12, 24), NY),
        local_midnight(dt.date(2024, 12, 27), NY) + dt.timedelta(hours=6),
    ),
}


@pytest.mark.parametrize("dag_id", sorted(EXAMPLE_FIRST_INTERVALS))
def test_example_dag_serialized_with_first_interval(airflow_env: AirflowEnv, dag_id: str) -> None:
    airflow_env.wait_for_dag(dag_id)  # raises with the import error of its file, if any
    errors = [e for e in airflow_env.import_errors() if f"{dag_id}.py" in e.split(":", 1)[0]]
    assert not errors, errors
    # The first scheduled run if another test has unpaused the DAG, else the scheduler's next planned run.
    scheduled = [r for r in airflow_env.dag_runs(dag_id) if r["run_type"] == "scheduled"]
    rows = scheduled[:1] or airflow_env.query_dicts(
        "SELECT next_dagrun_data_interval_start AS data_interval_start, "
        "next_dagrun_data_interval_end AS data_interval_end FROM dag WHERE dag_id = %s",
        (dag_id,),
    )
    assert intervals(rows) == [EXAMPLE_FIRST_INTERVALS[dag_id]]


# (start_date, end_date) of each example DAG, as written in its file
EXAMPLE_RANGES = {
    "timetable_delayed_daily": (pendulum.datetime(2024, 3, 8, tz=NY), pendulum.datetime(2024, 3, 12, tz=NY)),
    "timetable_rolling_window": (
        pendulum.datetime(2024, 3, 28, tz=BERLIN),
        pendulum.datetime(2024, 4, 1, tz=BERLIN),
    ),
    "timetable_business_days": (
        pendulum.datetime(2024, 11, 25, tz=NY),
        pendulum.datetime(2024, 11, 30, 12, tz=NY),
    ),
    "timetable_business_rolling": (
        pendulum.datetime(2024, 6, 27, tz=NY),
        pendulum.datetime(2024, 7, 5, tz=NY),
    ),
    "timetable_month_end_close": (
        pendulum.datetime(2024, 1, 1, tz=NY),
        pendulum.datetime(2024, 4, 30, tz=NY),
    ),
    "timetable_cross_market_settlement": (
        pendulum.datetime(2024, 12, 20, tz=NY),
        pendulum.datetime(2024, 12, 31, tz=NY),
    ),
    "timetable_israel_business_days": (
        pendulum.datetime(2024, 12, 5, tz=JERUSALEM),
        pendulum.datetime(2024, 12, 12, tz=JERUSALEM),
    ),
}
# Runs created per example DAG before comparing: its max_active_runs (2), so no run has to finish first and
# the second run shows the scheduler continuing from the first one's interval.
EXAMPLE_RUNS_CHECKED = 2


def set_paused(env: AirflowEnv, dag_id: str, paused: bool, attempts: int = 5) -> None:
    """``env.set_paused`` that retries an HTTP 500 from the api-server: on SQLite, with tasks of several DAGs
    running, its write can exceed the 5 s busy timeout ("database is locked")."""
    for attempt in range(attempts):
        try:
            env.set_paused(dag_id, paused)
            return
        except AirflowEnvError as err:
            if "HTTP 500" not in str(err) or attempt == attempts - 1:
                raise
            time.sleep(2)


def wait_created_runs(env: AirflowEnv, dag_id: str, count: int, timeout: float = 180) -> list[dict[str, Any]]:
    """Until the scheduler has created ``count`` scheduled runs of the DAG (any state; DB polling)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = [r for r in env.dag_runs(dag_id) if r["run_type"] == "scheduled"]
        if len(runs) >= count:
            return runs
        assert time.monotonic() < deadline, f"{dag_id}: {len(runs)} of {count} runs created: {runs}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def scheduled_examples(airflow_env: AirflowEnv) -> dict[str, list[dict[str, Any]]]:
    """Unpause every example timetable DAG at once, collect the first runs the scheduler creates, and pause
    it again (so its later runs neither occupy the executor nor contend for the SQLite DB in later tests).

    Only the runs' creation (their data intervals and run times) is checked here: the scheduler does not
    schedule the tasks of a paused DAG, so whether they finish depends on whether they started before the
    pause. Running every example DAG to completion is the demo's job (``scripts/dev.py demo``)."""
    for dag_id in EXAMPLE_RANGES:
        airflow_env.wait_for_dag(dag_id)
    for dag_id in EXAMPLE_RANGES:
        set_paused(airflow_env, dag_id, False)
    created: dict[str, list[dict[str, Any]]] = {}
    try:
        for dag_id in EXAMPLE_RANGES:
            created[dag_id] = wait_created_runs(airflow_env, dag_id, EXAMPLE_RUNS_CHECKED)
    finally:
        for dag_id in EXAMPLE_RANGES:
            set_paused(airflow_env, dag_id, True)
    return created


@pytest.mark.parametrize("dag_id", sorted(EXAMPLE_RANGES))
def test_example_dag_runs_have_the_timetables_intervals(
    airflow_env: AirflowEnv, scheduled_examples: dict[str, list[dict[str, Any]]], dag_id: str
) -> None:
    runs = scheduled_examples[dag_id]
    start, end = EXAMPLE_RANGES[dag_id]
    timetable = serialized_timetable(airflow_env, dag_id)
    planned = timetable.iter_runs(start, 50, end=end)
    expected = [(i.data_interval.start, i.data_interval.end) for i in planned]
    assert len(expected) >= EXAMPLE_RUNS_CHECKED
    assert intervals(runs) == expected[: len(runs)], (intervals(runs), expected)
    assert intervals(runs)[0] == EXAMPLE_FIRST_INTERVALS[dag_id]  # independent of the timetable code
    for run in runs:
        assert run["logical_date"] == run["data_interval_start"], run
    assert "failed" not in [r["state"] for r in runs], runs
    if airflow_env.is_airflow3:  # 2.11 has no run_after column (the harness shows the logical date there)
        assert [r["run_after"] for r in runs] == [i.run_after for i in planned[: len(runs)]]
    if dag_id in EXAMPLE_SECOND_RUNS:
        start, end, run_after = EXAMPLE_SECOND_RUNS[dag_id]
        assert intervals(runs)[1] == (start, end)
        if airflow_env.is_airflow3:
            assert runs[1]["run_after"] == run_after


def test_catchup_false_plans_the_latest_due_run(airflow_env: AirflowEnv) -> None:
    """The next run the dag-processor/scheduler planned for a catchup=False DAG whose start_date is years
    ago is the latest run already due (not the first since start_date): what the timetable computes with no
    previous run and, identically, with a last run far in the past (a DAG unpaused after a long pause)."""
    dag_id = "tt_catchup_false_live"
    airflow_env.wait_for_dag(dag_id)
    row = airflow_env.query_dicts(
        "SELECT next_dagrun_data_interval_start AS data_interval_start, "
        "next_dagrun_data_interval_end AS data_interval_end, last_parsed_time AS timestamp "
        "FROM dag WHERE dag_id = %s",
        (dag_id,),
    )[0]
    timetable = serialized_timetable(airflow_env, dag_id)
    restriction = TimeRestriction(
        earliest=pendulum.datetime(2020, 1, 1, tz="America/New_York"), latest=None, catchup=False
    )
    old = timetable.iter_runs(pendulum.datetime(2020, 1, 1, tz="America/New_York"), 1)[0].data_interval
    with time_machine.travel(row["timestamp"], tick=False):  # "now" as the planner saw it
        fresh = timetable.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
        after_pause = timetable.next_dagrun_info(last_automated_data_interval=old, restriction=restriction)
    assert fresh is not None and after_pause is not None
    assert after_pause.data_interval == fresh.data_interval
    assert fresh.run_after <= row["timestamp"]  # already due when planned, the latest such run
    assert intervals([row]) == [(fresh.data_interval.start, fresh.data_interval.end)]
    assert fresh.data_interval.start.year >= dt.datetime.now(UTC).year - 1


# ---------------------------------------------------------------------------------------------- live runs
LIVE_DAGS = ("tt_delayed_daily_live", "tt_rolling_window_live", "tt_business_days_live", "tt_month_end_live")


@pytest.fixture(scope="module")
def live_dags(airflow_env: AirflowEnv) -> AirflowEnv:
    """All live DAGs serialized and unpaused at once, so their catch-up runs overlap."""
    for dag_id in LIVE_DAGS:
        airflow_env.wait_for_dag(dag_id)
    for dag_id in LIVE_DAGS:
        set_paused(airflow_env, dag_id, False)
    return airflow_env


def check_runs(env: AirflowEnv, dag_id: str, expected: list[tuple[dt.datetime, dt.datetime]]) -> None:
    assert expected, "test bug: no run expected"
    runs = env.wait_runs(dag_id, len(expected), timeout=240)
    assert intervals(runs[: len(expected)]) == expected, intervals(runs)
    for run in runs:
        assert run["run_type"] == "scheduled", run
        assert run["logical_date"] == run["data_interval_start"], run
    assert [r["state"] for r in runs[: len(expected)]] == ["success"] * len(expected), runs
    # Nothing beyond what is due: at most the next run, due once the session has crossed a local midnight.
    assert len(runs) <= len(expected) + 1, intervals(runs)


def test_delayed_daily_runs(live_dags: AirflowEnv) -> None:
    tz = "Asia/Kathmandu"
    today = session_day(live_dags, "tt_delayed_daily_live")  # the DAG file's "today", not this clock's
    now = dt.datetime.now(UTC)
    # One run per local day D-3..D-1, each due 5 minutes after its interval ends (D-1's: 00:05 on D, maybe
    # after the DAG's first parse on D, so maybe not due yet).
    expected = [
        (
            local_midnight(today - dt.timedelta(days=k), tz),
            local_midnight(today - dt.timedelta(days=k - 1), tz),
        )
        for k in (3, 2, 1)
    ]
    expected = [(start, end) for start, end in expected if end + dt.timedelta(minutes=5) <= now]
    timetable = serialized_timetable(live_dags, "tt_delayed_daily_live")
    assert expected_by_timetable(timetable, expected[0][0], until=local_midnight(today, tz)) == expected
    check_runs(live_dags, "tt_delayed_daily_live", expected)


def test_rolling_window_runs(live_dags: AirflowEnv) -> None:
    tz = "America/New_York"
    today = session_day(live_dags, "tt_rolling_window_live")
    # run for day D covers [D-1 00:00, D+1 00:00); due at its end: D-3 -> [D-3, D-1), D-2 -> [D-2, D)
    expected = [
        (
            local_midnight(today - dt.timedelta(days=k), tz),
            local_midnight(today - dt.timedelta(days=k - 2), tz),
        )
        for k in (3, 2)
    ]
    timetable = serialized_timetable(live_dags, "tt_rolling_window_live")
    assert expected_by_timetable(timetable, expected[0][0], until=local_midnight(today, tz)) == expected
    check_runs(live_dags, "tt_rolling_window_live", expected)


def _us_business_day(day: dt.date) -> bool:
    return day.weekday() < 5 and day not in holidays.US(years=day.year)


def test_business_days_runs(live_dags: AirflowEnv) -> None:
    tz = "America/Chicago"
    today = session_day(live_dags, "tt_business_days_live")
    start = today - dt.timedelta(days=5)
    business = [d for d in (start + dt.timedelta(days=i) for i in range(5)) if _us_business_day(d)]
    # since_previous: each run reaches back to the previous run's end; the first one to the start_date.
    expected = []
    previous_end = local_midnight(start, tz)
    for day in business:
        end = local_midnight(day + dt.timedelta(days=1), tz)
        expected.append((previous_end, end))
        previous_end = end
    timetable = serialized_timetable(live_dags, "tt_business_days_live")
    until = local_midnight(today, tz)
    assert expected_by_timetable(timetable, local_midnight(start, tz), until=until) == expected
    check_runs(live_dags, "tt_business_days_live", expected)


def _last_us_business_day(first_of_month: dt.date) -> dt.date:
    day = (first_of_month + dt.timedelta(days=31)).replace(day=1) - dt.timedelta(days=1)
    while not _us_business_day(day):
        day -= dt.timedelta(days=1)
    return day


def test_month_end_runs(live_dags: AirflowEnv) -> None:
    tz = "Europe/Berlin"
    today = session_day(live_dags, "tt_month_end_live")
    this_month = today.replace(day=1)
    previous_month = (this_month - dt.timedelta(days=1)).replace(day=1)
    # Each month's run covers the month up to its close (the last US business day), due at the close's end: the
    # previous month's, and this month's too once its close has passed (a session day after it).
    expected = [
        (local_midnight(month, tz), local_midnight(_last_us_business_day(month) + dt.timedelta(days=1), tz))
        for month in (previous_month, this_month)
    ]
    until = local_midnight(today, tz)
    expected = [(start, end) for start, end in expected if end <= until]
    timetable = serialized_timetable(live_dags, "tt_month_end_live")
    assert expected_by_timetable(timetable, expected[0][0], until=until) == expected
    check_runs(live_dags, "tt_month_end_live", expected)


# ---------------------------------------------------------------------------------------------- details
EXPECTED_SUMMARIES = {
    "timetable_delayed_daily": "daily 02:00 America/New_York",
    "timetable_rolling_window": "3-day window, daily 00:00 Europe/Berlin",
    "timetable_business_days": "NYSE business days (incl. days off) 01:00 America/New_York",
    "timetable_business_rolling": "5-day window, US-NY business days +custom 00:00 America/New_York",
    "timetable_month_end_close": "last NYSE business day of the month 06:00 America/New_York",
    "timetable_cross_market_settlement": "NYSE and XLON business days T+2 06:00 America/New_York",
    "timetable_israel_business_days": "IL business days (weekend Fri/Sat) (incl. days off) 00:00 Asia/Jerusalem",
    "tt_catchup_false_live": "1st NYSE business day of the month 00:00 America/New_York",
    "tt_delayed_daily_live": "daily 00:05 Asia/Kathmandu",
    "tt_rolling_window_live": "2-day window, daily 00:00 America/New_York",
    "tt_business_days_live": "US business days (incl. days off) 00:00 America/Chicago",
    "tt_month_end_live": "last US business day of the month 00:00 Europe/Berlin",
}


# Airflow 2.11 has no REST API in this env: its CLI's own parser and ``dags details`` command, run for every DAG
# in one process (one import of Airflow instead of one per DAG; each prints one JSON line).
_CLI_DETAILS = """
import sys
from airflow.cli.cli_parser import get_parser

for dag_id in sys.argv[1:]:
    args = get_parser().parse_args(["dags", "details", dag_id, "-o", "json"])
    args.func(args)
"""


def _shown(details: dict[str, Any]) -> tuple[str, str]:
    # Without a timetable_summary field (2.11) the summary is shown as the schedule.
    summary = details.get("timetable_summary") or details["schedule_interval"]["value"]
    return summary, details["timetable_description"]


@pytest.fixture(scope="module")
def shown_details(airflow_env: AirflowEnv) -> dict[str, tuple[str, str]]:
    """(summary, description) of every DAG in EXPECTED_SUMMARIES as a user reads them: the REST API where the
    env has one, else ``airflow dags details``."""
    for dag_id in EXPECTED_SUMMARIES:
        airflow_env.wait_for_dag(dag_id)
    if airflow_env.api_url:
        return {
            dag_id: _shown(airflow_env.api("GET", f"/api/v2/dags/{dag_id}/details"))
            for dag_id in EXPECTED_SUMMARIES
        }
    out = airflow_env.run_python(_CLI_DETAILS, *EXPECTED_SUMMARIES).stdout
    printed = [json.loads(line)[0] for line in out.splitlines() if line.startswith("[{")]  # not log lines
    return {details["dag_id"]: _shown(details) for details in printed}


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_SUMMARIES))
def test_summary_and_description_shown(
    airflow_env: AirflowEnv, shown_details: dict[str, tuple[str, str]], dag_id: str
) -> None:
    timetable = serialized_timetable(airflow_env, dag_id)
    summary, description = shown_details[dag_id]
    assert summary == EXPECTED_SUMMARIES[dag_id] == timetable.summary
    assert description == timetable.description
    assert description.startswith("One ") and "each run covers" in description, description
