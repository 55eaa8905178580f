"""Condition watchers with ``every_value=True`` (issue 34, part 1): one event per value after the watermark, in
order, each with its own ``seq`` — bursts, catch-up after a stopped triggerer, late values, restarts at every
point of a burst, sharing and the arguments refused. The pure half (``values_after``) first, then the watcher
on the virtual clock with a sensor's list and with SQL on SQLite (the state store: ``watcher_helpers``)."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import sqlite3
from typing import Any
from urllib.parse import quote

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.conditions.sql_values import SqlValuesSharedCheck
from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher
from airflow_smart_ext.triggers.watcher_edge import COMMIT_DELAY_SECONDS
from airflow_smart_ext.triggers.watermark import (
    ValueNotReportable,
    Watermark,
    values_after,
)
from airflow_smart_ext.wait_model.parameters import WatcherArgumentError
from airflow_smart_ext.wait_model.watcher_state import STATE_KEY_PREFIX
from airflow_smart_ext.watchers import sensor_condition, sql_condition
from tests.unit.clock import START, FakeClock
from tests.unit.watcher_helpers import StateStore, collect, values

needs_watchers = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED, reason="asset watchers need Airflow >= 3.0"
)
needs_state_store = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED,
    reason="the asset state store (AIP-103) needs Airflow >= 3.3",
)

# --- the pure half: which values of one check are new, in which order -----------------------------------

# (case, the check's values, the watermark, value_key, the values reported in turn)
VALUES_AFTER = [
    ("a burst of 3, given in any order: ascending", ["d3", "d1", "d2"], None, None, ["d1", "d2", "d3"]),
    ("only the values after the watermark", ["d1", "d2", "d3"], "d1", None, ["d2", "d3"]),
    ("a late value at or below the watermark: not reported", ["d2", "d3"], "d3", None, []),
    ("a value twice is one value", ["d2", "d2"], "d1", None, ["d2"]),
    ("numbers order as numbers", [10, 9, 1.5], 1, None, [1.5, 9, 10]),
    ("dates travel and order as ISO text", [datetime.date(2026, 1, 2)], "2026-01-01", None, ["2026-01-02"]),
    ("value_key picks each item's key", [{"day": "d2"}, {"day": "d1"}], None, "day", ["d1", "d2"]),
    ("a NULL is no value", [None, "d1"], None, None, ["d1"]),
    ("nothing", [], "d1", None, []),
]


@pytest.mark.parametrize(
    ("found", "after", "value_key", "expected"),
    [c[1:] for c in VALUES_AFTER],
    ids=[c[0] for c in VALUES_AFTER],
)
def test_the_values_after_the_watermark_in_order(
    found: list[Any], after: Any, value_key: Any, expected: Any
) -> None:
    assert values_after(found, after, value_key) == expected


# (case, the check's value, the watermark, words of the error)
NOT_ORDERED = [
    ("not a list", "d1", None, "needs a list of values"),
    ("numbers and text", [1, "d1"], None, "must all be numbers or all text"),
    ("text after a number watermark", ["d1"], 5, "must all be numbers or all text"),
    ("a bool is not a number here", [True], None, "must all be numbers or all text"),
    ("a dict cannot be ordered", [{"day": "d1"}], None, "must all be numbers or all text"),
    ("a Decimal travels as text, ordered wrongly", [decimal.Decimal("10")], None, "cast it to an integer"),
]


@pytest.mark.parametrize(
    ("found", "after", "words"), [c[1:] for c in NOT_ORDERED], ids=[c[0] for c in NOT_ORDERED]
)
def test_values_that_cannot_be_ordered_are_an_error(found: Any, after: Any, words: str) -> None:
    with pytest.raises(ValueNotReportable, match=words):
        values_after(found, after)


# --- a sensor whose XCom value is the list of days landed (importable by classpath) --------------------

LANDED: dict[str, list[tuple[float, str]]] = {}


class DaysSensor(compat.locations.BaseSensorOperator):
    """Done once a day landed; its XCom value is every day landed so far, newest first (any order will do)."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> Any:
        days = [day for at, day in LANDED.get(self.name, []) if at <= seam.now()]
        if not days:
            return False
        return compat.locations.PokeReturnValue(is_done=True, xcom_value=sorted(days, reverse=True))


@pytest.fixture(autouse=True)
def _reset() -> Any:
    LANDED.clear()
    yield


