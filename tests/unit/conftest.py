"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from airflow_smart_ext.sensors import poking
from tests.unit.test_sensor_helpers import FakeClock
from tests.unit.test_trigger import vclock  # noqa: F401  (the triggers' virtual clock, for every module)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The sensors' wall clock and sleep, faked: time moves only when a sensor sleeps."""
    fake = FakeClock()
    monkeypatch.setattr(poking, "wall_clock", fake.time)
    monkeypatch.setattr(poking, "sleep", fake.sleep)
    return fake
