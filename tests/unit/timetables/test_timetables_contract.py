"""Contract: timetables serialized by the previous release still deserialize and schedule the same runs.

The fixture was generated once from the release before ``calendars`` became a package (its commit is in the
file) and must never be regenerated: a diff here means stored DAGs would change their runs after an upgrade.
One generated test per stored timetable (every class; calendar algebra, user lists, markets, lag).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pendulum
import pytest

from airflow_smart_ext.compat.serialization import decode_timetable, encode_timetable

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "serialized_timetables_previous_release.json").read_text()
)
STORED: dict[str, dict[str, Any]] = FIXTURE["timetables"]


@pytest.mark.parametrize("name", sorted(STORED))
def test_previous_release_timetable_loads_and_schedules_the_same_runs(name: str) -> None:
    stored = STORED[name]
    timetable = decode_timetable(stored["encoded"])
    assert encode_timetable(timetable) == stored["encoded"]  # the stored form round-trips unchanged
    assert (timetable.summary, timetable.description) == (stored["summary"], stored["description"])
    runs = [
        {
            "start": r.data_interval.start.isoformat(),
            "end": r.data_interval.end.isoformat(),
            "run_after": r.run_after.isoformat(),
        }
        for r in timetable.iter_runs(pendulum.parse(FIXTURE["start"]), len(stored["runs"]))
    ]
    assert runs == stored["runs"]
    for at, expected in stored["manual"].items():
        interval = timetable.infer_manual_data_interval(run_after=pendulum.parse(at))
        assert {"start": interval.start.isoformat(), "end": interval.end.isoformat()} == expected, at
