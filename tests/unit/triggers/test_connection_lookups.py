"""A connection lookup that fails in the triggerer: looked up again, bounded by the check time limit, told apart."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from tests.unit.clock import FakeClock
from tests.unit.triggers.helpers import first_event, sql_check
from tests.unit.triggers.helpers import make_trigger as trigger

pytestmark = pytest.mark.usefixtures("fault_sensor_state")


# --- a connection lookup that fails in the triggerer ------------------------------------------------------------

needs_supervisor = pytest.mark.skipif(
    not compat.versions.AIRFLOW_V_3_1_PLUS,
    reason="2.11 / 3.0 look connections up in a thread, not via a supervisor",
)


class FakeSupervisor:
    """``SUPERVISOR_COMMS`` of a 3.x triggerer: answers ``GetConnection`` with ``answer``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def asend(self, msg: Any) -> Any:
        self.asked.append(msg.conn_id)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def lookups_say_not_defined(monkeypatch: pytest.MonkeyPatch, times: int) -> list[float]:
    """Airflow's lookup answers "isn't defined" ``times`` times (what it answers when every secrets backend
    failed), then looks up as usual. Returns the times of the lookups; retry delays are cut to 10 ms."""
    monkeypatch.setattr(compat.connections, "CONNECTION_LOOKUP_RETRY_DELAYS", (0.01, 0.01, 0.01))
    hook = compat.locations.SensorBaseHook
    calls: list[float] = []

    def not_defined_at_first(conn_id: str) -> bool:
        calls.append(time.monotonic())
        return len(calls) <= times

    if compat.versions.AIRFLOW_V_3_1_PLUS:
        real_async = hook.aget_connection

        async def aget_connection(conn_id: str) -> Any:
            if not_defined_at_first(conn_id):
                raise compat.locations.AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
            return await real_async(conn_id)

        monkeypatch.setattr(hook, "aget_connection", aget_connection)
    else:
        real_sync = hook.get_connection

        def get_connection(conn_id: str) -> Any:
            if not_defined_at_first(conn_id):
                raise compat.locations.AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
            return real_sync(conn_id)

        monkeypatch.setattr(hook, "get_connection", get_connection)
    return calls


def with_supervisor(monkeypatch: pytest.MonkeyPatch, answer: Any) -> FakeSupervisor:
    from airflow.sdk.execution_time import task_runner

    supervisor = FakeSupervisor(answer)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
    return supervisor


def error_response(kind: str, detail: Any = None) -> Any:
    from airflow.sdk.execution_time.comms import ErrorResponse

    return ErrorResponse(error=kind, detail=detail)


def api_server_error() -> Any:
    """What the supervisor sends back when its API call raised (an error frame, raised by ``asend``)."""
    from airflow.sdk.exceptions import AirflowRuntimeError

    return AirflowRuntimeError(error_response("API_SERVER_ERROR", {"status_code": 500}))


async def test_a_connection_that_is_not_defined_for_a_moment_is_looked_up_again(
    monkeypatch: pytest.MonkeyPatch, sqlite_conn: str
) -> None:
    calls = lookups_say_not_defined(monkeypatch, 3)
    connection = await compat.connections.aget_connection("smart_ext_unit_sqlite")
    assert connection.conn_id == "smart_ext_unit_sqlite"
    assert len(calls) == 4  # three answers "not defined", then found: no failed check at all
    assert all(later - earlier >= 0.009 for earlier, later in zip(calls, calls[1:], strict=False))


async def test_a_connection_that_stays_not_defined_fails_saying_how_often_it_was_looked_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_smart_ext.errors import classify

    if compat.versions.AIRFLOW_V_3_1_PLUS:
        with_supervisor(monkeypatch, error_response("CONNECTION_NOT_FOUND", {"conn_id": "nope"}))
    calls = lookups_say_not_defined(monkeypatch, 1000)
    with pytest.raises(compat.locations.AirflowNotFoundException) as raised:
        await compat.connections.aget_connection("nope")
    assert len(calls) == 4
    assert "The conn_id `nope` isn't defined (looked up 4 times over 0.03s)" in str(raised.value)
    assert not classify(raised.value).transient


async def test_a_short_check_time_limit_keeps_the_lookups_within_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # check_timeout=5 s: only the 1-s re-ask fits in half of it, so the clear "not defined" comes in time.
    if compat.versions.AIRFLOW_V_3_1_PLUS:
        with_supervisor(monkeypatch, error_response("CONNECTION_NOT_FOUND", {"conn_id": "nope"}))
    calls = lookups_say_not_defined(monkeypatch, 1000)
    monkeypatch.setattr(compat.connections, "CONNECTION_LOOKUP_RETRY_DELAYS", (0.01, 0.02, 0.04))
    with pytest.raises(compat.locations.AirflowNotFoundException, match=r"looked up 2 times over 0.01s"):
        await compat.connections.aget_connection("nope", within=0.05)
    assert len(calls) == 2


