"""The Waits view's watchers (ui/watchers_report.py), from generated rows: the watermark and the last event
as Airflow keeps them, who serves each watcher, the filters and the counts."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from airflow_smart_ext.triggers.watermark import Watermark
from airflow_smart_ext.ui import waits_page
from airflow_smart_ext.ui.serving import Triggerer, Triggerers
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from airflow_smart_ext.ui.watchers_report import (
    UNREADABLE,
    AssetEvent,
    LiveWatcher,
    add_watchers,
    polls,
    watcher_rows,
)
from airflow_smart_ext.wait_model.watcher_state import state_store_key
from airflow_smart_ext.watchers import sql_condition
from tests.unit.ui.helpers import NOW

LIVE = Triggerer(7, "host-a", NOW - 2)
DEAD = Triggerer(8, "host-b", NOW - 600)
TRIGGERERS = Triggerers(30.0, (LIVE,))


def _kwargs(sql: str = "SELECT max(day) FROM t", **overrides: Any) -> dict[str, Any]:
    check = sql_condition("warehouse", sql)
    return {
        "check": check,
        "poke_interval": 60.0,
        "max_wait": 600.0,
        "backoff_factor": 2.0,
        "jitter": "full",
        "splay": 0.0,
        "value_key": None,
        "report_first_value": True,
        "check_timeout": None,
        "rate_limit": None,
        "transient_errors": [],
        "state_key": None,
        "share": True,
        **overrides,
    }


def _watcher(
    name: str = "w",
    *,
    mark: Watermark | None = None,
    event: AssetEvent | None = None,
    holder: Triggerer | None = LIVE,
    kwargs: dict[str, Any] | None = None,
) -> LiveWatcher:
    kwargs = kwargs or _kwargs()
    key = state_store_key(kwargs["check"], kwargs["value_key"], kwargs["state_key"])
    return LiveWatcher(
        asset="orders",
        asset_uri="s3://b/orders",
        name=name,
        trigger_id=1,
        shown_kwargs=kwargs,
        state_key=key,
        state={} if mark is None else {key: mark.to_record(), f"{key}-other": {"format": 1, "seq": 99}},
        state_updated_at={} if mark is None else {key: "2026-11-27T10:00:00+00:00"},
        last_event=event,
        triggerer_id=None if holder is None else holder.job_id,
        holder=holder,
    )


MARK_CASES = [None, Watermark("d1", 1), Watermark("d2", 4, pending="d3")]
EVENT_CASES = [
    None,
    AssetEvent(
        "2026-11-27T10:00:00+00:00", {"value": "d1", "seq": 1, "previous": None, "redelivered": False}
    ),
    AssetEvent("2026-11-27T11:00:00+00:00", {"value": "d3", "seq": 5, "previous": "d2", "redelivered": True}),
    AssetEvent("2026-11-27T12:00:00+00:00", None),  # an event not from a trigger (a task's outlet, the API)
    AssetEvent("2026-11-27T12:00:00+00:00", {"something": "else"}),  # another trigger's payload
]


@pytest.mark.parametrize(("mark", "event"), list(itertools.product(MARK_CASES, EVENT_CASES)))
def test_a_watchers_row_says_what_airflow_keeps_of_it(
    mark: Watermark | None, event: AssetEvent | None
) -> None:
    (row,) = watcher_rows([_watcher(mark=mark, event=event)], TRIGGERERS, NOW)
    if mark is None:
        assert (
            row["last_seq"] is row["last_value"] is row["handing_over"] is row["watermark_updated_at"] is None
        )
    else:
        assert (row["last_value"], row["last_seq"], row["handing_over"]) == (
            mark.value,
            mark.seq,
            mark.pending,
        )
        assert row["watermark_updated_at"] == "2026-11-27T10:00:00+00:00"
    ours = event is not None and event.payload is not None and "seq" in event.payload
    assert row["last_event_at"] == (None if event is None else event.at)
    assert row["last_event_seq"] == (event.payload["seq"] if ours else None)  # type: ignore[union-attr]
    assert row["last_event_value"] == (event.payload["value"] if ours else None)  # type: ignore[union-attr]
    assert row["last_event_redelivered"] == (event.payload["redelivered"] if ours else None)  # type: ignore[union-attr]
    page = waits_page.render_waits(
        add_watchers(
            build_report([], WaitsQuery(), NOW), [_watcher(mark=mark, event=event)], TRIGGERERS, NOW
        ),
        WaitsQuery(),
        lambda r: "/x",
    )
    assert page.count('<tr data-asset="orders"') == 1
    assert ("handing over" in page) == (mark is not None and mark.pending is not None)
    assert ("sent again after a restart" in page) == (ours and bool(event.payload["redelivered"]))  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("holder", "served", "reason"),
    [(LIVE, 7, None), (DEAD, None, "is dead"), (None, None, "no triggerer holds its trigger")],
)
def test_who_serves_a_watcher_and_the_alert_that_counts_the_unserved(
    holder: Triggerer | None, served: int | None, reason: str | None
) -> None:
    report = add_watchers(build_report([], WaitsQuery(), NOW), [_watcher(holder=holder)], TRIGGERERS, NOW)
    (row,) = report["watchers"]
    assert (row["served_by"] or {}).get("job_id") == served
    assert (reason is None) == (row["unserved_reason"] is None)
    assert reason is None or reason in row["unserved_reason"], row
    assert report["summary"]["watchers"] == 1 and report["summary"]["unserved_watchers"] == (
        reason is not None
    )
    page = waits_page.render_waits(report, WaitsQuery(), lambda r: "/x")
    assert ("1 watcher no live triggerer serves" in page) == (reason is not None)


def test_the_view_filters_watchers_by_connection_and_sensor_class() -> None:
    sql = _watcher("sql")
    sensor_kwargs = _kwargs()
    sensor_kwargs["check"] = {
        "type": "sensor",
        "classpath": "pkg.mod.FileSensor",
        "kwargs": {"filepath": "/x"},
        "context": {"task_id": "condition_watcher"},
    }
    sensor = _watcher("sensor", kwargs=sensor_kwargs)
    for conn_id, sensor_class, names in [
        (None, None, {"sql", "sensor"}),
        ("warehouse", None, {"sql"}),
        ("other", None, set()),
        (None, "FileSensor", {"sensor"}),
        (None, "pkg.mod.FileSensor", {"sensor"}),
        (None, "Nope", set()),
    ]:
        report = add_watchers(
            build_report([], WaitsQuery(), NOW),
            [sql, sensor],
            TRIGGERERS,
            NOW,
            WaitsQuery(conn_id=conn_id, sensor_class=sensor_class),
        )
        assert {row["watcher"] for row in report["watchers"]} == names, (conn_id, sensor_class)


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({}, "every 1m, x2 per check without a new value, up to 10m, full jitter"),
        ({"backoff_factor": 1.0, "jitter": "none"}, "every 1m;"),
        ({"max_wait": 60.0}, "every 1m, full jitter;"),
    ],
)
def test_how_a_watcher_polls_in_words(overrides: dict[str, Any], words: str) -> None:
    assert polls(_kwargs(**overrides)).startswith(words)


@pytest.mark.parametrize(
    "parameters",
    [{"t": "hunter2"}, ["hunter2"], {"nested": {"deep": ["x", "hunter2"]}}],
    ids=["dict", "list", "nested"],
)
def test_bound_values_never_show_and_the_key_is_the_real_ones(parameters: Any) -> None:
    """Not sealed, and the server's masker does not know a value the DAG read at parse: every value is "***"."""
    kwargs = _kwargs("SELECT 1 WHERE :t = 1")
    kwargs["check"] = {**kwargs["check"], "parameters": parameters}
    key = state_store_key(kwargs["check"], None, None)
    watcher = LiveWatcher(
        "orders", "orders", "w", 1, kwargs, key, {key: Watermark("d", 2).to_record()}, {}, None, None, None
    )
    (row,) = watcher_rows([watcher], TRIGGERERS, NOW)
    assert "hunter2" not in repr(row) and "***" in row["condition"], row["condition"]
    assert row["last_seq"] == 2 and row["state_key"] == key


