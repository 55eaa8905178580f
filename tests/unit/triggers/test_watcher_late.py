"""A condition watcher's absence alert (issue 45, ``due=``): late when no new value landed by its due time on a
business day, said once per due time, again only on the next business day; kept across restarts in the asset
state store (the stand-in with Airflow's accessor shape; the real one: tests/integration/
test_watcher_late_live.py). On the virtual clock, over ten days of a US calendar with Thanksgiving in them."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
import threading
from dataclasses import replace
from typing import Any

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat, units
from airflow_smart_ext.timetables import DueTime
from airflow_smart_ext.triggers import log_lines, watcher_lateness
from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher
from airflow_smart_ext.wait_model.absence import (
    LATE_KEY_SUFFIX,
    AbsenceRecord,
    due_rule_key,
    landed,
    late_due,
)
from airflow_smart_ext.wait_model.parameters import WatcherArgumentError
from airflow_smart_ext.wait_model.watcher_state import STATE_KEY_PREFIX
from airflow_smart_ext.watchers import sensor_condition
from tests.unit.clock import START, FakeClock
from tests.unit.watcher_helpers import StateStore, collect

pytestmark = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED,
    reason="the asset state store (AIP-103) needs Airflow >= 3.3 (a watcher's due=; 2.11 refuses watchers at parse)",
)

NEW_YORK = datetime.timezone(datetime.timedelta(hours=-5))  # EST: every day of these tests is in winter time
#: 09:30 New York on each US business day (START is Tuesday 2023-11-14 17:13 New York).
DUE = DueTime("09:30", country="US", timezone="America/New_York")
DAY = 86400.0
LOG = logging.getLogger(__name__)

LANDED: list[tuple[float, str]] = []  # (epoch, value): what the sensor sees from then on
TOLD: list[dict[str, Any]] = []


def ny(day: int, hour: int, minute: int = 0) -> float:
    """Epoch seconds of November ``day`` 2023, ``hour:minute`` New York (EST)."""
    return datetime.datetime(2023, 11, day, hour, minute, tzinfo=NEW_YORK).timestamp()


class LandingSensor(compat.locations.BaseSensorOperator):
    """Done once a value landed; its XCom value is the newest one."""

    def poke(self, context: Any) -> Any:
        landed = [value for at, value in LANDED if at <= seam.now()]
        if not landed:
            return False
        return compat.locations.PokeReturnValue(is_done=True, xcom_value=landed[-1])


def record_late(context: dict[str, Any]) -> None:
    TOLD.append(context["late"])


def failing_alert(context: dict[str, Any]) -> None:
    raise RuntimeError("the alert's webhook is down")


@pytest.fixture(autouse=True)
def _reset() -> Any:
    LANDED.clear()
    TOLD.clear()
    yield


def late_watcher(store: StateStore | None, **overrides: Any) -> ConditionWatcher:
    arguments: dict[str, Any] = {
        "poke_interval": 60,
        "backoff_factor": 4,
        "max_wait": 3600,  # hourly once nothing changes: a late alert within one check, i.e. an hour
        "jitter": "none",
        "state_key": "trades",
        "due": DUE,
        "on_late": [record_late],
    }
    arguments.update(overrides)
    watcher = ConditionWatcher(sensor_condition(LandingSensor), **arguments)
    watcher.asset_state_store = store
    return watcher


def rebuilt(watcher: ConditionWatcher, store: StateStore) -> ConditionWatcher:
    """As a restarted (or the other) triggerer builds it: from its serialized kwargs, the store injected."""
    _, kwargs = watcher.serialize()
    again = ConditionWatcher(**json.loads(json.dumps(kwargs)))
    again.asset_state_store = store
    return again


def told_due(store: StateStore) -> Any:
    return store.rows[("trades", f"{STATE_KEY_PREFIX}:trades{LATE_KEY_SUFFIX}")]


async def test_late_once_per_business_day_without_a_new_value_and_never_on_a_holiday_or_weekend(
    clock: FakeClock,
) -> None:
    LANDED.append((ny(16, 8), "2023-11-15"))  # Thursday 08:00: Thursday's due time is met
    store = StateStore("trades")
    await collect(clock, late_watcher(store).run(), until=ny(24, 12) - START)
    # Wednesday (nothing yet), Friday (nothing since Thursday 09:30), Monday to Wednesday; not Tuesday 14 (it
    # began watching at 17:13), Thursday 16 (met), the weekend or Thanksgiving (Thursday 23).
    expected = [ny(15, 9, 30), ny(17, 9, 30), ny(20, 9, 30), ny(21, 9, 30), ny(22, 9, 30), ny(24, 9, 30)]
    assert [told["due"] for told in TOLD] == [units.iso(due) for due in expected]
    assert all(0 <= told["late_by_seconds"] <= 3600 for told in TOLD), TOLD  # within one check (hourly cap)
    first = TOLD[0]
    assert first["watcher"] == "trades" and first["assets"] == ["trades"]
    assert first["due_rule"] == "09:30 America/New_York on each US business day"
    assert first["last_value_at"] is None and first["resent"] is False
    assert first["last_outcome"] == "not met" and isinstance(first["check"], int)
    assert first["link"].endswith("/smart-ext/waits?late=true")
    assert TOLD[1]["last_value_at"] is not None  # Friday: the value Thursday morning, seen at a check
    assert told_due(store)["told"] == ny(24, 9, 30) and told_due(store)["telling"] is False


async def test_a_value_after_the_alert_counts_for_the_next_day_and_one_the_deciding_check_sees_for_its_own(
    clock: FakeClock,
) -> None:
    # Wednesday 11:00, after Wednesday's alert: it counts for Thursday. Monday 09:20, seen by the first check
    # after 09:30 (hourly checks): Monday is met by it, and it does not count for Tuesday too.
    LANDED.extend([(ny(15, 11), "late one"), (ny(20, 9, 20), "monday")])
    store = StateStore("trades")
    await collect(clock, late_watcher(store).run(), until=ny(21, 12) - START)
    expected = [ny(15, 9, 30), ny(17, 9, 30), ny(21, 9, 30)]
    assert [told["due"] for told in TOLD] == [units.iso(due) for due in expected]


async def test_a_restart_or_the_other_triggerer_never_says_a_told_due_time_again(clock: FakeClock) -> None:
    store = StateStore("trades")
    first = late_watcher(store)
    await collect(clock, first.run(), until=ny(15, 12) - START)
    assert [told["due"] for told in TOLD] == [units.iso(ny(15, 9, 30))]
    await collect(clock, rebuilt(first, store).run(), until=ny(16, 12) - START)
    assert [told["due"] for told in TOLD] == [units.iso(ny(15, 9, 30)), units.iso(ny(16, 9, 30))]
    assert [told["resent"] for told in TOLD] == [False, False]


async def test_a_triggerer_down_across_the_due_time_still_says_it_from_the_stored_record(
    clock: FakeClock,
) -> None:
    store = StateStore("trades")
    first = late_watcher(store)
    await collect(clock, first.run(), until=ny(15, 9) - START)  # watching since Tuesday; stops at 09:00
    clock.now = ny(15, 11)  # no triggerer from 09:00 to 11:00: Wednesday's 09:30 passed meanwhile
    await collect(clock, rebuilt(first, store).run(), until=ny(15, 12) - START)
    assert [(told["due"], told["last_value_at"]) for told in TOLD] == [(units.iso(ny(15, 9, 30)), None)]
    # Without the record (a store that lost it) the watcher would have begun at 11:00 and said nothing:
    TOLD.clear()
    await collect(clock, rebuilt(first, StateStore("trades")).run(), until=ny(15, 13) - START)
    assert TOLD == []


async def test_a_changed_due_rule_starts_a_new_record(clock: FakeClock) -> None:
    store = StateStore("trades")
    key = ("trades", f"{STATE_KEY_PREFIX}:trades{LATE_KEY_SUFFIX}")
    store.rows[key] = AbsenceRecord(since=START - 9 * DAY, rule="another rule").to_record()
    await collect(clock, late_watcher(store).run(), until=60)
    assert told_due(store)["since"] == START and told_due(store)["rule"] == due_rule_key(DUE)
    assert TOLD == []  # Tuesday 09:30 passed before it began watching with this rule


async def test_an_alert_a_restart_cut_short_is_said_again_marked_so(clock: FakeClock) -> None:
    store = StateStore("trades")
    # What a kill -9 inside the callbacks leaves: the due time written as being told.
    store.rows[("trades", f"{STATE_KEY_PREFIX}:trades{LATE_KEY_SUFFIX}")] = AbsenceRecord(
        since=START - DAY, told=ny(14, 9, 30), telling=True, rule=due_rule_key(DUE)
    ).to_record()
    await collect(clock, late_watcher(store).run(), until=ny(15, 8) - START)
    assert [(told["due"], told["resent"]) for told in TOLD] == [(units.iso(ny(14, 9, 30)), True)]
    assert told_due(store)["telling"] is False


async def test_a_failing_callback_is_logged_and_the_watcher_goes_on(
    clock: FakeClock, capfd: pytest.CaptureFixture[str]
) -> None:
    store = StateStore("trades")
    LANDED.append((ny(15, 10), "2023-11-15"))
    watcher = late_watcher(store, on_late=[failing_alert, record_late])
    events = await collect(clock, watcher.run(), until=ny(15, 12) - START)
    assert len(TOLD) == 1  # the second callback still ran
    assert [payload["value"] for _, payload in events] == ["2023-11-15"]  # and the watcher reported on
    assert f"on_late callback {__name__}.failing_alert failed" in "".join(capfd.readouterr())


def test_the_rule_late_since_the_due_time_before_or_since_it_began_watching() -> None:
    began = AbsenceRecord(since=ny(15, 9))
    assert late_due(DUE, ny(15, 9, 29), began) is None  # not due yet
    assert late_due(DUE, ny(15, 9, 30), began) == ny(15, 9, 30)  # began at 09:00, nothing by 09:30
    assert late_due(DUE, ny(15, 9, 30), landed(DUE, ny(15, 9, 10), began)) is None
    assert late_due(DUE, ny(15, 9, 30), began.telling_for(ny(15, 9, 30))) is None  # told already
    # a value a shared poll saw just before this watcher began counts from its start
    assert late_due(DUE, ny(15, 9, 30), landed(DUE, ny(15, 8, 59), began)) is None
    started_late = AbsenceRecord(since=ny(15, 10))
    assert late_due(DUE, ny(15, 11), started_late) is None  # it was not watching at 09:30
    old = AbsenceRecord(since=ny(13, 0), told=ny(14, 9, 30))
    # a value after a told due time counts for the next one; one at or before it does not
    assert late_due(DUE, ny(15, 9, 31), landed(DUE, ny(14, 9, 31), old)) is None
    assert late_due(DUE, ny(15, 9, 31), replace(old, landed=ny(14, 9, 30))) == ny(15, 9, 30)
    # a value the first check after an undecided due time sees meets that one, not the next
    seen_late = landed(DUE, ny(15, 10), old)
    assert seen_late.landed == ny(15, 9, 30) and late_due(DUE, ny(15, 10), seen_late) is None
    assert late_due(DUE, ny(16, 9, 30), seen_late) == ny(16, 9, 30)
    # Thanksgiving (Thursday 23) has no due time: Friday's window starts at Wednesday's
    wednesday = old.telling_for(ny(22, 9, 30))
    assert late_due(DUE, ny(23, 12), wednesday) is None
    assert late_due(DUE, ny(24, 9, 30), landed(DUE, ny(22, 10), wednesday)) is None
    assert late_due(DUE, ny(24, 9, 30), wednesday) == ny(24, 9, 30)


def test_serialize_keeps_the_due_time_and_a_watcher_without_one_keeps_its_identity() -> None:
    watcher = late_watcher(None)
    _, kwargs = watcher.serialize()
    assert kwargs["due"] == DUE.to_dict()
    assert kwargs["on_late"] == {"parsed": [f"{__name__}.record_late"]}  # not imported again to build it
    again = rebuilt(watcher, StateStore("trades"))
    assert again.due == DUE and again.on_late == watcher.on_late
    _, plain = late_watcher(None, due=None, on_late=None).serialize()
    assert "due" not in plain and "on_late" not in plain
    assert watcher.shared_stream_key() == late_watcher(None, due=None, on_late=None).shared_stream_key()


BAD = [
    (
        {"due": DueTime(after=datetime.timedelta(hours=2))},
        "due: a condition watcher's due time is a time of day",
    ),
    ({"due": DueTime("09:30", lag=1)}, "due.lag: a condition watcher's due time is each business day's"),
    (
        {"due": DueTime("09:30", reference="logical_date")},
        "due.reference: a condition watcher runs in no DAG",
    ),
    ({"due": {"at": "25:00"}}, "due.at: expected a time of day"),
    ({"due": "09:30"}, "due: expected airflow_smart_ext.timetables.DueTime"),
    ({"due": None}, "on_late: needs due="),
    ({"on_late": lambda context: None}, "on_late: <function <lambda>"),
    (
        {"on_late": "no_such_module.alert"},
        "on_late: 'no_such_module.alert' does not import (ModuleNotFoundError",
    ),
    ({"on_late": f"{__name__}.DUE"}, f"on_late: '{__name__}.DUE' is not callable"),
]


@pytest.mark.parametrize(
    ("overrides", "words"), BAD, ids=[words.split(" ")[0] + str(n) for n, (_, words) in enumerate(BAD)]
)
def test_bad_due_arguments_fail_at_parse_naming_the_parameter(overrides: dict[str, Any], words: str) -> None:
    with pytest.raises(WatcherArgumentError, match="^" + re.escape(words)):
        late_watcher(None, **overrides)


def test_before_3_3_a_watchers_due_time_fails_at_parse_naming_the_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compat.asset_watchers, "ASSET_STATE_STORE_SUPPORTED", False)
    with pytest.raises(WatcherArgumentError, match=r"needs Airflow >= 3\.3 .* Use a BackoffSensor with due="):
        late_watcher(None)


def hanging_alert(context: dict[str, Any]) -> None:
    RELEASE.wait(30)  # a webhook that does not answer


RELEASE = threading.Event()


async def test_a_hung_callback_never_holds_the_watcher_and_is_given_up_at_its_time_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On the real clock (the virtual one stops while a thread is busy): the alert is said at once and its
    callbacks run beside the watcher; a callback over its time limit is abandoned, logged, and the record then
    says the alert is done."""
    monkeypatch.setattr(watcher_lateness, "CALLBACK_TIME_LIMIT_SECONDS", 0.3)
    RELEASE.clear()
    store = StateStore("trades")
    accessors = list(store._by_name.values())
    lateness = watcher_lateness.WatcherLateness(
        DUE,
        [f"{__name__}.hanging_alert", f"{__name__}.record_late"],
        "trades",
        "k",
        ["trades"],
        accessors,
        LOG,
    )
    lateness.record = AbsenceRecord(since=ny(14, 9), rule=due_rule_key(DUE))
    await lateness.checked(3, None, ny(15, 9, 31))  # the deciding check of Wednesday 09:30
    (alert,) = lateness._alerts
    assert not alert.done() and TOLD == []  # the check returned while its first callback still hangs
    assert store.rows[("trades", "k#late")]["telling"] is True
    try:
        await asyncio.wait_for(alert, 5)
    finally:
        RELEASE.set()
    assert [told["due"] for told in TOLD] == [units.iso(ny(15, 9, 30))]  # the next callback still ran
    assert store.rows[("trades", "k#late")]["telling"] is False
    await log_lines.flushed()
    assert f"on_late callback {__name__}.hanging_alert failed" in caplog.text
