"""The opt-in GC schedule of the triggerer ([smart_ext] triggerer_full_gc_interval), with the real collector."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest

from airflow_smart_ext.triggers import gc_tuning

OPTION_ENV = "AIRFLOW__SMART_EXT__TRIGGERER_FULL_GC_INTERVAL"


class Node:
    """A GC-tracked object that can take part in a reference cycle and be watched by a weakref."""

    other: Any = None


def make_cycle() -> Node:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a


@pytest.fixture(autouse=True)
def _collector_restored(monkeypatch: pytest.MonkeyPatch) -> Any:
    gc.unfreeze()
    monkeypatch.setattr(gc_tuning, "FREEZE_EVERY", 0.05)
    yield
    gc.unfreeze()
    gc_tuning._tuned_loops.clear()


async def test_off_by_default_the_collector_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OPTION_ENV, raising=False)
    gc_tuning.start()
    await asyncio.sleep(0.2)
    assert gc.get_freeze_count() == 0
    assert asyncio.get_running_loop() not in gc_tuning._tuned_loops


async def test_objects_are_frozen_then_a_full_collection_reclaims_frozen_cycles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OPTION_ENV, "1.0")
    node = make_cycle()
    watched = weakref.ref(node)
    gc_tuning.start()
    gc_tuning.start()  # once per loop
    assert len(gc_tuning._tuned_loops) == 1
    await asyncio.sleep(0.12)
    assert gc.get_freeze_count() > 0
    # The cycle was frozen while in use: dropped now, it is cyclic garbage out of the collector's reach ...
    del node
    gc.collect()
    assert watched() is not None  # ... through every collection ...
    await asyncio.sleep(1.2)
    assert watched() is None  # ... until the full collection due every interval
    assert gc.get_freeze_count() > 0  # and the schedule goes on freezing after it


async def test_a_full_collection_between_freezes_walks_only_the_unfrozen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OPTION_ENV, "3600")
    gc_tuning.start()
    await asyncio.sleep(0.12)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    assert len(gc.get_objects()) < frozen  # what a collection walks now is a fraction of the process


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
async def test_a_bad_value_fails_naming_the_option(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(OPTION_ENV, value)
    with pytest.raises(ValueError, match=r"\[smart_ext\] triggerer_full_gc_interval must be a number >= 0"):
        gc_tuning.start()
    assert gc.get_freeze_count() == 0