def days_watcher(name: str = "a", store: StateStore | None = None, **overrides: Any) -> ConditionWatcher:
    arguments: dict[str, Any] = {"poke_interval": 10, "max_wait": 40, "jitter": "none", "every_value": True}
    arguments.update(overrides)
    watcher = ConditionWatcher(sensor_condition(DaysSensor, name=name), **arguments)
    watcher.asset_state_store = store  # what the triggerer injects (3.3)
    return watcher


def rebuilt(watcher: ConditionWatcher, store: StateStore | None) -> ConditionWatcher:
    """The watcher as a restarted triggerer builds it: from its serialized kwargs, the store injected."""
    _, kwargs = watcher.serialize()
    again = ConditionWatcher(**json.loads(json.dumps(kwargs)))
    again.asset_state_store = store
    return again


def burst(*days: str, at: float) -> list[tuple[float, str]]:
    return [(START + at, day) for day in days]


def chain(days: list[str], previous: Any = None, first_seq: int = 1) -> list[tuple[Any, ...]]:
    """The events of ``days`` reported in turn, none redelivered."""
    previous_days = [previous, *days[:-1]]
    return [(day, first_seq + n, previous_days[n], False) for n, day in enumerate(days)]


# (case, what lands when, the events until START + 300 s, when they are handed over)
BURSTS = [
    ("a burst of 1", burst("d1", at=25), chain(["d1"]), [30]),
    ("a burst of 2", burst("d1", "d2", at=25), chain(["d1", "d2"]), [30, 35]),
    ("a burst of 3", burst("d1", "d2", "d3", at=25), chain(["d1", "d2", "d3"]), [30, 35, 40]),
    (
        "bursts of 1, 3 and 2",
        [*burst("d1", at=5), *burst("d2", "d3", "d4", at=95), *burst("d5", "d6", at=185)],
        chain([f"d{n}" for n in range(1, 7)]),
        [10, 120, 125, 130, 190, 195],
    ),
]


@needs_watchers
@pytest.mark.parametrize(("landed", "expected", "times"), [c[1:] for c in BURSTS], ids=[c[0] for c in BURSTS])
async def test_every_value_of_a_burst_is_one_event_in_order(
    clock: FakeClock, landed: list[tuple[float, str]], expected: list[tuple[Any, ...]], times: list[float]
) -> None:
    LANDED["a"] = landed
    watcher = days_watcher("a")
    events = await collect(clock, watcher.run(), until=300)
    assert values(events) == expected
    # each event names its watcher (consumers number values per watcher): the watermark's name, no prefix
    assert {payload["watcher"] for _, payload in events} == {watcher._edge.store_key().split(":", 1)[1]}
    # the values of one check one after the other: each event waits for the commit of the one before it
    assert [at for at, _ in events] == times
    assert COMMIT_DELAY_SECONDS == 5


@needs_watchers
async def test_start_after_reports_only_the_values_after_it(clock: FakeClock) -> None:
    LANDED["a"] = burst("d1", "d2", "d3", at=5)
    events = await collect(clock, days_watcher("a", start_after="d1").run(), until=100)
    assert values(events) == chain(["d2", "d3"], previous="d1")


@needs_watchers
async def test_a_late_value_at_or_below_the_watermark_is_not_reported(clock: FakeClock) -> None:
    LANDED["a"] = [*burst("d1", "d3", at=5), *burst("d2", at=95)]  # d2 lands after d3 was reported
    events = await collect(clock, days_watcher("a").run(), until=300)
    assert values(events) == chain(["d1", "d3"])


# --- restarts (3.3: the asset state store) ----------------------------------------------------------------

DAYS = ["d1", "d2", "d3"]


def _after_restart(stopped_after: int | None) -> list[tuple[Any, ...]]:
    """A burst of 3 whose first run stopped right after handing over event k (not committed: k is sent again,
    flagged, then the rest), or after the burst was committed (None: nothing again)."""
    if stopped_after is None:
        return []
    k = stopped_after
    again = [(DAYS[k - 1], k, DAYS[k - 2] if k > 1 else None, True)]
    return again + chain(DAYS[k:], previous=DAYS[k - 1], first_seq=k + 1)


RESTART_POINTS = [(f"after event {k}, before its commit", k) for k in (1, 2, 3)] + [
    ("after the burst was committed", None)
]