def test_a_watcher_whose_kwargs_cannot_be_read_says_so_and_the_rest_stays() -> None:
    broken = LiveWatcher("orders", "orders", "broken", 2, {}, "", {}, {}, None, LIVE.job_id, LIVE)
    rows = watcher_rows([broken, _watcher("fine")], TRIGGERERS, NOW)
    by_name = {row["watcher"]: row for row in rows}
    assert by_name["broken"]["condition"] == UNREADABLE and by_name["broken"]["state_key"] is None
    assert by_name["broken"]["served_by"]["job_id"] == LIVE.job_id
    assert by_name["fine"]["condition"].startswith("SQL on warehouse")


def test_a_watchers_last_check_is_read_beside_its_watermark() -> None:
    """3.3+: the record the watcher keeps beside its watermark; 3.0-3.2: nowhere to keep one, said plainly."""
    from dataclasses import replace

    from airflow_smart_ext.wait_model.last_check import STATE_KEY_SUFFIX, LastCheck

    plain = _watcher(mark=Watermark("d1", 1))
    record = LastCheck("transient error", NOW, NOW - 600, 7, "ConnectionRefusedError").to_record()
    recorded = replace(plain, state={**plain.state, plain.state_key + STATE_KEY_SUFFIX: record})
    (row,) = watcher_rows([recorded], TRIGGERERS, NOW)
    assert row["last_check"]["errors"] == 7 and row["last_check"]["error_class"] == "ConnectionRefusedError"
    assert row["last_outcome"].startswith("transient error (ConnectionRefusedError) x7 since ")
    assert row["last_value"] == "d1"  # the watermark still reads
    (row,) = watcher_rows([plain], TRIGGERERS, NOW)
    assert (row["last_check"], row["last_outcome"]) == (None, "none recorded yet")
    (row,) = watcher_rows([replace(plain, outcome_recorded=False)], TRIGGERERS, NOW)
    assert row["last_outcome"] == "not recorded on Airflow 3.x<3.3"
    report = add_watchers(build_report([], WaitsQuery(), NOW), [recorded], TRIGGERERS, NOW)
    page = waits_page.render_waits(report, WaitsQuery(), lambda r: "/x")
    assert "transient error (ConnectionRefusedError) x7" in page and "Last outcome" in page


