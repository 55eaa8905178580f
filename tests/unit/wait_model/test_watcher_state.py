"""Where a watcher keeps its watermark (wait_model/watcher_state.py): the watcher and the Waits view read one record
shape and one key (generated cases)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.triggers.watermark import Watermark
from airflow_smart_ext.wait_model.watcher_state import STATE_KEY_PREFIX, read_record, state_store_key

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


WATCHER_CASES = [
    {},
    {"state_key": "orders"},
    {"value_key": "day"},
    {"every_value": True, "start_after": "2026-01-01"},
    {"every_value": True, "start_after": 0, "state_key": "ids"},
]


@pytest.mark.skipif(
    not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED, reason="asset watchers: Airflow >= 3.0"
)
@pytest.mark.parametrize("arguments", WATCHER_CASES, ids=repr)
def test_the_view_finds_the_watermark_under_the_key_the_watcher_writes(arguments: dict[str, Any]) -> None:
    """The view computes the key from the trigger row's kwargs (what ``serialize`` stores)."""
    from airflow_smart_ext.watchers import ConditionWatcher, sql_condition

    sql = "SELECT day FROM t WHERE day > :after ORDER BY day" if arguments.get("every_value") else "SELECT 1"
    watcher = ConditionWatcher(sql_condition("warehouse", sql), **arguments)
    _, kwargs = watcher.serialize()
    view_key = state_store_key(
        kwargs["check"], kwargs.get("value_key"), kwargs.get("state_key"), bool(kwargs.get("every_value"))
    )
    assert watcher._edge.store_key() == view_key
