"""No silent never-run (issue 24): the first day a DAG's schedule needs beyond its calendar's holiday data,
and the DAG policy that turns it into an import error.

One row per case: (timetable, start_date, end_date, catchup, now) -> the first uncovered local day or None.
`holidays` covers BYMA from 2026, XETR from 2016, NYSE and the rest up to 2100.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)
from airflow_smart_ext.timetables.uncovered_day import coverage_problem, first_uncovered_day

UTC = dt.timezone.utc
D = dt.date.fromisoformat


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


class Case(NamedTuple):
    id: str
    timetable: Any
    start: str | None
    catchup: bool
    now: str
    expected: str | None
    end: str | None = None


NOW = "2026-11-26T12:00:00"
NYSE, BYMA = BusinessCalendar(market="NYSE"), BusinessCalendar(market="BYMA")
CASES = [
    # start_date before the data (both catchup modes: the scheduler searches from start_date)
    Case("byma-start-2025-catchup", BusinessDaysTimetable(market="BYMA"), "2025-12-29", True, NOW, "2025-12-29"),
    Case("byma-start-2025-no-catchup", BusinessDaysTimetable(market="BYMA"), "2025-12-29", False, NOW, "2025-12-29"),
    Case("xetr-start-2015", BusinessDaysTimetable(market="XETR"), "2015-01-05", True, NOW, "2015-01-05"),
    Case("algebra-nyse-and-byma-2025", BusinessDaysTimetable(calendar=NYSE & BYMA), "2025-06-02", True, NOW, "2025-06-02"),
    Case("monthly-byma-2025", MonthlyBusinessDayTimetable(n=-1, market="BYMA"), "2025-12-01", True, NOW, "2025-12-01"),
    Case("rolling-byma-lag-2025", RollingWindowTimetable(days=3, market="BYMA", lag=2), "2025-11-03", False, NOW, "2025-11-03"),
    Case("start-after-the-data", BusinessDaysTimetable(market="NYSE"), "2101-03-01", True, NOW, "2101-03-01"),
    # covered: unaffected
    Case("nyse-2025", BusinessDaysTimetable(market="NYSE"), "2025-01-01", True, NOW, None),
    Case("byma-start-2026", BusinessDaysTimetable(market="BYMA"), "2026-01-05", True, NOW, None),
    Case("rolling-byma-window-before-start", RollingWindowTimetable(days=5, market="BYMA"), "2026-01-01", True, NOW, None),
    Case("no-start-date", BusinessDaysTimetable(market="BYMA"), None, False, NOW, None),
    Case("every-day-1900", DelayedDailyTimetable(), "1900-01-01", True, NOW, None),
    Case("own-lists-only-1800", BusinessDaysTimetable(calendar={"weekend": [6], "extra_holidays": ["1800-01-06"]}), "1800-01-01", True, NOW, None),
    # a window that looks back before the data: the first run's interval needs 2025 (catchup only)
    Case("byma-since-previous-catchup", BusinessDaysTimetable(market="BYMA", window="since_previous"), "2026-01-01", True, NOW, "2025-12-31"),
    Case("byma-since-previous-no-catchup", BusinessDaysTimetable(market="BYMA", window="since_previous"), "2026-01-01", False, NOW, None),
    # data that ends: flagged once the last covered run is due (its successor needs 2101), not before
    Case("nyse-end-two-runs-left", BusinessDaysTimetable(market="NYSE"), "2100-01-04", False, "2100-12-30T12:00:00", None),
    Case("nyse-end-last-run-not-due", BusinessDaysTimetable(market="NYSE"), "2100-01-04", False, "2100-12-31T12:00:00", None),
    Case("nyse-end-last-run-due", BusinessDaysTimetable(market="NYSE"), "2100-01-04", True, "2101-01-01T00:30:00", "2101-01-01"),
    Case("nyse-end-lag-2", BusinessDaysTimetable(market="NYSE", lag=2), "2100-01-04", False, "2100-12-31T12:00:00", "2101-01-01"),
    Case("nyse-end-lag-2-earlier", BusinessDaysTimetable(market="NYSE", lag=2), "2100-01-04", False, "2100-12-30T12:00:00", None),
    Case("monthly-end", MonthlyBusinessDayTimetable(n=1, market="NYSE"), "2100-01-04", False, "2100-12-02T12:00:00", "2101-01-01"),
    Case("monthly-end-earlier", MonthlyBusinessDayTimetable(n=1, market="NYSE"), "2100-01-04", False, "2100-11-02T12:00:00", None),
    Case("end-date-before-the-gap", BusinessDaysTimetable(market="NYSE"), "2100-01-04", True, "2101-01-01T00:30:00", None, "2100-12-31T00:00:00"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_first_uncovered_day(case: Case) -> None:
    gap = first_uncovered_day(
        case.timetable.engine,
        start=at(case.start) if case.start else None,
        end=at(case.end) if case.end else None,
        catchup=case.catchup,
        now=at(case.now),
    )
    assert (gap.day if gap else None) == (D(case.expected) if case.expected else None)


FROM_START = [c for c in CASES if c.expected and c.start and D(c.expected) == D(c.start)]


@pytest.mark.parametrize("case", FROM_START, ids=[c.id for c in FROM_START])
def test_a_flagged_start_date_really_stops_the_scheduler(case: Case) -> None:
    """What the policy prevents: Airflow's first next_dagrun_info for such a DAG raises (and the scheduler
    only logs it), so the DAG would never get a run."""
    from airflow_smart_ext.calendars import HolidayYearOutOfRange
    from airflow_smart_ext.compat.timetables import TimeRestriction

    restriction = TimeRestriction(at(case.start), None, case.catchup)
    with pytest.raises(HolidayYearOutOfRange):
        case.timetable.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)


def test_message_names_calendar_years_and_day() -> None:
    problem = coverage_problem(
        BusinessDaysTimetable(market="BYMA"), start=at("2025-12-29"), end=None, catchup=True, now=at(NOW)
    )
    assert problem is not None
    assert "market 'BYMA' 2026-2100" in problem
    assert "covers 2026-2100 only" in problem
    assert "start_date 2025-12-29 (catchup=True)" in problem
    assert "move start_date to 2026-01-01 or later" in problem


def _dag(dag_id: str, timetable: Any, start: str, catchup: bool = True) -> Any:
    from airflow import DAG

    return DAG(dag_id, schedule=timetable, start_date=at(start), catchup=catchup)


def test_airflow_calls_the_registered_policy() -> None:
    """Through Airflow's own policy hook: the `airflow.policy` entry point is loaded by airflow.settings."""
    from airflow import settings

    with pytest.raises(
        AirflowClusterPolicyViolation, match=r"DAG 'cov_byma': BusinessDaysTimetable: .*2025-12-29"
    ):
        settings.dag_policy(_dag("cov_byma", BusinessDaysTimetable(market="BYMA"), "2025-12-29"))
    settings.dag_policy(
        _dag("cov_nyse", BusinessDaysTimetable(market="NYSE"), "2026-01-05")
    )  # covered: passes


