"""The Calendars view (issue 26): reports from real timetables, the month grid, the page and the DB source."""

from __future__ import annotations

import calendar as stdlib_calendar
import datetime
import html
import json
from html.parser import HTMLParser
from typing import Any

import pendulum
import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    DueTime,
    MonthlyBusinessDayTimetable,
)
from airflow_smart_ext.ui.calendars_model import WEEKDAYS, calendar_report, week_start
from airflow_smart_ext.ui.calendars_page import render_calendars
from airflow_smart_ext.ui.web_common import CalendarsQuery
from tests.unit.ui.helpers import NUMERIC_PARAMETERS, REFUSED_NUMBERS

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 20, 12, 0, tzinfo=UTC)  # a Friday; Thanksgiving is Thu 2026-11-26
THANKSGIVING = datetime.date(2026, 11, 26)
EXTRA = datetime.date(2026, 12, 7)  # a Monday made a holiday by the calendar's own list


def business_timetable() -> BusinessDaysTimetable:
    calendar = BusinessCalendar(country="US", extra_holidays=[EXTRA])
    return BusinessDaysTimetable(calendar, timezone="America/New_York", delay=datetime.timedelta(hours=6))


def cells(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        cell["date"]: cell
        for month in report["month"]["months"]
        for week in month["weeks"]
        for cell in week
        if cell is not None
    }


def instants(run: dict[str, Any]) -> tuple[datetime.datetime, ...]:
    keys = ("data_interval_start", "data_interval_end", "run_after")
    return tuple(datetime.datetime.fromisoformat(run[key]) for key in keys)


@pytest.mark.parametrize(
    "timetable",
    [business_timetable(), MonthlyBusinessDayTimetable(n=-1, country="US"), DelayedDailyTimetable()],
    ids=["business-days", "last-business-day", "daily"],
)
def test_the_next_runs_are_what_the_timetable_itself_schedules(timetable: Any) -> None:
    report = calendar_report("d", timetable, NOW, runs=6, past=2)
    # independently: the scheduler's own API, with catchup from well before now, first runs due after now
    infos = timetable.iter_runs(NOW - datetime.timedelta(days=120), 200)
    expected = [info for info in infos if info.run_after > NOW][:6]
    assert [instants(run) for run in report["next_runs"]] == [
        (info.data_interval.start, info.data_interval.end, info.run_after) for info in expected
    ]
    latest_due = [info for info in infos if info.run_after <= NOW][-2:]
    assert [instants(run) for run in report["previous_runs"]] == [
        (info.data_interval.start, info.data_interval.end, info.run_after) for info in latest_due
    ]
    assert report["error"] is None and report["summary"] == timetable.summary


def test_a_holiday_is_skipped_with_its_name_and_marked_in_the_grid() -> None:
    report = calendar_report("d", business_timetable(), NOW, runs=15, past=1)
    skipped = {skip["date"]: skip["reason"] for skip in report["skipped"]}
    assert skipped[THANKSGIVING.isoformat()] == "US holiday: Thanksgiving Day"
    assert skipped[EXTRA.isoformat()] == "extra holiday"
    assert THANKSGIVING.isoformat() not in {run["day"] for run in report["next_runs"]}
    grid = cells(report)
    for day in (THANKSGIVING, EXTRA):
        assert grid[day.isoformat()]["classes"] == ["holiday"]
    assert "Thanksgiving Day" in grid[THANKSGIVING.isoformat()]["title"]
    assert grid["2026-11-20"]["classes"] == ["business", "run", "today"]


