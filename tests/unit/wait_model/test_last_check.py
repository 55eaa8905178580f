"""The last-check record (issue 35 part 2): built from our own vocabulary, read back, said in words."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_smart_ext.conditions import Outcome
from airflow_smart_ext.triggers.last_check_writes import last_check
from airflow_smart_ext.triggers.transient_errors import ErrorRideOut
from airflow_smart_ext.wait_model.last_check import (
    LastCheck,
    newest,
    outcome_kind,
    read_record,
    summary,
    words,
)

AT = 1_800_000_000.0  # 2027-01-15T08:00:00Z
SECRET = "pw-71b3-never-stored"


@pytest.mark.parametrize(
    ("status", "ridden_out", "kind"),
    [
        ("negative", False, "not met"),
        ("positive", False, "met"),
        ("error", True, "transient error"),
        ("error", False, "error"),
        ("failure", False, "error"),
        ("timeout", False, "error"),
    ],
)
def test_outcome_kinds(status: str, ridden_out: bool, kind: str) -> None:
    assert outcome_kind(status, ridden_out) == kind


@pytest.mark.parametrize(
    ("check", "expected_words", "expected_summary"),
    [
        (LastCheck("not met", AT, AT), "not met", "not met since 2027-01-15T08:00:00.000+00:00"),
        (
            LastCheck("transient error", AT + 60, AT, 12, "OperationalError", "OperationalError (transient)"),
            "transient error (OperationalError) x12",
            "transient error (OperationalError) x12 since 2027-01-15T08:00:00.000+00:00",
        ),
        (LastCheck("error", AT, AT, 0, "ValueError"), "error (ValueError)", None),
    ],
)
def test_a_record_reads_back_and_says_itself(
    check: LastCheck, expected_words: str, expected_summary: str | None
) -> None:
    stored = check.to_record()
    for form in (stored, json.dumps(stored), json.dumps(stored).encode()):  # 3.x JSON, a string, 2.11 bytes
        record = read_record(form)
        assert record is not None and record["outcome"] == check.outcome
        assert words(record) == expected_words
        if expected_summary is not None:
            assert summary(record) == expected_summary
    assert summary(None) == "none recorded yet"


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "not json",
        {"outcome": "not met", "errors": 0, "since": "x", "at": "x"},  # no format: not ours
        {"format": "smart_ext.last_check/1", "outcome": "odd", "errors": 0, "since": "x", "at": "x"},
        {"format": "smart_ext.last_check/1", "outcome": "met", "errors": -1, "since": "x", "at": "x"},
        {"format": "smart_ext.last_check/1", "outcome": "met", "errors": True, "since": "x", "at": "x"},
        {"format": "smart_ext.last_check/1", "outcome": "met", "errors": 0, "since": None, "at": "x"},
        {"value": 3, "seq": 1, "format": 1},  # a watermark
    ],
)
def test_what_is_not_a_record_is_none(stored: Any) -> None:
    assert read_record(stored) is None


def test_the_same_kind_keeps_its_since_and_a_new_kind_starts_anew() -> None:
    first = LastCheck("transient error", AT, AT, 1, "OperationalError")
    later = LastCheck("transient error", AT + 60, AT + 60, 2, "OperationalError").after(first)
    assert (later.since, later.at, later.errors) == (AT, AT + 60, 2)
    other_class = LastCheck("transient error", AT + 90, AT + 90, 1, "TimeoutError").after(later)
    assert (other_class.since, other_class.errors) == (AT + 90, 1)
    met = LastCheck("met", AT + 120, AT + 120).after(other_class)
    assert met.since == AT + 120


def test_newest_is_by_check_time() -> None:
    old = read_record(LastCheck("not met", AT, AT).to_record())
    new = read_record(LastCheck("transient error", AT + 5, AT + 5, 1).to_record())
    assert newest([old, None, new]) == new and newest([None]) is None


def test_a_record_of_an_error_holding_a_secret_holds_no_secret() -> None:
    """The driver's text may quote bound values: only the class name and our own words are kept."""
    ride_out = ErrorRideOut(())

    class OperationalError(Exception):
        pass

    error = OperationalError(f"connection to server failed: password={SECRET} rejected")
    original = Outcome("error", message=f"OperationalError: {error}", error=error)
    ridden = ride_out(_NoLog(), 3, original)
    record = last_check(original, ridden, ride_out, AT).to_record()
    assert record["outcome"] == "transient error" and record["errors"] == 1
    assert record["error_class"] == "OperationalError"
    assert record["reason"] == "OperationalError (transient: database unavailable or busy)"
    assert SECRET not in json.dumps(record)
    permanent = ValueError(f"bad value {SECRET}")
    record = last_check(Outcome("error", error=permanent), Outcome("error", error=permanent), ride_out, AT)
    assert record.outcome == "error" and SECRET not in json.dumps(record.to_record())


class _NoLog:
    def warning(self, *args: Any, **kwargs: Any) -> None:
        pass

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 (logging's name)
        return False