@needs_state_store
@pytest.mark.parametrize("stop_after", [c[1] for c in RESTART_POINTS], ids=[c[0] for c in RESTART_POINTS])
async def test_a_restart_in_a_burst_loses_nothing_and_repeats_only_the_uncommitted_value_flagged(
    clock: FakeClock, stop_after: int | None
) -> None:
    LANDED["a"] = burst(*DAYS, at=5)
    store = StateStore("orders_daily")
    first = days_watcher("a", store)
    before = await collect(clock, first.run(), until=50, stop_after=stop_after)
    assert values(before) == chain(DAYS[: stop_after or 3])
    after = await collect(clock, rebuilt(first, store).run(), until=300)
    assert values(after) == _after_restart(stop_after)
    everything = values(before) + values(after)
    assert [event[0] for event in everything if not event[3]] == DAYS  # each once, in order, unflagged
    assert [event[0] for event in everything if event[3]] == (
        [] if stop_after is None else [DAYS[stop_after - 1]]
    )
    (record,) = store.watermarks().values()
    assert record == {"format": 1, "value": "d3", "seq": 3}


@needs_state_store
async def test_catch_up_after_a_stopped_triggerer_reports_each_value_missed(clock: FakeClock) -> None:
    LANDED["a"] = [*burst("d1", at=5), *burst("d2", "d3", at=60), *burst("d4", at=80)]
    store = StateStore("orders_daily")
    first = days_watcher("a", store)
    before = await collect(clock, first.run(), until=50)  # stopped; d2-d4 land while it is down
    await clock.asleep(START + 100 - clock.now)
    after = await collect(clock, rebuilt(first, store).run(), until=300)
    assert values(before) == chain(["d1"])
    assert values(after) == chain(["d2", "d3", "d4"], previous="d1", first_seq=2)


# --- SQL: the watermark bound as the query's ``after`` -----------------------------------------------------

CONN_ID = "smart_ext_every_value_sqlite"


@pytest.fixture
def orders_db(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "orders.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders_loaded (day TEXT)")
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", f"sqlite://{quote(str(path), safe='')}")
    return str(path)


async def load(clock: FakeClock, orders_db: str, at: float, *days: str) -> None:
    """One insert of ``days`` at ``START + at`` (a burst in one transaction)."""
    await clock.asleep(START + at - clock.now)
    with sqlite3.connect(orders_db) as db:
        db.executemany("INSERT INTO orders_loaded VALUES (?)", [(day,) for day in days])


NAMED = "SELECT day FROM orders_loaded WHERE day > :after ORDER BY day"
POSITIONAL = "SELECT day FROM orders_loaded WHERE day < ? AND day > ? ORDER BY day"

# (case, sql, its own parameters)
SQL_STYLES = [("named :after", NAMED, None), ("positional: the watermark bound last", POSITIONAL, ["2027"])]


def sql_watcher(sql: str = NAMED, parameters: Any = None, **overrides: Any) -> ConditionWatcher:
    arguments: dict[str, Any] = {
        "poke_interval": 10,
        "max_wait": 40,
        "jitter": "none",
        "every_value": True,
        "start_after": "2025-12-31",
    }
    arguments.update(overrides)
    return ConditionWatcher(sql_condition(CONN_ID, sql, parameters=parameters), **arguments)


@needs_watchers
@pytest.mark.parametrize(("sql", "parameters"), [c[1:] for c in SQL_STYLES], ids=[c[0] for c in SQL_STYLES])
async def test_a_sql_burst_of_3_in_one_insert_is_3_events_in_order(
    clock: FakeClock, orders_db: str, sql: str, parameters: Any
) -> None:
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]
    loads = asyncio.gather(load(clock, orders_db, 25, *days), load(clock, orders_db, 150, "2026-01-04"))
    events = await collect(clock, sql_watcher(sql, parameters).run(), until=300)
    await loads
    assert values(events) == chain([*days, "2026-01-04"], previous="2025-12-31")


@needs_state_store
async def test_a_sql_restart_in_a_burst_binds_the_stored_watermark(clock: FakeClock, orders_db: str) -> None:
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]
    loading = asyncio.ensure_future(load(clock, orders_db, 5, *days))
    store = StateStore("orders_daily")
    first = sql_watcher()
    first.asset_state_store = store
    before = await collect(clock, first.run(), until=50, stop_after=2)
    await loading
    after = await collect(clock, rebuilt(first, store).run(), until=300)
    assert values(before) == chain(days[:2], previous="2025-12-31")
    assert values(after) == [(days[1], 2, days[0], True), (days[2], 3, days[1], False)]


