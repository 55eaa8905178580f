"""Every log line of a condition watcher names its asset and its watcher (issue 34 part 3), and none carries a
secret: through success, not yet, an error, a transient error and code that does not import; on Airflow 3.3's
shared poll, each line of the poll names every watcher reading it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.triggers import log_lines
from tests.unit.clock import START, FakeClock
from tests.unit.watcher_helpers import StateStore, collect, values

pytestmark = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED, reason="asset watchers need Airflow >= 3.0"
)

PARAMETER = "param-s3cret-7f3a"


class ScriptedSensor(compat.locations.BaseSensorOperator):
    """By virtual time: an outage, then a bug, then not yet, then a value."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> Any:
        at = seam.now() - START
        if at < 15:
            raise ConnectionError("connection refused")
        if at < 35:
            raise RuntimeError("a bug in the poke")
        if at < 55:
            return False
        return compat.locations.PokeReturnValue(is_done=True, xcom_value={"day": "d1"})


class Recorder:
    """A trigger's logger: each line as written (its arguments formatted in)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        def write(message: str, *args: Any) -> None:
            self.lines.append((level, message % args if args else message))

        return write


def recorded(watcher: Any) -> Recorder:
    recorder = Recorder()
    watcher._log = recorder  # the logger BaseTrigger.log returns
    return recorder


def asset_words(*names: str) -> str:
    # Before 3.3 Airflow tells a trigger nothing about its assets.
    return (
        f"on asset {', '.join(names)}"
        if compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED
        else "on <not named by this Airflow>"
    )


async def test_every_line_names_the_asset_and_the_watcher(clock: FakeClock) -> None:
    from airflow_smart_ext.watchers import ConditionWatcher, sensor_condition

    watcher = ConditionWatcher(
        sensor_condition(ScriptedSensor, name="a"),
        poke_interval=10,
        backoff_factor=1,
        jitter="none",
        value_key="day",
        state_key="orders_loaded",
    )
    watcher.asset_state_store = StateStore("orders_daily")
    log = recorded(watcher)
    events = await collect(clock, watcher.run(), until=100)
    await log_lines.flushed()
    assert values(events) == [("d1", 1, None, False)]
    levels = {level for level, _ in log.lines}
    assert {"info", "warning", "error"} <= levels, log.lines  # ridden out, failed, not yet, new value
    texts = [text for _, text in log.lines]
    assert any("ConnectionError" in text for text in texts) and any("new value #1" in text for text in texts)
    for text in texts:
        assert text.startswith(f"watcher 'orders_loaded' {asset_words('orders_daily')}: "), text


async def test_unnamed_watchers_are_named_by_their_condition_and_no_line_carries_a_parameter(
    clock: FakeClock, sqlite_conn: str
) -> None:
    from airflow_smart_ext.watchers import ConditionWatcher

    check = {
        "type": "sql",
        "conn_id": "smart_ext_unit_sqlite",
        "sql": "SELECT day FROM missing_table WHERE name = ?",  # an error every check
        "parameters": [PARAMETER],
        "hook_params": None,
        "selector": "smart_ext_not_deployed.pick",  # and code that does not import, first
        "success": None,
        "failure": None,
        "fail_on_empty": False,
    }
    watcher = ConditionWatcher(check, poke_interval=10, backoff_factor=1, jitter="none")
    watcher.asset_state_store = StateStore("orders_daily", "orders_backup")
    watcher.trigger_id = 42  # what the triggerer sets
    log = recorded(watcher)
    await collect(clock, watcher.run(), until=30)
    await log_lines.flushed()
    assert len(log.lines) >= 4, log.lines
    words = asset_words("orders_backup", "orders_daily")
    for _, text in log.lines:
        assert text.startswith(f"watcher <sql on smart_ext_unit_sqlite, trigger 42> {words}: "), text
        assert PARAMETER not in text


@pytest.mark.skipif(
    not compat.asset_watchers.SHARED_STREAMS_SUPPORTED, reason="shared streams need Airflow >= 3.3"
)
async def test_the_lines_of_a_shared_poll_name_every_watcher_reading_it(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.triggers.shared_stream import SharedStreamManager

    from airflow_smart_ext.watchers import ConditionWatcher, sensor_condition

    log = Recorder()  # every watcher's, and the poll's (a watcher Airflow builds from one member's kwargs)
    monkeypatch.setattr(ConditionWatcher, "log", property(lambda self: log))
    manager = SharedStreamManager()
    watchers = []
    for n in range(2):
        watcher = ConditionWatcher(
            sensor_condition(ScriptedSensor, name="shared"),
            poke_interval=10,
            backoff_factor=1,
            jitter="none",
            value_key="day",
            state_key=f"w{n}",
        )
        watcher.asset_state_store = StateStore(f"asset_{n}")
        watchers.append(watcher)
    key = watchers[0].shared_stream_key()
    streams = [
        watcher.filter_shared_stream(manager.subscribe(trigger_id=n, trigger=watcher, key=key))
        for n, watcher in enumerate(watchers)
    ]
    results = await asyncio.gather(*(collect(clock, stream, until=100) for stream in streams))
    for n in range(len(watchers)):
        await manager.unsubscribe(n, key)
    await log_lines.flushed()
    assert [values(events) for events in results] == [[("d1", 1, None, False)]] * 2
    both = "watcher 'w0' on asset asset_0; watcher 'w1' on asset asset_1: "
    texts = [text for _, text in log.lines]
    assert any(text.startswith(f"{both}check #") for text in texts), texts
    for n in range(2):  # each edge's own lines name its watcher
        assert f"watcher 'w{n}' on asset asset_{n}: new value #1: 'd1' (previous None)" in texts
    for text in texts:
        assert text.startswith((both, "watcher 'w0' on asset asset_0: ", "watcher 'w1' on asset asset_1: "))