def test_weekends_and_business_days_are_marked_on_every_day_of_both_months() -> None:
    report = calendar_report("d", business_timetable(), NOW, runs=3, past=0)
    grid = cells(report)
    assert len(grid) == 30 + 31  # November and December 2026
    holidays = BusinessCalendar(country="US").holidays_in(2026) | {EXTRA}  # the library's list, and ours
    assert {THANKSGIVING, datetime.date(2026, 12, 25)} <= holidays
    for iso, cell in grid.items():
        day = datetime.date.fromisoformat(iso)
        if day in holidays:
            assert cell["classes"] == ["holiday"], cell
        elif day.weekday() >= 5:
            assert cell["classes"] == ["weekend"], cell
            assert "weekend (Sat/Sun)" in cell["title"]
        else:
            assert cell["classes"][:2] == ["business", "run"], cell
    assert sum("weekend" in cell["classes"] for cell in grid.values()) == 17  # 9 in Nov 2026, 8 in Dec


def test_calendar_algebra_days_are_closed_and_a_holiday_wins_over_a_weekend() -> None:
    us, gb = BusinessCalendar(country="US"), BusinessCalendar(country="GB")
    report = calendar_report("d", BusinessDaysTimetable(us - gb), NOW, runs=1)  # US open while GB is closed
    grid = cells(report)
    assert [iso for iso, cell in grid.items() if "run" in cell["classes"]] == [
        "2026-12-28"
    ]  # a UK bank holiday
    assert grid["2026-11-19"]["classes"] == ["closed"] and "GB open (excluded)" in grid["2026-11-19"]["title"]
    assert report["next_runs"][0]["day"] == "2026-12-28"
    fri_sat = BusinessCalendar(weekend=(4, 5))
    christmas = cells(calendar_report("d", BusinessDaysTimetable(us & fri_sat), NOW, runs=1))["2026-12-25"]
    assert christmas["classes"] == ["holiday"]  # a Friday: both a US holiday and a Fri/Sat weekend day
    assert "US holiday: Christmas Day" in christmas["title"] and "weekend (Fri/Sat)" in christmas["title"]


def assert_laid_out(month: dict[str, Any]) -> None:
    """Every day of the month once, under the column of its weekday, weeks of 7 in order."""
    columns = month["weekdays"]
    assert len(columns) == 7 and set(columns) == set(WEEKDAYS)
    for week in month["weeks"]:
        assert len(week) == 7
        for column, cell in zip(columns, week, strict=True):
            if cell is not None:
                assert f"{datetime.date.fromisoformat(cell['date']):%a}" == column, cell
    days = [cell["day"] for week in month["weeks"] for cell in week if cell is not None]
    assert days == list(range(1, stdlib_calendar.monthrange(month["year"], month["month"])[1] + 1))


def test_the_grid_starts_weeks_on_monday_with_each_month_in_place() -> None:
    report = calendar_report("d", business_timetable(), datetime.datetime(2027, 1, 15, tzinfo=UTC), runs=1)
    titles = [(month["year"], month["month"]) for month in report["month"]["months"]]
    assert titles == [(2027, 1), (2027, 2)]
    for month in report["month"]["months"]:
        assert month["weekdays"][0] == "Mon"
        first_week = month["weeks"][0]
        first_weekday = datetime.date(month["year"], month["month"], 1).weekday()
        assert first_week[first_weekday]["day"] == 1 and first_week[:first_weekday] == [None] * first_weekday
        assert_laid_out(month)


def _first_weekdays(timetable: Any, now: datetime.datetime) -> list[str]:
    report = calendar_report("d", timetable, now, runs=1)
    assert report["error"] is None
    for month in report["month"]["months"]:
        assert_laid_out(month)
        weekend = [
            cell["date"]
            for week in month["weeks"]
            for cell in week
            if cell and cell["classes"] == ["weekend"]
        ]
        # the weekend closes the week: its days are in the last columns, never split across two rows' ends
        assert weekend
        assert all(month["weekdays"].index(f"{datetime.date.fromisoformat(d):%a}") >= 5 for d in weekend)
    return [month["weekdays"][0] for month in report["month"]["months"]]