# --- a watcher's due time (issue 45): late since which due time, told or not, or its next due time --------

DUE_FORM = {
    "at": "14:00",
    "after": None,
    "lag": 0,
    "timezone": "UTC",
    "calendar": None,
    "reference": "data_interval_end",
}
TODAY_DUE = NOW - 800  # Monday 2026-09-21 14:00 UTC


def _due_watcher(name: str, record: dict[str, Any] | None, due: Any = DUE_FORM) -> LiveWatcher:
    from airflow_smart_ext.wait_model.absence import LATE_KEY_SUFFIX

    kwargs = _kwargs(state_key=name, **({} if due is None else {"due": due, "on_late": []}))
    watcher = _watcher(name, kwargs=kwargs)
    state = {} if record is None else {watcher.state_key + LATE_KEY_SUFFIX: record}
    return LiveWatcher(**{**watcher.__dict__, "state": state})


def _record(**fields: Any) -> dict[str, Any]:
    from airflow_smart_ext.wait_model.absence import AbsenceRecord

    return AbsenceRecord(**{"since": NOW - 2 * 86400, **fields}).to_record()


def test_a_watchers_due_time_late_told_or_not_met_or_next() -> None:
    watchers = [
        _due_watcher("told", _record(told=TODAY_DUE)),
        _due_watcher("not_yet_told", _record(told=TODAY_DUE - 86400)),
        _due_watcher("met", _record(landed=TODAY_DUE - 3600)),
        _due_watcher("begun_after", _record(since=TODAY_DUE + 60)),
        _due_watcher("no_record", None),
        _due_watcher("no_due", None, due=None),
    ]
    report = add_watchers(build_report([], WaitsQuery(), NOW), watchers, TRIGGERERS, NOW)
    rows = {row["watcher"]: row for row in report["watchers"]}
    due = {
        name: (row["due"], row["due_in"], row["late_by"], row["late_alerted"]) for name, row in rows.items()
    }
    today, tomorrow = "2026-09-21T14:00:00.000+00:00", "2026-09-22T14:00:00.000+00:00"
    assert due == {
        "told": (today, None, 800.0, True),
        "not_yet_told": (today, None, 800.0, False),
        "met": (tomorrow, 86400 - 800.0, None, None),
        "begun_after": (tomorrow, 86400 - 800.0, None, None),
        "no_record": (tomorrow, 86400 - 800.0, None, None),
        "no_due": (None, None, None, None),
    }
    assert rows["told"]["due_rule"] == "14:00 UTC on each day" and rows["no_due"]["due_rule"] is None
    assert report["summary"]["late_watchers"] == 2
    asked = WaitsQuery(late=True)
    late = add_watchers(build_report([], asked, NOW), watchers, TRIGGERERS, NOW, asked)
    assert sorted(row["watcher"] for row in late["watchers"]) == ["not_yet_told", "told"]
    page = waits_page.render_waits(late, WaitsQuery(late=True), lambda r: "/x")
    assert "2 watchers are past the due time and still waiting" in page
    assert page.count("late by 800s") == 2 and "(alert sent)" in page and "(alert at its next check)" in page
    from airflow_smart_ext.waits import render_text  # the CLI's table

    table = render_text(late)
    assert table.count("LATE by 800s") == 2 and "(alerted)" in table and "(alert due)" in table
    assert "!! 2 watchers past their due time without a new value !!" in table
    broken = _due_watcher("broken", None, due={"at": "25:00"})
    (row,) = watcher_rows([broken], TRIGGERERS, NOW)
    assert row["due_rule"] == "unreadable due time" and row["due"] is None
