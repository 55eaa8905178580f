"""Condition watchers in the triggerer's shape (issue 27): the poll, the edge, the asset state store, restarts and
sharing, on the unit tests' virtual clock with the real check types (a sensor's poke; SQL on SQLite) and, on
Airflow 3.3, Airflow's own ``SharedStreamManager``. The state store is a stand-in with Airflow's accessor shape
(the real one: tests/integration/test_watchers_live.py, in a real Airflow 3.3)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import defaultdict
from typing import Any
from urllib.parse import quote

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher
from airflow_smart_ext.triggers.interpreters import LazyInterpreter
from airflow_smart_ext.wait_model.parameters import WatcherArgumentError
from airflow_smart_ext.wait_model.watcher_state import STATE_KEY_PREFIX
from airflow_smart_ext.watchers import sensor_condition, sql_condition
from tests.unit.clock import START, FakeClock
from tests.unit.watcher_helpers import StateStore, collect, values

needs_watchers = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED,
    reason="asset watchers need Airflow >= 3.0 (2.11: the parse-time error test)",
)
needs_state_store = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED,
    reason="the asset state store (AIP-103) needs Airflow >= 3.3",
)

# --- a sensor whose partitions land on the virtual clock (importable by classpath) -----------------------

TIMELINE: dict[str, list[tuple[float, str]]] = {}
POKES: dict[str, list[float]] = defaultdict(list)


class PartitionSensor(compat.locations.BaseSensorOperator):
    """Done once a partition landed; its XCom value is the newest day (a dict, as sensors often return)."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> Any:
        now = seam.now()
        POKES[self.name].append(now - START)
        landed = [day for at, day in TIMELINE.get(self.name, []) if at <= now]
        if not landed:
            return False
        return compat.locations.PokeReturnValue(is_done=True, xcom_value={"day": landed[-1], "rows": 7})


