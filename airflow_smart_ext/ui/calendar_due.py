"""The Calendars view's due times: each wait's ``due=`` as its DAG's serialized tasks keep it, and when each of
the DAG's next runs is due by it — ``DueTime.due_at`` of the run's instants, the computation the sensor, its
trigger and the Waits view make.

Pure: a serialized DAG (its ``dag`` dict, as ``calendars_model.load_calendars`` reads it) and preview runs in.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_smart_ext.timetables.due import REFERENCES, SERIALIZED_KEY, DueTime

__all__ = ["DueRule", "due_rules", "run_due_times"]

_ENCODED_DICT = "dict"  # Airflow's ``{"__type": "dict", "__var": {...}}`` of a nested dict


@dataclasses.dataclass(frozen=True)
class DueRule:
    """One task's due time as stored (``due`` None: it cannot be read, ``error`` says why)."""

    task_id: str
    due: DueTime | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "rule": None if self.due is None else self.due.describe(),
            "timezone": None if self.due is None else self.due.to_dict()["timezone"],
            "error": self.error,
        }


def _plain(value: Any) -> Any:
    """A value with Airflow's encoding of nested dicts undone (a mapped task's ``partial_kwargs``)."""
    if isinstance(value, Mapping):
        if value.get("__type") == _ENCODED_DICT and "__var" in value:
            return _plain(value["__var"])
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _stored_due(task: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The due time's JSON form a serialized task holds (None: none): an unmapped sensor's own field (its JSON
    text), or a mapped one's ``.partial(due=...)`` (a due time given per mapped task in ``.expand()`` is not
    one rule). ``TypeError`` for a value of another form, e.g. the repr a previous release stored."""
    text, partial = task.get(SERIALIZED_KEY), task.get("partial_kwargs")
    if text is not None:
        stored = json.loads(text) if isinstance(text, str) else text
    elif isinstance(partial, Mapping) and partial.get("due") is not None:
        stored = _plain(partial["due"])
    else:
        return None
    if not isinstance(stored, Mapping):
        raise TypeError(f"not a due time's dict form: {str(stored)[:80]!r} (parse the DAG file again)")
    return stored


def due_rules(dag: Mapping[str, Any]) -> list[DueRule]:
    """The due time of each task of a serialized DAG that has one, by task id (a task stored by a release
    without the field has none; one this release cannot read is kept with its error)."""
    rules = []
    for task in dag.get("tasks") or []:
        fields = task.get("__var", task) if isinstance(task, Mapping) else {}
        if not isinstance(fields, Mapping):
            continue
        task_id = str(fields.get("task_id"))
        try:
            stored = _stored_due(fields)
            if stored is None:
                continue
            rules.append(DueRule(task_id, DueTime.from_dict(stored)))
        except (ValueError, TypeError) as err:  # InvalidDueTime, bad JSON: say so, show the others
            rules.append(DueRule(task_id, None, f"cannot read its due time: {type(err).__name__}: {err}"))
    return sorted(rules, key=lambda rule: rule.task_id)


def _instants(run: Mapping[str, Any]) -> dict[str, datetime.datetime]:
    return {
        name: datetime.datetime.fromisoformat(run[name])
        for name in (*REFERENCES, "run_after")
        if isinstance(run.get(name), str)
    }


def run_due_times(run: Mapping[str, Any], rules: Sequence[DueRule]) -> list[dict[str, Any]]:
    """When this run's data is due for each rule: ISO in the rule's own zone (09:30 New York reads 09:30),
    or ``error`` (e.g. a holiday calendar without data for that year)."""
    instants = _instants(run)
    times = []
    for rule in rules:
        if rule.due is None:
            continue
        due, error = None, None
        reference = rule.due.reference_in(instants)
        try:
            if reference is None:
                error = f"this run has no {rule.due.reference}"
            else:
                due = rule.due.due_at(reference).astimezone(rule.due.timezone).isoformat()
        except (ValueError, RuntimeError) as err:  # HolidayYearOutOfRange, CalendarSearchError
            error = f"{type(err).__name__}: {err}"
        times.append({"task_id": rule.task_id, "due": due, "error": error})
    return times