@pytest.mark.parametrize(
    ("calendar", "now", "expected"),
    [
        (BusinessCalendar(country="US"), NOW, ["Mon", "Mon"]),
        (BusinessCalendar(country="IL"), NOW, ["Sun", "Sun"]),  # the library's weekend Fri/Sat
        # the UAE moved its weekend from Fri/Sat to Sat/Sun on 2022-01-01: December 2021 then January 2022
        (BusinessCalendar(country="AE"), datetime.datetime(2021, 12, 10, tzinfo=UTC), ["Sun", "Mon"]),
        (BusinessCalendar(country="AE"), datetime.datetime(2023, 5, 10, tzinfo=UTC), ["Mon", "Mon"]),
        (BusinessCalendar(country="AE"), datetime.datetime(2019, 5, 10, tzinfo=UTC), ["Sun", "Sun"]),
        (BusinessCalendar(weekend=("Thu", "Fri")), NOW, ["Sat", "Sat"]),  # a custom weekend
        (BusinessCalendar(country="IL", weekend=(5, 6)), NOW, ["Mon", "Mon"]),  # replaces the library's
        (BusinessCalendar(country="US") | BusinessCalendar(country="IL"), NOW, ["Sun", "Sun"]),  # closed Sat
    ],
    ids=["US", "IL", "AE-2021/2022", "AE-2023", "AE-2019", "custom-Thu-Fri", "IL-with-Sat-Sun", "US-or-IL"],
)
def test_weeks_start_the_day_after_the_calendars_weekend(
    calendar: BusinessCalendar, now: datetime.datetime, expected: list[str]
) -> None:
    assert _first_weekdays(BusinessDaysTimetable(calendar), now) == expected
    monthly = MonthlyBusinessDayTimetable(calendar=calendar, n=1)  # the monthly pick keeps its calendar's
    assert [m["weekdays"][0] for m in calendar_report("m", monthly, now)["month"]["months"]] == expected


def test_a_calendar_without_weekend_starts_weeks_on_monday() -> None:
    report = calendar_report("d", DelayedDailyTimetable(), NOW)
    assert [month["weekdays"][0] for month in report["month"]["months"]] == ["Mon", "Mon"]


@pytest.mark.parametrize(
    ("weekend", "start"),
    [((), 0), ((5, 6), 0), ((4, 5), 6), ((4,), 5), ((6,), 0), ((3, 4, 5), 6), ((2, 6), 0), ((0, 1), 2)],
)
def test_week_start_follows_the_weekend(weekend: tuple[int, ...], start: int) -> None:
    assert week_start(weekend) == start


def test_a_monthly_timetable_runs_on_one_business_day_and_says_why_not_the_others() -> None:
    report = calendar_report("m", MonthlyBusinessDayTimetable(n=3, country="US"), NOW, runs=2)
    runs = [iso for iso, cell in cells(report).items() if "run" in cell["classes"]]
    assert runs == ["2026-11-04", "2026-12-03"]  # Nov 2 Mon, 3 Tue, 4 Wed; Dec 1 Tue, 2 Wed, 3 Thu
    assert "not the 3rd US business day" in cells(report)["2026-11-05"]["title"]
    ranges = [skip for skip in report["skipped"] if "days" in skip]
    assert ranges and all(skip["reason"].endswith("not the 3rd US business day") for skip in ranges)
    assert [skip["date"] for skip in report["skipped"]] == sorted(skip["date"] for skip in report["skipped"])


def test_stored_runs_are_shown_as_previous_runs_in_the_timetables_zone() -> None:
    stored = {
        "run_id": "scheduled__x",
        "state": "failed",
        "data_interval_start": datetime.datetime(2026, 11, 19, 5, tzinfo=UTC),
        "data_interval_end": datetime.datetime(2026, 11, 20, 5, tzinfo=UTC),
        "run_after": datetime.datetime(2026, 11, 20, 11, tzinfo=UTC),
        "path": "/dags/d/runs/scheduled__x",
    }
    report = calendar_report("d", business_timetable(), NOW.timestamp(), previous_runs=[stored])
    assert report["previous_runs"] == [
        {
            **stored,
            "data_interval_start": "2026-11-19T00:00:00-05:00",
            "data_interval_end": "2026-11-20T00:00:00-05:00",
            "run_after": "2026-11-20T06:00:00-05:00",
        }
    ]