async def test_the_check_time_limit_reaches_the_connection_lookup(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    async def aget_connection(conn_id: str, within: float | None = None) -> Any:
        seen.append(within)
        raise compat.locations.AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")

    monkeypatch.setattr(compat.connections, "aget_connection", aget_connection)
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(sql_check(conn_id="nope"), policy, share=False, check_timeout=7))
    assert payload["status"] == "error" and seen == [7.0], (payload, seen)


@needs_supervisor
@pytest.mark.parametrize(
    "answer, transient",
    [
        ("API_SERVER_ERROR", True),  # the supervisor's API call failed
        ("raises", True),  # the request itself failed
        ("found", True),  # the supervisor finds it now: the lookups just before had failed
        ("CONNECTION_NOT_FOUND", False),  # not defined
        pytest.param(
            "PERMISSION_DENIED",  # an authoritative deny
            False,
            marks=pytest.mark.skipif(
                not compat.versions.AIRFLOW_V_3_2_PLUS,
                reason="the Task SDK's PERMISSION_DENIED error type arrived in Airflow 3.2 (older supervisors "
                "cannot send it)",
            ),
        ),
    ],
)
async def test_the_supervisor_tells_a_failed_lookup_from_a_connection_that_is_not_defined(
    monkeypatch: pytest.MonkeyPatch, answer: str, transient: bool
) -> None:
    from airflow.sdk.exceptions import AirflowRuntimeError
    from airflow.sdk.execution_time.comms import ConnectionResult

    from airflow_smart_ext.errors import classify

    supervisor = with_supervisor(
        monkeypatch,
        {  # built on demand: each SDK version validates only the answers it knows
            "API_SERVER_ERROR": api_server_error,
            "raises": lambda: RuntimeError("Reader loop exited"),
            "found": lambda: ConnectionResult(
                conn_id="warehouse",
                conn_type="sqlite",
                host="/tmp/x.db",
                schema=None,
                login=None,
                password=None,
                port=None,
                extra=None,
            ),
            "CONNECTION_NOT_FOUND": lambda: error_response("CONNECTION_NOT_FOUND", {"conn_id": "warehouse"}),
            "PERMISSION_DENIED": lambda: AirflowRuntimeError(error_response("PERMISSION_DENIED")),
        }[answer](),
    )
    calls = lookups_say_not_defined(monkeypatch, 1000)
    with pytest.raises(Exception) as raised:
        await compat.connections.aget_connection("warehouse")
    assert len(calls) == 4 and supervisor.asked == ["warehouse"]
    assert classify(raised.value).transient is transient
    if transient:
        assert isinstance(raised.value, compat.connections.ConnectionLookupFailed)
        assert "Looking up connection 'warehouse' failed in the triggerer" in str(raised.value)
        assert isinstance(raised.value.__cause__, compat.locations.AirflowNotFoundException)
    else:
        assert isinstance(raised.value, compat.locations.AirflowNotFoundException)


@needs_supervisor
async def test_failed_connection_lookups_are_ridden_out_and_the_sql_wait_succeeds(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, sqlite_conn: str
) -> None:
    supervisor = with_supervisor(monkeypatch, api_server_error())
    calls = lookups_say_not_defined(monkeypatch, 5)
    with sqlite3.connect(sqlite_conn) as db:
        db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'ready')")
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(sql_check(), policy, share=False))
    # Check #1: four lookups fail and the supervisor reports an API error: "not yet". Check #2 finds it.
    assert payload["status"] == "success" and payload["check_index"] == 2, payload
    assert len(calls) == 6 and supervisor.asked == ["smart_ext_unit_sqlite"]


async def test_a_connection_that_is_not_defined_ends_the_wait_with_a_clear_error(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compat.versions.AIRFLOW_V_3_1_PLUS:
        with_supervisor(monkeypatch, error_response("CONNECTION_NOT_FOUND", {"conn_id": "nope"}))
    lookups_say_not_defined(monkeypatch, 1000)
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(trigger(sql_check(conn_id="nope"), policy, share=False))
    assert payload["status"] == "error" and payload["check_index"] == 1, payload
    assert "The conn_id `nope` isn't defined (looked up 4 times" in payload["message"]
