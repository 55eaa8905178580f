"""``DueTimeDeadline``, a DAG's ``DeadlineAlert`` reference on a business calendar: on Airflow >= 3.3 it goes
through Airflow's own encoder and decoder (as the dag-processor writes and the scheduler reads a serialized
DAG), the plugin registers it where the scheduler looks it up, and the decoded reference evaluates a run's
instants to the due time (the scheduler adds the alert's interval). Before 3.3 a DAG file that builds one fails
at parse, naming the version and the task-level alternative. The scheduler computing it for real DAG runs:
tests/integration/test_deadlines_live.py."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path
from typing import Any

import pytest

import airflow_smart_ext.deadlines as deadlines
from airflow_smart_ext.compat.deadlines import (
    CUSTOM_DEADLINE_REFERENCES,
    DEADLINE_REFERENCES_MIN_AIRFLOW,
    CustomDeadlineReferencesUnsupported,
)
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS
from airflow_smart_ext.timetables import DueTime, InvalidDueTime

UTC = dt.timezone.utc
NYSE_0930 = DueTime("09:30", market="NYSE", timezone="America/New_York")
NEEDS_3_3 = pytest.mark.skipif(
    not CUSTOM_DEADLINE_REFERENCES,
    reason=f"DAG deadline references need Airflow >= {DEADLINE_REFERENCES_MIN_AIRFLOW} (the refusal is tested)",
)

DAG_FILE = """
import datetime as dt
from airflow import DAG
from airflow_smart_ext.deadlines import DueTimeDeadline
from airflow_smart_ext.timetables import DueTime

REFERENCE = DueTimeDeadline(DueTime("09:30", market="NYSE", timezone="America/New_York"))
with DAG("dl_version_probe", schedule=None, start_date=dt.datetime(2024, 1, 1)):
    pass
