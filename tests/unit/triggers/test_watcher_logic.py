"""Condition watchers, the pure half (issue 27): edges, the watermark across restarts, values, the schedule and
the arguments. Every promise is a table; each row is one case (Airflow-free: runs on every version)."""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

import pytest

from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.triggers.watermark import (
    EdgeTracker,
    ValueNotReportable,
    Watermark,
    latest_watermark,
    reportable_value,
)
from airflow_smart_ext.wait_model.parameters import WatcherArgumentError, watcher_arguments
from airflow_smart_ext.wait_model.timeline import PollSchedule

# --- edges: one report per new value -------------------------------------------------------------------

# (case, stored watermark, report_first_value, observed values, reported (value, seq, previous), final value)
EDGE_CASES = [
    (
        "fresh: every change once",
        None,
        True,
        [None, "d1", "d1", "d2", "d2", "d2", "d3"],
        [("d1", 1, None), ("d2", 2, "d1"), ("d3", 3, "d2")],
        "d3",
    ),
    ("fresh: no value yet, nothing", None, True, [None, None, None], [], None),
    (
        "fresh, baseline: the first value is not reported",
        None,
        False,
        ["d1", "d1", "d2"],
        [("d2", 1, "d1")],
        "d2",
    ),
    (
        "stored: the stored value is not reported again",
        Watermark("d2", 2),
        True,
        ["d2", "d2", "d3"],
        [("d3", 3, "d2")],
        "d3",
    ),
    (
        "stored: a baseline setting does not matter",
        Watermark("d2", 2),
        False,
        ["d3"],
        [("d3", 3, "d2")],
        "d3",
    ),
    ("a value going back is a new value", Watermark("d3", 3), True, ["d2", "d2"], [("d2", 4, "d3")], "d2"),
    ("None between values does not reset the edge", None, True, ["d1", None, "d1"], [("d1", 1, None)], "d1"),
    (
        "equal JSON values are one value",
        None,
        True,
        [{"day": "d1"}, {"day": "d1"}],
        [({"day": "d1"}, 1, None)],
        {"day": "d1"},
    ),
]


@pytest.mark.parametrize(
    ("stored", "report_first", "observed", "expected", "final"),
    [case[1:] for case in EDGE_CASES],
    ids=[case[0] for case in EDGE_CASES],
)
def test_one_report_per_new_value(
    stored: Watermark | None, report_first: bool, observed: list[Any], expected: list[Any], final: Any
) -> None:
    tracker = EdgeTracker(stored, report_first)
    reports = []
    for value in observed:
        report = tracker.observe(value)
        if report is not None:
            reports.append((report.value, report.seq, report.previous))
            tracker.commit()
    assert reports == expected
    assert tracker.mark.value == final
    assert tracker.mark.pending is None


# --- restarts: the watermark's two steps read back ------------------------------------------------------

VALUES = ["d1", "d2", "d3"]

# (case, where the run before the restart stopped while handling "d2", reports after the restart)
CRASH_POINTS = [
    # the intent was never stored: d2 is seen again and reported once
    ("before the intent", "before_intent", [("d2", 2, "d1", False), ("d3", 3, "d2", False)]),
    # the event may not have reached Airflow: sent again (flagged), then the schedule goes on
    ("after the intent, before the commit", "after_intent", [("d2", 2, "d1", True), ("d3", 3, "d2", False)]),
    # committed: never again
    ("after the commit", "after_commit", [("d3", 3, "d2", False)]),
]


