"""Where a watcher keeps its watermark (wait/watcher_state.py): the watcher and the Waits view read one record
shape and one key (generated cases)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from airflow_smart_ext.triggers.watermark import Watermark
from airflow_smart_ext.wait.watcher_state import STATE_KEY_PREFIX, read_record, state_store_key

VALUES: list[Any] = [None, "2026-11-27", 3, 2.5, {"day": "d"}, ["a", "b"], True]
MARKS = [
    Watermark(value, seq, pending)
    for value, seq, pending in itertools.product(VALUES, (0, 1, 7), (None, "next", 4))
]


@pytest.mark.parametrize("mark", MARKS, ids=repr)
def test_the_view_reads_every_watermark_the_watcher_writes(mark: Watermark) -> None:
    stored = read_record(mark.to_record())
    assert stored is not None and (stored.value, stored.seq, stored.pending) == (
        mark.value,
        mark.seq,
        mark.pending,
    )
    assert Watermark.from_record(mark.to_record()) == mark


@pytest.mark.parametrize(
    "record",
    [
        None,
        "text",
        {},
        {"format": 2, "seq": 1},
        {"format": 1, "seq": -1},
        {"format": 1, "seq": True},
        {"format": 1, "seq": "1"},
        {"format": 1},
    ],
)
def test_a_record_not_ours_is_none_for_both(record: Any) -> None:
    assert read_record(record) is None and Watermark.from_record(record) is None


def test_the_key_names_the_given_state_key_or_a_digest_of_what_is_watched() -> None:
    check = {"type": "sql", "sql": "SELECT 1"}
    assert state_store_key(check, None, "orders") == f"{STATE_KEY_PREFIX}:orders"
    digest = state_store_key(check, None, None)
    assert digest.startswith(f"{STATE_KEY_PREFIX}:") and len(digest) == len(STATE_KEY_PREFIX) + 33
    assert state_store_key(dict(check), None, None) == digest  # stable
    assert state_store_key({**check, "sql": "SELECT 2"}, None, None) != digest  # a changed query: a new one
    assert state_store_key(check, "day", None) != digest
