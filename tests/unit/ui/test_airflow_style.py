"""The pages' look (ui/airflow_style.py) and a refused filter answered inline (ui/filter_errors.py), without a browser.

The script itself (theme, UI timezone) runs in Chromium in tests/integration/test_ui_live.py.
"""

from __future__ import annotations

import html
import re

import pytest

from airflow_smart_ext.ui import airflow_style, calendars_page, filter_errors, waits_page
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from airflow_smart_ext.ui.web_common import CalendarsQuery
from tests.unit.ui.helpers import NOW, sql_check, worker_first

TYPED = {"dag_id": 'd"<x>', "conn_id": "warehouse", "due_within": "٣٠", "sort": "deadline", "limit": "5"}


@pytest.mark.parametrize(
    ("path", "is_page"),
    [
        ("/smart-ext/waits", True),
        ("/root/smart-ext/waits", True),
        ("/smart-ext/calendars", True),
        ("/smart-ext/api/waits", False),
        ("/smart-ext/api/calendars", False),
        ("/smart-ext/other", False),
    ],
)
def test_a_page_answers_a_refused_filter_with_itself_and_json_with_json(path: str, is_page: bool) -> None:
    page = filter_errors.error_page(path, "due_within must be a number; got '٣٠'", TYPED)
    assert (page is not None) == is_page
    if page is not None:
        assert airflow_style.filter_error("due_within must be a number; got '٣٠'") in page
        assert page.index('id="query-error"') < page.index("<form")  # above the form that holds the value
        assert "<table" not in page and airflow_style.LOOK_SCRIPT in page


def test_the_waits_form_keeps_every_typed_value_escaped() -> None:
    page = waits_page.render_waits_error("bad", TYPED)
    for name, value in TYPED.items():
        if name == "sort":
            assert f'<option value="{value}" selected>' in page
        elif name == "limit":
            assert f'<input type="hidden" name="limit" value="{value}">' in page
        else:
            assert f'name="{name}" value="{html.escape(value)}"' in page, name
    assert "<x>" not in page


def test_the_calendars_form_keeps_every_typed_value() -> None:
    page = calendars_page.render_calendars_error(
        "runs must be", {"dag_id": "sales", "runs": "many", "past": "2"}
    )
    for name, value in (("dag_id", "sales"), ("runs", "many"), ("past", "2")):
        assert f'name="{name}"' in page and f'value="{value}"' in page
    ok = calendars_page.render_calendars([], "", CalendarsQuery(dag_id="sales", runs=7, past=3))
    assert 'value="sales"' in ok and 'value="7"' in ok and 'value="3"' in ok


@pytest.mark.parametrize(("count", "shown"), [(1, "alone"), (2, "2 waits"), (7, "7 waits")])
def test_shared_with_says_alone_for_a_wait_that_shares_with_none(count: int, shown: str) -> None:
    waits = [worker_first(sql_check(), dag_id="d", task_id=f"t{i}") for i in range(count)]
    page = waits_page.render_waits(build_report(waits, WaitsQuery(), NOW), WaitsQuery(), lambda row: "/x")
    assert page.count(f'<td class="num">{shown}<') == count


def test_times_are_marked_for_the_ui_timezone_and_ids_do_not_wrap() -> None:
    report = build_report([worker_first(sql_check(), dag_id="d", task_id="t")], WaitsQuery(), NOW)
    page = waits_page.render_waits(report, WaitsQuery(), lambda row: "/x", default_timezone="Europe/Paris")
    row = report["waits"][0]
    assert (
        airflow_style.ui_time(row["next_check"]) in page
        and airflow_style.ui_time(report["generated_at"]) in page
    )
    assert '<html lang="en" data-default-timezone="Europe/Paris">' in page
    assert f'<span class="id">{row["run_id"]}</span>' in page and ".id{white-space:nowrap}" in page
    assert airflow_style.ui_time(None) == "" and "data-default-timezone" not in airflow_style.html_attributes(
        None
    )


def test_the_dark_colours_cover_every_light_one() -> None:
    light, dark = (
        set(re.findall(r"(--[a-z-]+):", block)) for block in airflow_style.STYLE.split(":root")[1:3]
    )
    assert light == dark and {"--fg", "--bg", "--bad", "--link"} <= light
