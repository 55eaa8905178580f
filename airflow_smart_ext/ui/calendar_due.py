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
    map_index: int | None = None  # the mapped task instance a mapped value gave it to (None: every one)
    item: int | None = None  # its position in ``.expand(due=[...])`` where its map index is not known here

    @property
    def label(self) -> str:
        """The task it is for, as the views show it: ``id``, ``id[i]`` or ``id (.expand due item i)``."""
        if self.map_index is not None:
            return f"{self.task_id}[{self.map_index}]"
        return self.task_id if self.item is None else f"{self.task_id} (.expand due item {self.item})"

    def for_instance(self, map_index: int) -> bool:
        """Whether it is the due time of the task's instance ``map_index`` (one whose map index is not known
        here is no instance's)."""
        return self.item is None and self.map_index in (None, map_index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "map_index": self.map_index,
            "label": self.label,
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


def _mapped_dues(expand_input: Any) -> list[tuple[int | None, int | None, Any]]:
    """The due times a mapped task's literal ``.expand()`` / ``.expand_kwargs()`` values give: (map index,
    None, due) where the item is the instance's (``.expand_kwargs()``, or ``due`` mapped alone), else (None,
    item, due) (a product with other mapped arguments). Values from an upstream task's output are known only
    when it runs: none."""
    expand = _plain(expand_input) if isinstance(expand_input, Mapping) else {}
    value = expand.get("value")
    if expand.get("type") == "list-of-dicts" and isinstance(value, list):
        return [
            (index, None, entry["due"])
            for index, entry in enumerate(value)
            if isinstance(entry, Mapping) and entry.get("due") is not None
        ]
    if not isinstance(value, Mapping) or not isinstance(value.get("due"), list):
        return []
    dues = value["due"]
    if len(value) == 1:
        return [(index, None, due) for index, due in enumerate(dues) if due is not None]
    return [(None, index, due) for index, due in enumerate(dues) if due is not None]


def _stored_dues(fields: Mapping[str, Any]) -> list[tuple[int | None, int | None, Any]]:
    """The due times a serialized task holds (as :func:`_mapped_dues` gives them): an unmapped sensor's own
    field (its JSON text); a mapped one's literal mapped values and its ``.partial(due=...)`` (or its DAG's
    ``default_args``: ``CheckedPartial`` gives it to the partial); an ``.expand_kwargs()`` item's own overrides
    the partial's for its instance (``DagFacts.due_of``)."""
    text, partial = fields.get(SERIALIZED_KEY), fields.get("partial_kwargs")
    if text is not None:
        return [(None, None, json.loads(text) if isinstance(text, str) else text)]
    given = partial.get("due") if isinstance(partial, Mapping) else None
    return [
        *_mapped_dues(fields.get("expand_input")),
        *([(None, None, _plain(given))] if given is not None else []),
    ]


def due_rules(dag: Mapping[str, Any]) -> list[DueRule]:
    """The due time of each task of a serialized DAG that has one, by task id (a task stored by a release
    without the field has none; one this release cannot read is kept with its error, e.g. the repr a previous
    release stored)."""
    rules = []
    for task in dag.get("tasks") or []:
        fields = task.get("__var", task) if isinstance(task, Mapping) else {}
        if not isinstance(fields, Mapping):
            continue
        task_id = str(fields.get("task_id"))
        try:
            stored = _stored_dues(fields)
        except ValueError as err:  # bad JSON: say so, show the others
            rules.append(DueRule(task_id, None, f"cannot read its due time: {type(err).__name__}: {err}"))
            continue
        for map_index, item, due in stored:
            try:
                if not isinstance(due, Mapping):
                    raise TypeError(
                        f"not a due time's dict form: {str(due)[:80]!r} (parse the DAG file again)"
                    )
                rules.append(DueRule(task_id, DueTime.from_dict(due), None, map_index, item))
            except (ValueError, TypeError) as err:  # InvalidDueTime, another form: say so, show the others
                error = f"cannot read its due time: {type(err).__name__}: {err}"
                rules.append(DueRule(task_id, None, error, map_index, item))
    return sorted(rules, key=_order)


def _order(rule: DueRule) -> tuple[str, int, int]:
    """By task, then map index, then ``.expand`` item (numerically: item 2 before item 10)."""
    return (
        rule.task_id,
        -1 if rule.map_index is None else rule.map_index,
        -1 if rule.item is None else rule.item,
    )


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
        times.append(
            {
                "task_id": rule.task_id,
                "map_index": rule.map_index,
                "label": rule.label,
                "due": due,
                "error": error,
            }
        )
    return times