def test_a_start_date_bounds_the_runs_and_the_grid() -> None:
    start = datetime.datetime(2026, 11, 24, 5, tzinfo=UTC)  # Tue 00:00 New York
    report = calendar_report("d", business_timetable(), NOW, runs=2, start_date=start)
    assert [run["day"] for run in report["next_runs"]] == ["2026-11-24", "2026-11-25"]
    assert report["previous_runs"] == []
    grid = cells(report)
    assert "run" not in grid["2026-11-23"]["classes"] and "run" in grid["2026-11-24"]["classes"]


def notes(report: dict[str, Any]) -> dict[str, str | None]:
    return {run["day"]: run["note"] for run in report["next_runs"]}


def test_the_note_names_the_holiday_before_a_run_and_stays_empty_for_an_ordinary_run() -> None:
    report = calendar_report("d", business_timetable(), NOW, runs=12, past=1)
    found = notes(report)
    assert found["2026-11-27"] == "after Thu 2026-11-26: US holiday: Thanksgiving Day"
    assert found["2026-12-08"] == "after Mon 2026-12-07: extra holiday"
    assert found["2026-11-23"] is None and found["2026-11-25"] is None  # after a weekend, a plain weekday
    page = render_calendars([report], "", CalendarsQuery())
    assert "<td>after Thu 2026-11-26: US holiday: Thanksgiving Day</td>" in page
    # US open while GB is closed: months apart, the US holidays between are counted, the algebra not listed
    us_not_gb = BusinessCalendar(country="US") - BusinessCalendar(country="GB")
    found = notes(calendar_report("d", BusinessDaysTimetable(us_not_gb), NOW, runs=2, past=1))
    assert (
        found["2026-12-28"] == "after 9 holidays from Mon 2026-05-25 to Fri 2026-12-25 (see the skipped days)"
    )


def test_the_note_names_a_make_up_working_day() -> None:
    now = datetime.datetime(2026, 4, 20, tzinfo=UTC)
    by = BusinessCalendar(country="BY")  # Belarus works Saturday 2026-04-25 for a day off on 04-20
    assert notes(calendar_report("d", BusinessDaysTimetable(by), now, runs=5))["2026-04-25"] == (
        "BY make-up working day"
    )
    extra = BusinessCalendar(country="US", extra_business_days=["2026-11-21"])  # a Saturday
    assert notes(calendar_report("d", BusinessDaysTimetable(extra), NOW, runs=2))["2026-11-21"] == (
        "extra business day"
    )


def test_the_note_says_why_a_run_moves() -> None:
    lagged = BusinessDaysTimetable(country="US", lag=1, delay=datetime.timedelta(hours=6))
    report = calendar_report("d", lagged, NOW, runs=4, past=0)
    run_after = {run["day"]: run["run_after"] for run in report["next_runs"]}
    assert run_after["2026-11-25"] == "2026-11-27T06:00:00+00:00"  # T+1 of Wed 11-25
    assert notes(report)["2026-11-25"] == (
        "runs on Fri 2026-11-27, past Thu 2026-11-26: US holiday: Thanksgiving Day"
    )
    # America/Santiago springs forward at 00:00 on 2026-09-06: that day starts at 01:00
    santiago = DelayedDailyTimetable(timezone="America/Santiago")
    found = notes(calendar_report("d", santiago, datetime.datetime(2026, 9, 3, 12, tzinfo=UTC), runs=4))
    assert found == {
        "2026-09-03": None,
        "2026-09-04": None,
        "2026-09-05": "runs at Sun 01:00: Sun 00:00 does not exist in America/Santiago",
        "2026-09-06": None,
    }


