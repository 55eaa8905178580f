"""Which watcher values a consumer processes (airflow_smart_ext/consumer_state.py), from tables of asset events."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_smart_ext.consumer_state import (
    ConsumerState,
    ConsumerStateError,
    NewValue,
    conflicts,
    unprocessed,
    watcher_value,
)
from tests.unit.consumer_helpers import event


def state_of(**done: list[int]) -> ConsumerState:
    """A state in which each named watcher (``_`` for the unnamed one) processed these seqs."""
    state = ConsumerState()
    for name, seqs in done.items():
        for seq in seqs:
            state = state.marked(NewValue(None, seq, None, "" if name == "_" else name, 0))
    return state


# (story, events in the order read, processed before, expected (watcher, seq, value) in processing order)
CASES: list[tuple[str, list[Any], ConsumerState, list[tuple[str, int, Any]]]] = [
    ("all new", [event(1, 1, "d1"), event(2, 2, "d2")], state_of(), [("", 1, "d1"), ("", 2, "d2")]),
    (
        "an upgrade: the first copy names no watcher, the redelivered copy does: once, the first",
        [event(1, 1, "d1"), event(2, 1, "d1", watcher="w", redelivered=True), event(3, 2, "d2", watcher="w")],
        state_of(),
        [("", 1, "d1"), ("w", 2, "d2")],
    ),
    (
        "an upgrade: the unnamed first copy was processed before: its named redelivered copy is not",
        [event(1, 1, "d1"), event(2, 1, "d1", watcher="w", redelivered=True)],
        state_of(_=[1]),
        [],
    ),
    (
        "the run's events and older ones: only the unprocessed",
        [event(1, 1, "d1"), event(2, 2, "d2"), event(3, 3, "d3")],
        state_of(_=[1]),
        [("", 2, "d2"), ("", 3, "d3")],
    ),
    ("nothing new", [event(1, 1, "d1"), event(2, 2, "d2")], state_of(_=[1, 2]), []),
    (
        "redelivered copy of a value already processed",
        [event(1, 1, "d1"), event(2, 2, "d2"), event(3, 2, "d2", redelivered=True)],
        state_of(_=[1, 2]),
        [],
    ),
    (
        "redelivered copy read with its first copy: once, the first",
        [event(1, 1, "d1"), event(2, 1, "d1", redelivered=True), event(3, 2, "d2")],
        state_of(),
        [("", 1, "d1"), ("", 2, "d2")],
    ),
    (
        "redelivered copy whose first copy never reached Airflow: processed",
        [event(1, 1, "d1"), event(5, 2, "d2", redelivered=True), event(6, 3, "d3")],
        state_of(_=[1]),
        [("", 2, "d2"), ("", 3, "d3")],
    ),
    (
        "two unflagged copies of one pair (two triggerers during a failover)",
        [event(1, 1, "d1"), event(2, 1, "d1")],
        state_of(),
        [("", 1, "d1")],
    ),
    (
        "a gap: what is there, in order; the missing seq when its event shows up",
        [event(1, 1, "d1"), event(2, 2, "d2"), event(4, 4, "d4")],
        state_of(),
        [("", 1, "d1"), ("", 2, "d2"), ("", 4, "d4")],
    ),
    (
        "the gap's event shows up later: processed once, the ones after it not again",
        [event(1, 1, "d1"), event(2, 2, "d2"), event(4, 4, "d4"), event(9, 3, "d3"), event(10, 5, "d5")],
        state_of(_=[1, 2, 4]),
        [("", 3, "d3"), ("", 5, "d5")],
    ),
    (
        "out of order: read newest first, stored out of seq order",
        [event(7, 3, "d3"), event(5, 2, "d2"), event(6, 1, "d1")],
        state_of(),
        [("", 1, "d1"), ("", 2, "d2"), ("", 3, "d3")],
    ),
    (
        "two watchers on one asset: each numbered on its own, each pair once",
        [
            event(1, 1, "a1", watcher="a"),
            event(2, 1, "b1", watcher="b"),
            event(3, 2, "a2", watcher="a"),
            event(4, 2, "b2", watcher="b"),
            event(5, 2, "b2", watcher="b", redelivered=True),
        ],
        state_of(a=[1]),
        [("a", 2, "a2"), ("b", 1, "b1"), ("b", 2, "b2")],
    ),
    (
        "events no watcher wrote (a manual asset event, a foreign payload) are not values",
        [
            (1, {}),
            (2, None),
            (3, {"payload": {"seq": 1}}),
            (4, {"payload": {"value": 1, "seq": True}}),
            event(5, 1, 0),
        ],
        state_of(),
        [("", 1, 0)],
    ),
]


@pytest.mark.parametrize(("events", "before", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_unprocessed(events: list[Any], before: ConsumerState, expected: list[tuple[str, int, Any]]) -> None:
    got = unprocessed(events, before)
    assert [(v.watcher, v.seq, v.value) for v in got] == expected
    # Processing them all leaves nothing for the next run, whatever it reads again.
    after = before
    for value in got:
        after = after.marked(value)
    assert unprocessed(events, after) == []
    assert ConsumerState.from_json(after.to_json()) == after


def test_the_first_stored_copy_is_the_one_processed() -> None:
    (got,) = unprocessed([event(8, 1, "d1", redelivered=True), event(3, 1, "d1")], ConsumerState())
    assert (got.event_id, got.redelivered) == (3, False)


def test_a_value_carries_its_payload() -> None:
    payload = {"value": {"day": "d2"}, "seq": 2, "previous": "d1", "observed_at": "2026-01-02T00:00:00+00:00"}
    assert watcher_value(11, {"payload": payload}) == NewValue(
        {"day": "d2"}, 2, "d1", "", 11, "2026-01-02T00:00:00+00:00", False
    )


@pytest.mark.parametrize(
    ("seqs", "through", "above"),
    [([1, 2, 3], 3, []), ([1, 3, 5], 1, [3, 5]), ([3, 1, 2], 3, []), ([2, 2, 1], 2, []), ([], 0, [])],
)
def test_marks_fold_into_a_contiguous_prefix(seqs: list[int], through: int, above: list[int]) -> None:
    import json

    record = json.loads(state_of(w=seqs).to_json())
    assert record == {"format": 1, "watchers": {"w": {"through": through, "above": above}} if seqs else {}}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"format": 2, "watchers": {}}',
        '{"watchers": {}}',
        '{"format": 1, "watchers": {"w": {"through": -1, "above": []}}}',
        '{"format": 1, "watchers": {"w": {"through": 1, "above": [0]}}}',
        '{"format": 1, "watchers": {"w": {"through": "1", "above": []}}}',
        '{"format": 1, "watchers": []}',
    ],
)
def test_a_state_that_is_not_ours_is_refused(text: str) -> None:
    with pytest.raises(ConsumerStateError, match="not a consumer state"):
        ConsumerState.from_json(text)


def test_no_stored_state_is_nothing_processed() -> None:
    assert ConsumerState.from_json(None) == ConsumerState()


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([event(1, 1, "d1"), event(2, 1, "d1", redelivered=True), event(3, 2, "d2")], []),
        ([event(1, 1, "a1"), event(2, 1, "b1"), event(3, 2, "a2"), event(4, 2, "a2")], [("", 1, [1, 2])]),
        ([event(1, 1, "a1", watcher="a"), event(2, 1, "b1", watcher="b")], []),
        ([event(5, 3, "x"), event(2, 3, "y"), event(9, 3, "x")], [("", 3, [2, 5, 9])]),
    ],
    ids=["a redelivery is no conflict", "two unnamed watchers", "two named watchers", "out of order"],
)
def test_conflicting_values_of_one_pair_are_reported(events: list[Any], expected: list[Any]) -> None:
    assert conflicts(events) == expected