def _run_until(crash: str, store: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Observe VALUES, saving the watermark as the glue does, and stop at ``crash`` while handling d2."""
    tracker = EdgeTracker(None, True)
    reports = []
    for value in VALUES:
        if value == "d2" and crash == "before_intent":
            return reports
        report = tracker.observe(value)
        store["record"] = tracker.mark.to_record()  # the intent
        if report is None:
            continue
        reports.append((report.value, report.seq, report.previous, report.redelivered))
        if value == "d2" and crash == "after_intent":
            return reports
        tracker.commit()
        store["record"] = tracker.mark.to_record()
        if value == "d2" and crash == "after_commit":
            return reports
    return reports


@pytest.mark.parametrize(
    ("crash", "after"), [case[1:] for case in CRASH_POINTS], ids=[c[0] for c in CRASH_POINTS]
)
def test_a_restart_loses_no_value_and_repeats_only_an_uncommitted_one_flagged(
    crash: str, after: list[tuple[Any, ...]]
) -> None:
    store: dict[str, Any] = {}
    before = _run_until(crash, store)
    tracker = EdgeTracker(latest_watermark([store.get("record")]), True)
    reports = []
    redelivery = tracker.redelivery()
    if redelivery is not None:
        reports.append((redelivery.value, redelivery.seq, redelivery.previous, redelivery.redelivered))
        tracker.commit()
    for value in ["d2", "d2", "d3"]:  # the condition as the restarted watcher sees it
        report = tracker.observe(value)
        if report is not None:
            reports.append((report.value, report.seq, report.previous, report.redelivered))
            tracker.commit()
    assert reports == after
    # Never lost: every value is reported at least once over both runs; only a flagged one twice.
    everything = before + reports
    assert {report[0] for report in everything} == set(VALUES)
    unflagged = [report[0] for report in everything if not report[3]]
    assert len(unflagged) == len(set(unflagged))


@pytest.mark.parametrize("report_first", [True, False])
def test_a_rollback_after_a_refused_save_sees_the_same_value_again(report_first: bool) -> None:
    tracker = EdgeTracker(None, report_first)
    checkpoint = tracker.checkpoint()
    first = tracker.observe("d1")
    assert tracker.unsaved
    tracker.rollback(checkpoint)  # the store refused the intent (or the baseline)
    again = tracker.observe("d1")
    assert again == first  # the same decision: a report of d1, or d1 taken as the baseline again
    assert (tracker.mark.value, tracker.mark.pending) == ((None, "d1") if report_first else ("d1", None))


def test_observing_before_the_commit_is_a_programming_error() -> None:
    tracker = EdgeTracker(None, True)
    assert tracker.observe("d1") is not None
    with pytest.raises(RuntimeError, match="commit"):
        tracker.observe("d2")


# (case, records of the watched assets, the watermark chosen)
MERGE_CASES = [
    ("nothing stored", [None, None], None),
    ("one asset", [Watermark("d1", 1).to_record()], Watermark("d1", 1)),
    (
        "the furthest along wins",
        [Watermark("d1", 1).to_record(), Watermark("d2", 2).to_record()],
        Watermark("d2", 2),
    ),
    (
        "a pending value is ahead",
        [Watermark("d1", 1).to_record(), Watermark("d1", 1, "d2").to_record()],
        Watermark("d1", 1, "d2"),
    ),
    ("a new asset without a record", [None, Watermark("d2", 2).to_record()], Watermark("d2", 2)),
    ("not ours: ignored", [{"value": "x"}, {"format": 1, "seq": -1}, "text"], None),
]


@pytest.mark.parametrize(
    ("records", "expected"), [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES]
)
def test_the_watermark_of_several_watched_assets(records: list[Any], expected: Watermark | None) -> None:
    assert latest_watermark(records) == expected


# --- values --------------------------------------------------------------------------------------------

# (case, observed value, value_key, reported value)
VALUE_CASES = [
    ("text", "2026-01-02", None, "2026-01-02"),
    ("a date as ISO text", datetime.date(2026, 1, 2), None, "2026-01-02"),
    (
        "a datetime as ISO text",
        datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.timezone.utc),
        None,
        "2026-01-02T03:04:00+00:00",
    ),
    ("a Decimal as text", decimal.Decimal("12.50"), None, "12.50"),
    ("a tuple row as a list", (1, "a"), None, [1, "a"]),
    ("a dict", {"day": datetime.date(2026, 1, 2)}, None, {"day": "2026-01-02"}),
    ("one key of a dict", {"day": "d1", "rows": 5}, "day", "d1"),
    ("no value", None, "day", None),
]


@pytest.mark.parametrize(
    ("value", "key", "expected"), [c[1:] for c in VALUE_CASES], ids=[c[0] for c in VALUE_CASES]
)
def test_reportable_values(value: Any, key: str | None, expected: Any) -> None:
    assert reportable_value(value, key) == expected


# (case, observed value, value_key, words the error must contain)
BAD_VALUE_CASES = [
    ("NaN", math.nan, None, "JSON cannot carry"),
    ("an object", object(), None, "cannot travel in an asset event"),
    ("value_key on a non-dict", "d1", "day", "value_key='day'"),
    ("value_key missing", {"rows": 5}, "day", "['rows']"),
]


@pytest.mark.parametrize(
    ("value", "key", "words"), [c[1:] for c in BAD_VALUE_CASES], ids=[c[0] for c in BAD_VALUE_CASES]
)
def test_values_that_cannot_be_reported_say_why(value: Any, key: str | None, words: str) -> None:
    with pytest.raises(ValueNotReportable) as raised:
        reportable_value(value, key)
    assert words in str(raised.value)


# --- the schedule: backoff between checks, restarted after a new value ----------------------------------


def test_the_schedule_backs_off_and_restarts_at_the_initial_interval_after_a_new_value() -> None:
    policy = BackoffPolicy(initial=10, factor=2, cap=40, jitter="none")
    schedule = PollSchedule(policy, "seed", started_at=1000.0)
    times = []
    now = 1000.0
    for _ in range(5):
        scheduled = schedule.next_check(now)
        times.append(scheduled.at - 1000.0)
        schedule.done(scheduled)
        now = scheduled.at
    assert times == [0, 10, 30, 70, 110]  # 10, 20, 40, 40: backing off to the cap
    schedule.restart(now)  # the check at +110 saw a new value
    gaps = []
    for _ in range(3):
        scheduled = schedule.next_check(now)
        gaps.append(scheduled.at - now)
        schedule.done(scheduled)
        now = scheduled.at
    assert gaps == [10, 20, 40]  # from the initial interval again


def test_watchers_starting_apart_share_one_grid() -> None:
    policy = BackoffPolicy(initial=60, factor=1, jitter="none")
    first = PollSchedule(policy, "seed", started_at=1_000_020.0)
    second = PollSchedule(policy, "seed", started_at=1_000_050.0)
    assert first.next_check(1_000_060.0).at == second.next_check(1_000_060.0).at


# --- the arguments: a bad one is named with its accepted values -----------------------------------------

# (case, arguments, the words the error must contain)
BAD_ARGUMENTS = [
    ("poke_interval negative", {"poke_interval": -1}, "poke_interval must be >= 0 seconds"),
    ("poke_interval text", {"poke_interval": "60"}, "poke_interval must be"),
    ("poke_interval a bool", {"poke_interval": True}, "poke_interval must be"),
    (
        "max_wait below poke_interval",
        {"poke_interval": 60, "max_wait": 30},
        "max_wait (30s) must be >= poke_interval",
    ),
    ("backoff_factor below 1", {"backoff_factor": 0.5}, "backoff_factor must be a finite number >= 1"),
    ("backoff_factor infinite", {"backoff_factor": math.inf}, "backoff_factor must be a finite number >= 1"),
    (
        "backoff_factor above the sensors' limit",
        {"backoff_factor": 11},
        "backoff_factor must be a finite number",
    ),
    ("jitter unknown", {"jitter": "lots"}, "jitter must be one of none, full, equal, decorrelated"),
    ("splay negative", {"splay": -1}, "splay must be >= 0 seconds"),
    ("value_key empty", {"value_key": ""}, "value_key must be None or a non-empty key"),
    (
        "report_first_value not a bool",
        {"report_first_value": "yes"},
        "report_first_value must be True or False",
    ),
    ("share not a bool", {"share": 1}, "share must be True or False"),
    ("check_timeout negative", {"check_timeout": -5}, "check_timeout must be"),
    ("rate_limit zero", {"rate_limit": 0}, "rate_limit must be a number of checks per second > 0, or None"),
    ("state_key blank", {"state_key": "  "}, "state_key must be None"),
    ("decorrelated with a fixed interval", {"backoff_factor": 1, "jitter": "decorrelated"}, "factor=1"),
]


@pytest.mark.parametrize(
    ("arguments", "words"), [c[1:] for c in BAD_ARGUMENTS], ids=[c[0] for c in BAD_ARGUMENTS]
)
def test_bad_arguments_are_named(arguments: dict[str, Any], words: str) -> None:
    with pytest.raises(WatcherArgumentError) as raised:
        watcher_arguments(**arguments)
    assert words in str(raised.value)
    # A ValueError at parse; a TypeError too, so a triggerer fails this one trigger, not the process.
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, TypeError)


def test_good_arguments_are_normalised_to_json_and_use_the_sensor_defaults() -> None:
    arguments = watcher_arguments(poke_interval=datetime.timedelta(minutes=1))
    assert arguments["policy"] == {
        "initial": 60.0,
        "factor": 2.0,
        "cap": 600.0,
        "jitter": "full",
        "splay": 0.0,
    }
    assert arguments["report_first_value"] is True
    assert arguments["share"] is True