def test_a_start_date_in_the_future_says_when_the_first_run_is() -> None:
    start = datetime.datetime(2027, 3, 1, 5, tzinfo=UTC)  # Mon 00:00 New York, months after NOW
    report = calendar_report("d", business_timetable(), NOW, runs=2, start_date=start)
    assert not any("run" in cell["classes"] for cell in cells(report).values())  # the grid has no run
    assert report["next_runs"][0]["run_after"] == "2027-03-02T06:00:00-05:00"
    assert report["notice"] == (
        "first run on Tue 2027-03-02 06:00 EST: the DAG's start_date (2027-03-01 00:00 EST) is in the future"
    )
    parsed = render_calendars([report], "", CalendarsQuery())
    assert f'<p class="notice">{html.escape(report["notice"])}</p>' in parsed
    assert calendar_report("d", business_timetable(), NOW, runs=2)["notice"] is None


def test_an_end_date_says_the_last_run_or_that_it_has_passed() -> None:
    passed = datetime.datetime(2026, 11, 10, 5, tzinfo=UTC)
    report = calendar_report("d", business_timetable(), NOW, runs=3, end_date=passed)
    assert report["next_runs"] == []
    assert report["notice"] == "no next run: the DAG's end_date (2026-11-10 00:00 EST) has passed"
    soon = datetime.datetime(2026, 11, 24, 5, tzinfo=UTC)  # Tue 00:00 New York: Fri, Mon, Tue still run
    report = calendar_report("d", business_timetable(), NOW, runs=5, end_date=soon)
    assert [run["day"] for run in report["next_runs"]] == ["2026-11-20", "2026-11-23", "2026-11-24"]
    assert report["notice"] == "last run for Tue 2026-11-24: the DAG's end_date is 2026-11-24 00:00 EST"


def test_a_calendar_beyond_its_holiday_data_reports_the_error_instead_of_raising() -> None:
    report = calendar_report("d", business_timetable(), datetime.datetime(2300, 6, 1, tzinfo=UTC))
    assert report["error"] and report["next_runs"] == [] and report["month"]["months"] == []
    page = render_calendars([report], "", CalendarsQuery())
    assert 'class="error"' in page


class _Page(HTMLParser):
    """The sections, month cells and text of a rendered page (as a browser would read them)."""

    def __init__(self) -> None:
        super().__init__()
        self.root: dict[str, str | None] | None = None
        self.sections: list[str | None] = []
        self.cells: dict[str, dict[str, str | None]] = {}
        self.links: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if attributes.get("id") == "calendars":
            self.root = attributes
        if tag == "section" and attributes.get("class") == "calendar":
            self.sections.append(attributes.get("data-dag-id"))
        if tag == "td" and attributes.get("data-date"):
            self.cells[f"{self.sections[-1]}/{attributes['data-date']}"] = attributes
        if tag == "a":
            self.links.append(attributes.get("href"))


def test_the_page_escapes_a_hostile_dag_id_and_shows_one_section_per_dag() -> None:
    hostile = "\"><script>alert('x')</script><b a='"
    reports = [
        calendar_report(hostile, business_timetable(), NOW),
        calendar_report("plain", DelayedDailyTimetable(), NOW),
    ]
    reports[0]["path"] = "/dags/%22%3E%3Cscript%3E"
    page = render_calendars(reports, "/root", CalendarsQuery())
    # our two scripts (FRAME_LINKS_SCRIPT, LOOK_SCRIPT) are the only ones; the hostile one is text
    assert page.count("<script>") == 2 and "<script>alert" not in page and "<b a=" not in page
    parsed = _Page()
    parsed.feed(page)
    assert parsed.root is not None and parsed.sections == [hostile, "plain"]
    holiday = parsed.cells[f"{hostile}/{THANKSGIVING.isoformat()}"]
    assert holiday["class"] == "holiday" and "Thanksgiving Day" in (holiday["title"] or "")
    assert "run" in (parsed.cells["plain/2026-11-26"]["class"] or "")
    assert "/root/dags/%22%3E%3Cscript%3E" in parsed.links
    assert "/root/smart-ext/api/calendars?runs=10&past=5" in parsed.links