class FlakySensor(PartitionSensor):
    """Raises ``kind`` until START + 40 s (a ConnectionError is an outage, a RuntimeError a bug), then d1."""

    def __init__(self, *, kind: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind

    def poke(self, context: Any) -> Any:
        POKES[self.name].append(seam.now() - START)
        if seam.now() < START + 40:
            raise {"outage": ConnectionError, "bug": RuntimeError}[self.kind]("refused")
        return compat.locations.PokeReturnValue(is_done=True, xcom_value={"day": "d1"})


class DoneSensor(PartitionSensor):
    """Done, but says nothing about what arrived (a bare True)."""

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(seam.now() - START)
        return True


@pytest.fixture(autouse=True)
def _reset() -> Any:
    TIMELINE.clear()
    POKES.clear()
    yield


def partition_watcher(name: str, store: StateStore | None = None, **overrides: Any) -> ConditionWatcher:
    arguments: dict[str, Any] = {
        "poke_interval": 10,
        "backoff_factor": 2,
        "max_wait": 40,
        "jitter": "none",
        "value_key": "day",
    }
    arguments.update(overrides)
    watcher = ConditionWatcher(sensor_condition(PartitionSensor, name=name), **arguments)
    watcher.asset_state_store = store  # what the triggerer injects (3.3)
    return watcher


def rebuilt(watcher: ConditionWatcher, store: StateStore | None) -> ConditionWatcher:
    """The watcher as a restarted triggerer builds it: from its serialized kwargs, the store injected."""
    classpath, kwargs = watcher.serialize()
    assert (
        classpath == "airflow_smart_ext.triggers.watcher.ConditionWatcher"
    )  # what rows keep (deferral_paths)
    again = ConditionWatcher(**json.loads(json.dumps(kwargs)))
    again.asset_state_store = store
    return again


# --- edges and the schedule, in the trigger -----------------------------------------------------------


@needs_watchers
async def test_one_event_per_new_value_and_the_backoff_restarts_after_each(clock: FakeClock) -> None:
    TIMELINE["a"] = [(START + 25, "d1"), (START + 95, "d2")]
    events = await collect(clock, partition_watcher("a").run(), until=200)
    assert values(events) == [("d1", 1, None, False), ("d2", 2, "d1", False)]
    assert [at for at, _ in events] == [30, 100]  # the checks that saw them
    assert events[0][1]["observed_at"] == "2023-11-14T22:13:50.000+00:00"  # START + 30, as ISO text
    # 10 x2 up to 40 s: 0, 10, 30 (d1: restart), 40, 60, 100 (d2: restart), 110, 130, 170, 210 ...
    assert POKES["a"][:9] == [0, 10, 30, 40, 60, 100, 110, 130, 170]


@needs_watchers
async def test_no_event_for_an_unchanged_value(clock: FakeClock) -> None:
    TIMELINE["a"] = [(START, "d1")]
    events = await collect(clock, partition_watcher("a").run(), until=600)
    assert values(events) == [("d1", 1, None, False)]
    assert len(POKES["a"]) >= 15  # it kept checking (at the 40 s cap)


# (case, report_first_value, events of the restarted watcher) -- Airflow 3.0-3.2 keep no watermark
NO_STORE_RESTARTS = [
    ("report the first value: the current one again", True, [("d1", 1, None, False), ("d2", 2, "d1", False)]),
    ("baseline: only values after the restart", False, [("d2", 1, "d1", False)]),
]


@needs_watchers
@pytest.mark.parametrize(
    ("report_first", "after"), [c[1:] for c in NO_STORE_RESTARTS], ids=[c[0] for c in NO_STORE_RESTARTS]
)
async def test_without_a_state_store_a_restart_starts_from_report_first_value(
    clock: FakeClock, report_first: bool, after: list[tuple[Any, ...]]
) -> None:
    TIMELINE["a"] = [(START + 5, "d1"), (START + 95, "d2")]
    first = partition_watcher("a", report_first_value=report_first)
    await collect(clock, first.run(), until=50)
    events = await collect(clock, rebuilt(first, None).run(), until=300)
    assert values(events) == after


# (case, sensor class, its extra kwargs, the events until START + 200 s)
CHECK_BEHAVIOURS = [
    (
        "an outage is ridden out, then the value is reported",
        FlakySensor,
        {"kind": "outage"},
        [("d1", 1, None, False)],
    ),
    (
        "a permanent error is logged and the watcher keeps checking",
        FlakySensor,
        {"kind": "bug"},
        [("d1", 1, None, False)],
    ),
    ("a check that is done without a value reports nothing", DoneSensor, {}, []),
]


@needs_watchers
@pytest.mark.parametrize(
    ("sensor", "extra", "expected"), [c[1:] for c in CHECK_BEHAVIOURS], ids=[c[0] for c in CHECK_BEHAVIOURS]
)
async def test_what_a_check_says_and_what_the_watcher_does(
    clock: FakeClock, sensor: type, extra: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    watcher = ConditionWatcher(
        sensor_condition(sensor, name="a", **extra),
        poke_interval=10,
        max_wait=20,
        jitter="none",
        value_key="day",
    )
    events = await collect(clock, watcher.run(), until=200)
    assert values(events) == expected
    assert len(POKES["a"]) >= 10  # it never stopped checking


# --- the asset state store: restarts (3.3) ---------------------------------------------------------------

# (case, events the first run hands over before it stops (None: it runs until t=50), events after the restart)
RESTARTS = [
    ("stopped after the commit: nothing twice", None, [("d2", 2, "d1", False)]),
    (
        "stopped between the event and its commit: sent again, flagged",
        1,
        [("d1", 1, None, True), ("d2", 2, "d1", False)],
    ),
]


@needs_state_store
@pytest.mark.parametrize(("stop_after", "after"), [c[1:] for c in RESTARTS], ids=[c[0] for c in RESTARTS])
async def test_a_restart_resumes_from_the_stored_watermark(
    clock: FakeClock, stop_after: int | None, after: list[tuple[Any, ...]]
) -> None:
    TIMELINE["a"] = [(START + 5, "d1"), (START + 95, "d2")]
    store = StateStore("orders_daily")
    first = partition_watcher("a", store)
    before = await collect(clock, first.run(), until=50, stop_after=stop_after)
    assert values(before) == [("d1", 1, None, False)]
    events = await collect(clock, rebuilt(first, store).run(), until=300)
    assert values(events) == after
    (record,) = store.watermarks().values()
    assert record == {"format": 1, "value": "d2", "seq": 2}


@needs_state_store
async def test_every_watched_asset_keeps_the_watermark(clock: FakeClock) -> None:
    TIMELINE["a"] = [(START + 5, "d1")]
    store = StateStore("orders_daily", "orders_copy")  # identical watchers of two assets: one trigger
    await collect(clock, partition_watcher("a", store, state_key="orders").run(), until=60)
    assert store.watermarks() == {
        (asset, f"{STATE_KEY_PREFIX}:orders"): {"format": 1, "value": "d1", "seq": 1}
        for asset in ("orders_daily", "orders_copy")
    }
    # its last check, beside the watermark of each asset (issue 35: what the Waits view shows)
    checks = store.last_checks()
    assert set(checks) == {
        (asset, f"{STATE_KEY_PREFIX}:orders#last-check") for asset in ("orders_daily", "orders_copy")
    }
    assert {record["outcome"] for record in checks.values()} == {"met"}


@needs_state_store
async def test_a_state_store_outage_delays_but_neither_loses_nor_repeats(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    TIMELINE["a"] = [(START + 5, "d1")]
    store = StateStore("orders_daily")
    accessor = store._by_name["orders_daily"]
    real_aset = accessor.aset
    refused: list[float] = []

    async def aset_down_until_40s(key: str, value: Any) -> None:
        if clock.now < START + 40:
            refused.append(clock.now - START)
            raise ConnectionError("api-server unavailable")
        await real_aset(key, value)

    monkeypatch.setattr(accessor, "aset", aset_down_until_40s)
    events = await collect(clock, partition_watcher("a", store).run(), until=200)
    assert refused  # the intent of d1 was refused: no event then
    assert values(events) == [("d1", 1, None, False)]
    assert events[0][0] >= 40


# --- SQL: a watermark query ------------------------------------------------------------------------------


@pytest.fixture
def orders_db(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "orders.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders_loaded (day TEXT)")
    monkeypatch.setenv("AIRFLOW_CONN_SMART_EXT_WATCHER_SQLITE", f"sqlite://{quote(str(path), safe='')}")
    return str(path)


@needs_watchers
async def test_a_sql_watermark_reports_each_new_day(clock: FakeClock, orders_db: str) -> None:
    async def load(day: str, at: float) -> None:
        await clock.asleep(START + at - clock.now)
        with sqlite3.connect(orders_db) as db:
            db.execute("INSERT INTO orders_loaded VALUES (?)", (day,))

    loads = [asyncio.ensure_future(load(f"2026-01-0{n}", 25 + 60 * n)) for n in range(1, 4)]
    watcher = ConditionWatcher(
        sql_condition("smart_ext_watcher_sqlite", "SELECT max(day) FROM orders_loaded"),
        poke_interval=10,
        max_wait=40,
        jitter="none",
    )
    events = await collect(clock, watcher.run(), until=400)
    await asyncio.gather(*loads)
    # An empty table (max() is NULL) is no value; each new day is one event, nothing in between.
    assert values(events) == [
        ("2026-01-01", 1, None, False),
        ("2026-01-02", 2, "2026-01-01", False),
        ("2026-01-03", 3, "2026-01-02", False),
    ]


# --- sharing: Airflow 3.3's shared streams ----------------------------------------------------------------


@needs_watchers
def test_the_shared_stream_key_leaves_out_what_only_the_edge_uses() -> None:
    base = partition_watcher("a")
    same_poll = [
        partition_watcher("a", state_key="other"),
        partition_watcher("a", report_first_value=False),
        partition_watcher("a", value_key="rows"),
    ]
    other_poll = [
        partition_watcher("b"),
        partition_watcher("a", poke_interval=20),
        partition_watcher("a", rate_limit=1),
    ]
    if not compat.asset_watchers.SHARED_STREAMS_SUPPORTED:
        assert base.shared_stream_key() is None
        return
    assert base.shared_stream_key() is not None
    assert all(w.shared_stream_key() == base.shared_stream_key() for w in same_poll)
    assert all(w.shared_stream_key() != base.shared_stream_key() for w in other_poll)
    assert partition_watcher("a", share=False).shared_stream_key() is None


@needs_watchers
async def test_a_late_check_serves_one_of_the_watchers_checks_not_two(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher's check #0 (due at 0) ran 9.6 s late, inside check #1's sharing window (10 s x 0.1 before
    10): check #1 is a check of its own, not that one again (ConditionWatcher passes the check group the
    observation that served its previous check; without it the watcher skipped a check)."""
    late = [9.6]
    failure = LazyInterpreter.failure

    async def busy_first(self: LazyInterpreter) -> Any:
        if late:
            await seam.asleep(late.pop())  # a busy loop: the first round starts late
        return await failure(self)

    monkeypatch.setattr(LazyInterpreter, "failure", busy_first)
    events = await collect(clock, partition_watcher("late").run(), until=35)
    assert events == []
    assert POKES["late"] == pytest.approx([9.6, 10, 30])


# (case, share, checks per cycle for five watchers of one condition, each running its own poll: 3.0-3.2)
OWN_POLLS = [("our in-process group shares", True, 1), ("share=False: each its own", False, 5)]


@needs_watchers
@pytest.mark.parametrize(("share", "per_cycle"), [c[1:] for c in OWN_POLLS], ids=[c[0] for c in OWN_POLLS])
async def test_without_shared_streams_our_groups_share_the_checks(
    clock: FakeClock, share: bool, per_cycle: int
) -> None:
    TIMELINE["a"] = [(START + 25, "d1")]
    watchers = [partition_watcher("a", StateStore(f"asset_{n}"), share=share) for n in range(5)]
    results = await asyncio.gather(*(collect(clock, w.run(), until=100) for w in watchers))
    assert all(values(events) == [("d1", 1, None, False)] for events in results)
    schedule = [0, 10, 30, 40, 60]  # the one schedule (d1 seen at 30: restart)
    assert POKES["a"][: per_cycle * len(schedule)] == [at for at in schedule for _ in range(per_cycle)]


@pytest.mark.skipif(
    not compat.asset_watchers.SHARED_STREAMS_SUPPORTED, reason="shared streams need Airflow >= 3.3"
)
async def test_watchers_on_one_condition_share_one_poll_through_airflows_shared_stream(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.triggers.shared_stream import SharedStreamManager

    polls: list[str] = []
    real_poll = ConditionWatcher._observations

    def counted_poll(self: ConditionWatcher, log: Any) -> Any:
        polls.append(self.state_key or "")
        return real_poll(self, log)

    monkeypatch.setattr(ConditionWatcher, "_observations", counted_poll)
    TIMELINE["a"] = [(START + 25, "d1"), (START + 95, "d2")]
    manager = SharedStreamManager()
    stores = [StateStore(f"asset_{n}") for n in range(5)]
    watchers = [partition_watcher("a", store, state_key=f"w{n}") for n, store in enumerate(stores)]
    key = watchers[0].shared_stream_key()
    streams = [
        watcher.filter_shared_stream(manager.subscribe(trigger_id=n, trigger=watcher, key=key))
        for n, watcher in enumerate(watchers)
    ]
    results = await asyncio.gather(*(collect(clock, stream, until=200) for stream in streams))
    for n in range(len(watchers)):
        await manager.unsubscribe(n, key)
    for events in results:
        assert values(events) == [("d1", 1, None, False), ("d2", 2, "d1", False)]
    # five watchers, one poll (Airflow's group ran it once, with one member's kwargs) and its checks made once
    assert len(polls) == 1
    assert POKES["a"][:9] == [0, 10, 30, 40, 60, 100, 110, 130, 170]


# --- arguments and versions ------------------------------------------------------------------------------


@needs_watchers
def test_serialize_rebuilds_the_same_watcher() -> None:
    watcher = partition_watcher(
        "a", splay=5, check_timeout=30, rate_limit=2, transient_errors=[ConnectionError]
    )
    classpath, kwargs = watcher.serialize()
    assert kwargs["transient_errors"] == ["builtins.ConnectionError"]
    assert rebuilt(watcher, None).serialize() == (classpath, kwargs)


class LocalError(Exception):
    pass


# (case, how the watcher is built, the words its error must contain)
BAD_WATCHERS = [
    ("an unknown check type", lambda: ConditionWatcher({"type": "http"}), "check['type'] must be one of"),
    ("a bad schedule", lambda: partition_watcher("a", poke_interval=-1), "poke_interval must be"),
    ("a bad value_key", lambda: partition_watcher("a", value_key=3), "value_key must be None"),
    (
        "a transient error type the triggerer cannot import",
        lambda: partition_watcher("a", transient_errors=[type("Local", (Exception,), {})]),
        "cannot be imported by name in the triggerer",
    ),
    ("a SQL selector lambda", lambda: sql_condition("c", "select 1", selector=lambda row: row), "selector="),
    (
        "a SQL criterion path that does not import",
        lambda: sql_condition("c", "select 1", success="no.such.func"),
        "success=",
    ),
    (
        "SQL parameters that are not JSON",
        lambda: sql_condition("c", "select ?", parameters=[object()]),
        "parameters=",
    ),
    ("not a sensor class", lambda: sensor_condition(dict), "sensor_class must be a sensor class"),
]


@needs_watchers
@pytest.mark.parametrize(("build", "words"), [c[1:] for c in BAD_WATCHERS], ids=[c[0] for c in BAD_WATCHERS])
def test_bad_watchers_fail_at_parse_naming_the_parameter(build: Any, words: str) -> None:
    with pytest.raises(WatcherArgumentError) as raised:
        build()
    assert words in str(raised.value)


def test_before_airflow_3_a_watcher_fails_at_parse_naming_3_0_and_the_alternative(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:  # 3.x: the same check, as 2.11 runs it
        monkeypatch.setattr(compat.asset_watchers, "ASSET_WATCHERS_SUPPORTED", False)
    with pytest.raises(compat.asset_watchers.AssetWatchersUnsupported) as raised:
        ConditionWatcher(sensor_condition(PartitionSensor, name="a"))
    message = str(raised.value)
    assert "ConditionWatcher needs Airflow >= 3.0.0" in message
    assert "deferrable=True" in message


@pytest.mark.skipif(
    not compat.versions.AIRFLOW_V_3_3_PLUS, reason="the encoder and decoder read from the 3.3.2 wheel"
)
def test_airflow_serializes_the_watcher_and_the_triggerer_rebuilds_it() -> None:
    """As the dag-processor stores it (``encode_trigger``) and the triggerer builds it back
    (``smart_decode_trigger_kwargs`` then ``cls(**kwargs)``, jobs/triggerer_job_runner.py ``create_triggers``);
    identical watchers hash alike (Airflow runs one trigger for them)."""
    from airflow.sdk import Asset, AssetWatcher
    from airflow.serialization.decoders import smart_decode_trigger_kwargs
    from airflow.serialization.encoders import encode_trigger
    from airflow.triggers.base import BaseEventTrigger

    watcher = partition_watcher("a", transient_errors=[ConnectionError], splay=3)
    Asset("orders_daily", watchers=[AssetWatcher(name="orders_loaded", trigger=watcher)])  # accepted
    encoded = json.loads(json.dumps(encode_trigger(watcher)))
    kwargs = {key: smart_decode_trigger_kwargs(value) for key, value in encoded["kwargs"].items()}
    assert ConditionWatcher(**kwargs).serialize() == watcher.serialize()
    twin = partition_watcher("a", transient_errors=["builtins.ConnectionError"], splay=3.0)
    assert BaseEventTrigger.hash(*twin.serialize()) == BaseEventTrigger.hash(*watcher.serialize())
    other = partition_watcher("a", state_key="x")
    assert BaseEventTrigger.hash(*other.serialize()) != BaseEventTrigger.hash(*watcher.serialize())


def test_the_example_pair_builds_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """example_dags/watcher_orders.py: on 3.x a producer and a consumer scheduled on the watched asset; on
    2.11 no DAG at all (a watcher would fail there; the file says so)."""
    import runpy
    import sys
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "example_dags"
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(examples))
    monkeypatch.delitem(sys.modules, "sensor_common", raising=False)
    namespace = runpy.run_path(str(examples / "watcher_orders.py"))
    dags = {value.dag_id: value for value in namespace.values() if type(value).__name__ == "DAG"}
    if not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
        assert dags == {}
        return
    assert set(dags) == {"watcher_orders_producer", "watcher_orders_consumer"}
    (watcher,) = namespace["orders_daily"].watchers
    assert isinstance(watcher.trigger, ConditionWatcher)
    assert watcher.trigger.serialize()[1]["check"]["success"] == "sensor_common.is_day"