# --- sharing: never another watermark's values ----------------------------------------------------------


@needs_watchers
def test_what_is_shared() -> None:
    """A SQL query bound to a watcher's watermark is no shared stream; a sensor's list is (each edge filters it
    by its own watermark), so its key leaves out every_value and start_after as it leaves out the other edge
    arguments."""
    assert sql_watcher().shared_stream_key() is None
    if compat.asset_watchers.SHARED_STREAMS_SUPPORTED:
        latest = days_watcher(every_value=False).shared_stream_key()
        assert latest is not None
        assert days_watcher().shared_stream_key() == latest
        assert days_watcher(start_after="d2").shared_stream_key() == latest


@needs_state_store
async def test_watchers_at_different_watermarks_never_get_each_others_values(
    clock: FakeClock, orders_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three watchers of one query: two at one watermark share its query (one group), the third, further
    along, runs its own; each reports exactly the values after its own watermark."""
    queried: list[tuple[float, Any]] = []
    real = SqlValuesSharedCheck.query

    def counted(connection: Any, sql: str, parameters: Any, hook_params: Any) -> Any:
        queried.append((seam.now() - START, parameters["after"]))
        return real(connection, sql, parameters, hook_params)

    monkeypatch.setattr(SqlValuesSharedCheck, "query", staticmethod(counted))
    await load(clock, orders_db, 0, "2026-01-01", "2026-01-02", "2026-01-03")
    watermarks = {"behind_1": "2025-12-31", "behind_2": "2025-12-31", "ahead": "2026-01-02"}
    watchers = []
    for name, mark in watermarks.items():
        store = StateStore(name)
        store.rows[(name, f"{STATE_KEY_PREFIX}:{name}")] = Watermark(mark, 2).to_record()
        watcher = sql_watcher(state_key=name, splay=0)
        watcher.asset_state_store = store
        watchers.append(watcher)
    results = await asyncio.gather(*(collect(clock, w.run(), until=12) for w in watchers))
    behind = chain(["2026-01-01", "2026-01-02", "2026-01-03"], previous="2025-12-31", first_seq=3)
    assert [values(events) for events in results] == [behind, behind, chain(["2026-01-03"], "2026-01-02", 3)]
    # one query per watermark, the two behind sharing theirs; the next check binds the watermark it moved to
    assert sorted(queried) == [(0, "2025-12-31"), (0, "2026-01-02"), (10, "2026-01-03")]


# --- arguments ------------------------------------------------------------------------------------------

# (case, how the watcher is built, the words its error must contain)
REFUSED = [
    (
        "a SQL condition without start_after",
        lambda: sql_watcher(start_after=None),
        "every_value=True on a SQL condition needs start_after=",
    ),
    (
        "start_after without every_value",
        lambda: days_watcher(every_value=False, start_after="d1"),
        "start_after='d1'",
    ),
    (
        "report_first_value=False",
        lambda: days_watcher(report_first_value=False),
        "report_first_value=False cannot be combined with every_value=True",
    ),
    (
        "a SQL success criterion",
        lambda: ConditionWatcher(
            sql_condition(CONN_ID, NAMED, success="json.loads"), every_value=True, start_after="d"
        ),
        "success='json.loads' cannot be combined with every_value=True",
    ),
    (
        "a start_after that is not a value",
        lambda: days_watcher(start_after=[1]),
        "start_after must be None, a number",
    ),
    ("every_value not a bool", lambda: days_watcher(every_value="yes"), "every_value must be True or False"),
]


@needs_watchers
@pytest.mark.parametrize(("build", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_bad_combinations_are_refused_at_parse_naming_the_parameter(build: Any, words: str) -> None:
    with pytest.raises(WatcherArgumentError, match=words.replace("(", r"\(").replace(")", r"\)")):
        build()


@needs_watchers
def test_the_mode_is_serialized_only_when_set() -> None:
    """A latest-value watcher keeps the kwargs (and so the Airflow identity) it had; the mode travels."""
    latest = days_watcher(every_value=False)
    assert "every_value" not in latest.serialize()[1]
    watcher = days_watcher(start_after=datetime.date(2026, 1, 1))
    _, kwargs = watcher.serialize()
    assert (kwargs["every_value"], kwargs["start_after"]) == (True, "2026-01-01")
    assert rebuilt(watcher, None).serialize() == watcher.serialize()
    assert watcher._edge.store_key() != latest._edge.store_key()  # a latest list is no watermark of this mode