def test_the_form_shows_what_was_asked_and_the_json_link_asks_the_same_in_a_new_tab() -> None:
    hostile = '"><b a="'
    page = render_calendars([], "/root", CalendarsQuery(hostile, 3, 0))
    fields = _Fields()
    fields.feed(page)
    assert fields.inputs == {"dag_id": hostile, "runs": "3", "past": "0"}
    # the JSON opens outside Airflow's UI router (a "_top" link there is the UI's 404 page)
    assert fields.json == {
        "class": "json",
        "href": "/root/smart-ext/api/calendars?dag_id=%22%3E%3Cb+a%3D%22&runs=3&past=0",
        "target": "_blank",
        "rel": "noopener",
    }


class _Fields(HTMLParser):
    """The form's input values and the JSON link's attributes, as a browser reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: dict[str | None, str | None] = {}
        self.json: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "input":
            self.inputs[attributes.get("name")] = attributes.get("value")
        if tag == "a" and attributes.get("class") == "json":
            self.json = attributes


def test_the_page_without_dags_says_so() -> None:
    assert "No DAG you may read" in render_calendars([], "", CalendarsQuery())


# --- the metadata DB ------------------------------------------------------------------------------------------


def test_load_calendars_reads_our_serialized_dags_and_their_latest_runs(calendars_db: None) -> None:
    from airflow.utils.session import create_session

    from airflow_smart_ext.ui.calendars_model import load_calendars

    with create_session() as session:
        reports = load_calendars(session, None, NOW, 3, past=2)
        assert load_calendars(session, [], NOW, 3) == []
        assert load_calendars(session, ["cal_cron", "missing"], NOW, 3) == []
        assert [r["dag_id"] for r in load_calendars(session, ["cal_business"], NOW, 3)] == ["cal_business"]
    assert [report["dag_id"] for report in reports] == ["cal_business"]
    assert json.loads(json.dumps(reports)) == reports  # the JSON endpoint's answer as it is
    report = reports[0]
    assert report["error"] is None and report["path"] == compat.web_urls.dag_page_path("cal_business")
    # the stored start_date (Tue 2026-11-24 00:00 New York) bounds the next runs
    assert [run["day"] for run in report["next_runs"]] == ["2026-11-24", "2026-11-25", "2026-11-27"]
    previous = report["previous_runs"]
    assert [(run["run_id"], run["state"]) for run in previous] == [
        ("scheduled__1", "failed"),
        ("scheduled__2", "running"),
    ]
    assert previous[0]["data_interval_start"] == "2026-11-17T00:00:00-05:00"
    assert previous[0]["path"] == compat.web_urls.dag_page_path("cal_business", "scheduled__1")


def test_each_next_run_says_when_its_waits_data_is_due_from_the_stored_dag(calendars_db: None) -> None:
    from airflow.utils.session import create_session

    from airflow_smart_ext.ui.calendars_model import load_calendars

    with create_session() as session:
        (report,) = load_calendars(session, ["cal_business"], NOW, 3, past=0)
    assert report["error"] is None and json.loads(json.dumps(report)) == report
    rules = {rule["label"]: rule for rule in report["due_rules"]}
    # no_due has none; a mapped task's .partial(due=) counts, and each of its .expand(due=[...]) by map index
    assert set(rules) == {"trades", "prices", "fx[0]", "fx[1]"}, rules
    assert (rules["fx[1]"]["task_id"], rules["fx[1]"]["map_index"]) == ("fx", 1)
    assert rules["trades"]["rule"] == (
        "the first 09:30 America/New_York on a NYSE business day at or after data_interval_end"
    )
    assert rules["prices"]["timezone"] == "Europe/London" and "(T+1)" in rules["prices"]["rule"]
    due = {run["day"]: {d["label"]: d["due"] for d in run["due"]} for run in report["next_runs"]}
    # by hand: day D's interval ends at D+1 00:00 New York (05:00 London); NYSE is shut on Thanksgiving
    # (Thu 11-26) and at the weekend; the GB rule is 07:00 London on the first business day, then one more;
    # fx's are the next 08:00 London and 16:00 Tokyo (07:00 UTC), any day
    assert due == {
        "2026-11-24": {
            "trades": "2026-11-25T09:30:00-05:00",
            "prices": "2026-11-26T07:00:00+00:00",
            "fx[0]": "2026-11-25T08:00:00+00:00",
            "fx[1]": "2026-11-25T16:00:00+09:00",
        },
        "2026-11-25": {
            "trades": "2026-11-27T09:30:00-05:00",
            "prices": "2026-11-27T07:00:00+00:00",
            "fx[0]": "2026-11-26T08:00:00+00:00",
            "fx[1]": "2026-11-26T16:00:00+09:00",
        },
        "2026-11-27": {
            "trades": "2026-11-30T09:30:00-05:00",
            "prices": "2026-12-01T07:00:00+00:00",
            "fx[0]": "2026-11-28T08:00:00+00:00",
            "fx[1]": "2026-11-28T16:00:00+09:00",
        },
    }
    page = render_calendars([report], "", CalendarsQuery())
    assert "<th>Data due</th>" in page and page.count('<td class="due">') == 3
    assert '<div data-task-id="trades">trades: <time datetime="2026-11-25T09:30:00-05:00">' in page
    assert '<li data-task-id="prices"><strong>prices</strong>: the first 07:00 Europe/London' in page
    assert (
        '<li data-task-id="fx" data-map-index="1"><strong>fx[1]</strong>: the first 16:00 Asia/Tokyo' in page
    )
    assert (
        '<div data-task-id="fx" data-map-index="0">fx[0]: <time datetime="2026-11-25T08:00:00+00:00">' in page
    )


def test_a_stored_due_time_this_release_cannot_read_is_said_and_the_others_still_shown() -> None:
    from airflow_smart_ext.timetables.due import SERIALIZED_KEY, serialized_due
    from airflow_smart_ext.ui.calendar_due import due_rules

    good = serialized_due(DueTime("09:30", market="NYSE", timezone="America/New_York"))
    dag = {
        "tasks": [
            {"__type": "operator", "__var": {"task_id": "good", SERIALIZED_KEY: good}},
            {"__type": "operator", "__var": {"task_id": "bad", SERIALIZED_KEY: '{"at": "9:30"}'}},
            {"__type": "operator", "__var": {"task_id": "plain"}},  # as the previous release stored it
            {"task_id": "old_layout", SERIALIZED_KEY: good},  # 2.11 may store a task without its type
            {"task_id": "a_list", SERIALIZED_KEY: "[1, 2]"},
            # a mapped task stored by the previous release: its .partial(due=DueTime(...)) as the object's repr
            {"task_id": "old_mapped", "partial_kwargs": {"due": "DueTime(the first 09:30 UTC on a day ...)"}},
        ]
    }
    rules = {rule.task_id: rule for rule in due_rules(dag)}
    assert set(rules) == {"good", "bad", "old_layout", "a_list", "old_mapped"}
    assert rules["bad"].due is None and "due.at: expected a time of day" in str(rules["bad"].error)
    for unreadable in ("a_list", "old_mapped"):
        assert "not a due time's dict form" in str(rules[unreadable].error), rules[unreadable]
    report = calendar_report("d", business_timetable(), NOW, runs=2, past=0, due=list(rules.values()))
    assert [[d["task_id"] for d in run["due"]] for run in report["next_runs"]] == [["good", "old_layout"]] * 2
    page = render_calendars([report], "", CalendarsQuery())
    assert '<li data-task-id="bad"><strong>bad</strong>: <span class="error">cannot read its due time' in page


def test_due_times_mapped_with_other_arguments_are_shown_by_item_in_order() -> None:
    from airflow_smart_ext.ui.calendar_due import due_rules

    dues = [DueTime(after=60 * (minutes + 1)).to_dict() for minutes in range(11)]
    expand = {"type": "dict-of-lists", "value": {"__type": "dict", "__var": {"due": dues, "sql": ["a", "b"]}}}
    dag = {"tasks": [{"__type": "operator", "__var": {"task_id": "m", "expand_input": expand}}]}
    labels = [rule.label for rule in due_rules(dag)]
    assert labels == [f"m (.expand due item {item})" for item in range(11)]  # item 2 before item 10
    assert not any(rule.for_instance(0) for rule in due_rules(dag))  # the product's map index is not known


def test_a_due_time_beyond_its_holiday_data_is_said_in_its_cell() -> None:
    from airflow_smart_ext.ui.calendar_due import DueRule

    late = datetime.datetime(2300, 6, 1, tzinfo=UTC)  # past the holidays library's years
    due = DueRule("t", DueTime("09:30", market="NYSE", timezone="America/New_York"))
    report = calendar_report("d", DelayedDailyTimetable(), late, runs=1, past=0, due=[due])
    ((cell,),) = [run["due"] for run in report["next_runs"]]
    assert cell["due"] is None and "HolidayYearOutOfRange" in cell["error"], cell
    assert '<span class="error">HolidayYearOutOfRange' in render_calendars([report], "", CalendarsQuery())


def test_the_run_link_and_dag_link_point_at_airflows_own_pages() -> None:
    expected = (
        "/dags/a%2Fb/runs/r%201" if compat.versions.AIRFLOW_V_3_0_PLUS else "/dags/a%2Fb/grid?dag_run_id=r+1"
    )
    assert compat.web_urls.dag_page_path("a/b", "r 1") == expected
    assert compat.web_urls.dag_page_path("a/b").startswith("/dags/a%2Fb")


def test_pendulum_datetimes_from_the_db_are_localized_too() -> None:
    stored = {"run_id": "r", "run_after": pendulum.datetime(2026, 11, 20, 11, tz="UTC"), "path": "/x"}
    report = calendar_report("d", business_timetable(), NOW, previous_runs=[stored])
    assert report["previous_runs"][0]["run_after"] == "2026-11-20T06:00:00-05:00"


# --- one parser for every numeric parameter --------------------------------------------------------------------


def _parse(view: str, params: dict[str, str]) -> Any:
    from airflow_smart_ext.ui.waits_report import WaitsQuery
    from airflow_smart_ext.ui.web_common import calendars_query

    return WaitsQuery.from_params(params) if view == "waits" else calendars_query(params)


@pytest.mark.parametrize(("view", "name"), NUMERIC_PARAMETERS)
@pytest.mark.parametrize("text", REFUSED_NUMBERS)
def test_every_numeric_parameter_refuses_the_same_text_naming_itself(view: str, name: str, text: str) -> None:
    from airflow_smart_ext.ui.query_params import InvalidQuery

    with pytest.raises(InvalidQuery, match=rf"^{name} must be .*(ASCII digits|from \d+ to \d+)") as raised:
        _parse(view, {name: text})
    assert repr(text) in str(raised.value)  # the value as given, so the user sees what was refused


@pytest.mark.parametrize(("view", "name"), NUMERIC_PARAMETERS)
def test_an_empty_numeric_parameter_is_not_given(view: str, name: str) -> None:
    # an HTML form sends its empty fields: the default, as if the parameter were absent
    assert _parse(view, {name: ""}) == _parse(view, {}) and _parse(view, {name: " 7 "}) != _parse(view, {})
