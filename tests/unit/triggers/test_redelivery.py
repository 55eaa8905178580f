"""A watcher stopped between its event and the event's commit (issue 34): the stop commits nothing, and the
restart asks Airflow's REST API (a real HTTP server here, in Airflow's response shape) whether the event is
stored before it sends it again: stored -> committed, not sent; not stored, or no answer -> sent again, flagged
(nothing lost). The real triggerer: tests/integration/test_watcher_exactly_once_live.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.triggers.condition_watcher import ConditionWatcher
from airflow_smart_ext.triggers.redelivery import API_CONN_OPTION, is_this_event
from airflow_smart_ext.triggers.watermark import Report
from airflow_smart_ext.watchers import sensor_condition
from tests.unit.clock import START, FakeClock
from tests.unit.watcher_helpers import StateStore, collect, values

pytestmark = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED,
    reason="the asset state store (AIP-103) needs Airflow >= 3.3",
)

ASSET = "orders_daily"
TOKEN = "t0k3n"
UNCOMMITTED = {"format": 1, "value": None, "seq": 0, "pending": "d1"}
LANDED: list[tuple[float, str]] = [(START + 5, "d1"), (START + 95, "d2")]


class LandedSensor(compat.locations.BaseSensorOperator):
    """Done once a value of ``LANDED`` landed on the virtual clock; its XCom value is the newest one."""

    def poke(self, context: Any) -> Any:
        landed = [value for at, value in LANDED if at <= seam.now()]
        return compat.locations.PokeReturnValue(is_done=True, xcom_value=landed[-1]) if landed else False


def watcher(store: StateStore) -> ConditionWatcher:
    """A watcher checking at 0, 10, 30, 40, 60, 100 ... s, with the state store the 3.3 triggerer injects."""
    built = ConditionWatcher(
        sensor_condition(LandedSensor), poke_interval=10, backoff_factor=2, max_wait=40, jitter="none"
    )
    built.asset_state_store = store
    return built


def rebuilt(first: ConditionWatcher, store: StateStore) -> ConditionWatcher:
    """The watcher as a restarted triggerer builds it: from its serialized kwargs, the store injected."""
    _, kwargs = first.serialize()
    again = ConditionWatcher(**json.loads(json.dumps(kwargs)))
    again.asset_state_store = store
    return again


class FakeApi:
    """The api-server's ``/auth/token`` and ``GET /api/v2/assets/events`` (3.3's shapes), serving ``events``."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.login: str | None = None  # set: a token is required
        self.status = 200
        self.queries: list[dict[str, list[str]]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body != {"username": api.login, "password": "secret"}:
                    self._reply(401, {"detail": "Invalid credentials"})
                else:
                    self._reply(201, {"access_token": TOKEN})

            def do_GET(self) -> None:
                url = urlparse(self.path)
                api.queries.append(parse_qs(url.query))
                if api.login and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._reply(401, {"detail": "Not authenticated"})
                elif api.status != 200:
                    self._reply(api.status, {"detail": "down"})
                else:
                    self._reply(200, {"asset_events": api.events, "total_entries": len(api.events)})

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stored(self, name: str, **payload: Any) -> None:
        self.events.insert(0, {"name": name, "extra": {"from_trigger": True, "payload": payload}})


@pytest.fixture
def api(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    """The API behind connection ``airflow_api``, named by ``[smart_ext] watcher_api_conn_id``."""
    fake = FakeApi()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(f"AIRFLOW__SMART_EXT__{API_CONN_OPTION.upper()}", "airflow_api")

    async def aget_connection(conn_id: str, within: float | None = None) -> Any:
        assert conn_id == "airflow_api"
        return SimpleNamespace(conn_id=conn_id, host=fake.url, port=None, login=fake.login, password="secret")

    real_read = compat.asset_events.recent_asset_events

    async def recent_asset_events(connection: Any, asset: str, *, timeout: float) -> Any:
        with clock.busy():  # real I/O: virtual time stands still meanwhile
            return await real_read(connection, asset, timeout=timeout)

    monkeypatch.setattr(compat.connections, "aget_connection", aget_connection)
    monkeypatch.setattr(compat.asset_events, "recent_asset_events", recent_asset_events)
    yield fake
    fake.server.shutdown()
    fake.server.server_close()
    thread.join()


async def stopped_between_event_and_commit(clock: FakeClock, store: StateStore) -> Any:
    """d1 lands at 5 s, is reported at the check at 10 s; the triggerer stops at 12 s, in the commit sleep."""
    first = watcher(store)
    before = await collect(clock, first.run(), until=12)
    assert values(before) == [("d1", 1, None, False)]
    return first


async def test_a_stop_in_the_commit_sleep_commits_nothing(clock: FakeClock) -> None:
    # Airflow may drop an event it has not synced yet: only the restart can tell, so the intent stays.
    store = StateStore(ASSET)
    await stopped_between_event_and_commit(clock, store)
    (record,) = store.watermarks().values()
    assert record == UNCOMMITTED


SENT_AGAIN = [("d1", 1, None, True), ("d2", 2, "d1", False)]
NOT_SENT_AGAIN = [("d2", 2, "d1", False)]
# (case, what the API holds / how it answers, the login the API requires, the restarted watcher's events)
LOOKUPS: list[tuple[str, dict[str, Any], str | None, list[tuple[Any, ...]]]] = [
    ("stored: committed without sending", {"seq": 1, "value": "d1", "previous": None}, None, NOT_SENT_AGAIN),
    ("stored, read with a token", {"seq": 1, "value": "d1", "previous": None}, "watcher", NOT_SENT_AGAIN),
    ("not stored: sent again, flagged", {"seq": 0, "value": "d0", "previous": None}, None, SENT_AGAIN),
    (
        "another value under that seq: sent again",
        {"seq": 1, "value": "d9", "previous": None},
        None,
        SENT_AGAIN,
    ),
    ("the API is down: sent again", {"status": 503}, None, SENT_AGAIN),
]


@pytest.mark.parametrize(("held", "login", "after"), [c[1:] for c in LOOKUPS], ids=[c[0] for c in LOOKUPS])
async def test_the_restart_sends_again_only_what_airflow_does_not_hold(
    clock: FakeClock, api: FakeApi, held: dict[str, Any], login: str | None, after: list[tuple[Any, ...]]
) -> None:
    store = StateStore(ASSET)
    first = await stopped_between_event_and_commit(clock, store)
    if "status" in held:
        api.status = held["status"]
    else:
        api.stored(ASSET, **held, redelivered=False, observed_at=None)
    api.stored(f"{ASSET}_copy", seq=1, value="d1", previous=None)  # a prefix match of another asset
    api.login = login
    events = await collect(clock, rebuilt(first, store).run(), until=300)
    assert values(events) == after
    (record,) = store.watermarks().values()
    assert record == {"format": 1, "value": "d2", "seq": 2}
    assert api.queries[0] == {"name_prefix_pattern": [ASSET], "order_by": ["-timestamp"], "limit": ["100"]}


async def test_an_event_missing_on_one_watched_asset_is_sent_again(clock: FakeClock, api: FakeApi) -> None:
    store = StateStore(ASSET, "orders_copy")  # identical watchers of two assets: one trigger
    first = await stopped_between_event_and_commit(clock, store)
    api.stored(ASSET, seq=1, value="d1", previous=None)
    events = await collect(clock, rebuilt(first, store).run(), until=300)
    assert values(events) == SENT_AGAIN


async def test_without_a_connection_the_restart_sends_again_flagged(clock: FakeClock) -> None:
    store = StateStore(ASSET)
    first = await stopped_between_event_and_commit(clock, store)
    events = await collect(clock, rebuilt(first, store).run(), until=300)
    assert values(events) == SENT_AGAIN


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"payload": {"seq": 3, "value": "d3", "previous": "d2"}}, True),  # the previous release's: no name
        ({"payload": {"seq": 3, "value": "d3", "previous": "d2", "watcher": "orders"}}, True),
        ({"payload": {"seq": 3, "value": "d3", "previous": "d2", "watcher": "other"}}, False),  # another's
        ({"payload": {"seq": 3, "value": "d3", "previous": "d1"}}, False),
        ({"payload": {"seq": 4, "value": "d3", "previous": "d2"}}, False),
        ({"payload": "d3"}, False),
        (None, False),
    ],
)
def test_which_stored_event_is_the_report(extra: Any, expected: bool) -> None:
    assert is_this_event({"extra": extra}, Report("d3", 3, "d2"), "orders") is expected