def test_policy_off_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow import settings

    uncovered = _dag("cov_byma_off", BusinessDaysTimetable(market="BYMA"), "2025-12-29")
    with pytest.raises(AirflowClusterPolicyViolation, match="DAG 'cov_byma_off'"):  # switched on: refused
        settings.dag_policy(uncovered)
    monkeypatch.setenv("AIRFLOW__SMART_EXT__CHECK_HOLIDAY_COVERAGE", "False")
    assert settings.dag_policy(uncovered) == []  # switched off: every policy hook passes it, ours too


def test_policy_ignores_other_timetables() -> None:
    from airflow_smart_ext.policy import dag_policy

    read: list[str] = []

    class Foreign:
        """A DAG whose every attribute read is recorded: only its timetable may be read."""

        def __getattribute__(self, name: str) -> Any:
            read.append(name)
            if name == "timetable":
                return object()
            raise AssertionError(f"the policy read {name!r} of a DAG that is not ours")

    assert dag_policy(dag=Foreign()) is None
    assert read == ["timetable"]


def test_policy_never_fails_a_task_being_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker parses the file to run a task of an existing run (Airflow's parsing context): no check."""
    from airflow import settings

    uncovered = _dag("cov_byma_task", BusinessDaysTimetable(market="BYMA"), "2025-12-29")
    # The dag-processor's parse: refused.
    with pytest.raises(AirflowClusterPolicyViolation, match="DAG 'cov_byma_task'"):
        settings.dag_policy(uncovered)
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "cov_byma_task")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "noop")
    assert settings.dag_policy(uncovered) == []  # the worker's parse of the same file: no check