"""


def test_support_follows_the_airflow_version() -> None:
    assert CUSTOM_DEADLINE_REFERENCES is AIRFLOW_V_3_3_PLUS
    assert DEADLINE_REFERENCES_MIN_AIRFLOW == "3.3.0"


@pytest.mark.skipif(
    AIRFLOW_V_3_3_PLUS, reason="Airflow >= 3.3 has custom deadline references: nothing to refuse"
)
def test_before_3_3_a_dag_file_building_one_fails_at_parse(tmp_path: Path) -> None:
    with pytest.raises(CustomDeadlineReferencesUnsupported) as info:
        deadlines.DueTimeDeadline(NYSE_0930)
    message = str(info.value)
    for needle in ("Airflow >= 3.3.0", "DueTimeDeadline", "BackoffSensor(due=DueTime(...), on_late=...)"):
        assert needle in message, message
    from airflow.models.dagbag import DagBag

    (tmp_path / "dl_version_probe.py").write_text(textwrap.dedent(DAG_FILE))
    bag = DagBag(dag_folder=str(tmp_path), include_examples=False)
    assert list(bag.dag_ids) == []
    [error] = bag.import_errors.values()
    assert "CustomDeadlineReferencesUnsupported: DueTimeDeadline needs Airflow >= 3.3.0" in error, error


@NEEDS_3_3
@pytest.mark.parametrize(
    ("due", "needle"),
    [
        (None, "due: DueTimeDeadline needs a due time"),
        ("09:30", "due: expected airflow_smart_ext.timetables.DueTime"),
        ({"at": "25:00"}, "due.at: expected a time of day"),
        ({"at": "09:30", "market": "NYSE"}, "due: unknown key(s) ['market']"),
    ],
)
def test_a_bad_due_time_fails_at_parse_naming_it(due: Any, needle: str) -> None:
    with pytest.raises(InvalidDueTime) as info:
        deadlines.DueTimeDeadline(due)
    assert needle in str(info.value)


def _through_airflow(reference: deadlines.DueTimeDeadline) -> Any:
    """As the dag-processor stores the reference and the scheduler reads it back."""
    from airflow.serialization.decoders import decode_deadline_reference
    from airflow.serialization.encoders import encode_deadline_reference

    return decode_deadline_reference(encode_deadline_reference(reference))


@NEEDS_3_3
def test_the_plugin_registers_it_where_the_scheduler_looks_it_up() -> None:
    from airflow.serialization.helpers import find_registered_custom_deadline_reference

    from airflow_smart_ext.plugin import SmartExtPlugin

    assert SmartExtPlugin.deadline_references == [deadlines.DueTimeDeadline]
    path = "airflow_smart_ext.deadlines.DueTimeDeadline"
    assert find_registered_custom_deadline_reference(path) is deadlines.DueTimeDeadline
    decoded = _through_airflow(deadlines.DueTimeDeadline(NYSE_0930))
    assert decoded.inner_ref == deadlines.DueTimeDeadline(NYSE_0930)
    assert decoded.serialize_reference()["due"] == NYSE_0930.to_dict()


@NEEDS_3_3
@pytest.mark.parametrize(
    ("due", "instants", "expected"),
    [
        # The interval ends on Thanksgiving, after 09:30: NYSE is closed that day anyway, due Friday 09:30 EST.
        (NYSE_0930, {"data_interval_end": dt.datetime(2025, 11, 27, 15, tzinfo=UTC)}, "2025-11-28T14:30"),
        # The day after the US clocks went forward: 09:30 EDT is 13:30 UTC.
        (NYSE_0930, {"data_interval_end": dt.datetime(2026, 3, 9, 5, tzinfo=UTC)}, "2026-03-09T13:30"),
        # A manual run without a data interval counts from its run_after.
        (
            NYSE_0930,
            {"data_interval_end": None, "run_after": dt.datetime(2026, 7, 3, 12, tzinfo=UTC)},
            "2026-07-06T13:30",
        ),
        # T+1 London from the logical date: 10:00 on Christmas Eve is after 07:00, so T+0 skips Christmas, the
        # weekend and Monday (Boxing Day's substitute) to Tuesday the 29th; T+1 is the 30th.
        (
            DueTime("07:00", country="GB", timezone="Europe/London", lag=1, reference="logical_date"),
            {"logical_date": dt.datetime(2026, 12, 24, 10, tzinfo=UTC)},
            "2026-12-30T07:00",
        ),
        # A UTC-midnight interval end is 19:00 the day before in New York: due the next session, not before.
        (NYSE_0930, {"data_interval_end": dt.datetime(2026, 12, 1, tzinfo=UTC)}, "2026-12-01T14:30"),
        (
            DueTime(after=dt.timedelta(hours=2)),
            {"data_interval_end": dt.datetime(2026, 1, 1, tzinfo=UTC)},
            "2026-01-01T02:00",
        ),
    ],
)
def test_the_decoded_reference_evaluates_a_runs_due_time(
    monkeypatch: pytest.MonkeyPatch, due: DueTime, instants: dict[str, Any], expected: str
) -> None:
    asked: list[dict[str, Any]] = []

    def run_row(**kwargs: Any) -> dict[str, Any]:
        asked.append(kwargs)
        return instants

    monkeypatch.setattr(deadlines, "dag_run_instants", run_row)
    decoded = _through_airflow(deadlines.DueTimeDeadline(due))
    grace = dt.timedelta(minutes=5)
    got = decoded.evaluate_with(session="S", interval=grace, dag_id="d", run_id="r", unrelated=1)
    assert got == dt.datetime.fromisoformat(expected).replace(tzinfo=UTC) + grace
    assert asked == [{"session": "S", "dag_id": "d", "run_id": "r"}]


@NEEDS_3_3
def test_a_run_the_scheduler_cannot_find_gets_no_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "dag_run_instants", lambda **_: {})
    decoded = _through_airflow(deadlines.DueTimeDeadline(NYSE_0930))
    assert decoded.evaluate_with(session=None, interval=dt.timedelta(0), dag_id="d", run_id="r") is None


@NEEDS_3_3
def test_a_due_time_that_fails_gives_no_deadline_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The scheduler evaluates the reference while it creates the run: an error must not escape into it."""
    end = dt.datetime(2026, 1, 2, tzinfo=UTC)
    monkeypatch.setattr(deadlines, "dag_run_instants", lambda **_: {"data_interval_end": end})

    def no_data(self: DueTime, reference: dt.datetime) -> dt.datetime:
        raise LookupError("no holiday data for 2026")

    monkeypatch.setattr(DueTime, "due_at", no_data)
    decoded = _through_airflow(deadlines.DueTimeDeadline(NYSE_0930))
    with caplog.at_level("ERROR", logger=deadlines.__name__):
        assert decoded.evaluate_with(session=None, interval=dt.timedelta(0), dag_id="d", run_id="r") is None
    assert "No deadline for DAG run r of d" in caplog.text and "no holiday data for 2026" in caplog.text


@NEEDS_3_3
@pytest.mark.parametrize(
    "stored",
    [
        {**NYSE_0930.to_dict(), "grace": 60},  # a key a newer release may write
        {**NYSE_0930.to_dict(), "calendar": {"type": "business", "market": "NO-SUCH-MARKET"}},
        {**NYSE_0930.to_dict(), "timezone": "Mars/Olympus_Mons"},  # a zone this host lacks
        None,
    ],
    ids=["unknown key", "unknown market", "unknown zone", "no due time"],
)
def test_a_stored_form_this_release_cannot_read_decodes_and_gives_no_deadline(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stored: Any
) -> None:
    """Airflow decodes the reference inside run creation: decoding never fails; evaluating says why, once."""
    from airflow.serialization.decoders import decode_deadline_reference

    end = dt.datetime(2026, 1, 2, tzinfo=UTC)
    monkeypatch.setattr(deadlines, "dag_run_instants", lambda **_: {"data_interval_end": end})
    data = {
        "reference_type": "DueTimeDeadline",
        "due": stored,
        "__class_path": "airflow_smart_ext.deadlines.DueTimeDeadline",
    }
    decoded = decode_deadline_reference(data)
    assert decoded.serialize_reference()["due"] == stored  # kept as stored (re-encoding loses nothing)
    with caplog.at_level("ERROR", logger=deadlines.__name__):
        assert decoded.evaluate_with(session=None, interval=dt.timedelta(0), dag_id="d", run_id="r") is None
    assert caplog.text.count("No deadline for DAG run r of d") == 1, caplog.text
