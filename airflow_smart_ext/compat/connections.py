"""Looking a connection up from inside a trigger: through the triggerer supervisor (3.1+; 3.0: its request sent
on the event loop), or the sync ORM/secrets lookup in a thread (2.11)."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat import locations
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_1_PLUS

__all__ = ["CONNECTION_LOOKUP_RETRY_DELAYS", "ConnectionLookupFailed", "aget_connection"]

# Seconds between the lookups of a connection that "isn't defined": every secrets backend's failure (a metadata-
# database hiccup included) reads as "not defined" in Airflow's lookup, so a short hiccup must not fail a wait.
CONNECTION_LOOKUP_RETRY_DELAYS = (1.0, 2.0, 4.0)


async def aget_connection(conn_id: str, within: float | None = None) -> Any:
    """Fetch a Connection from inside a trigger without blocking the event loop.

    3.1+: through the triggerer supervisor (``BaseHook.aget_connection``; 3.x triggers have no ORM access).
    3.0: the secrets backends in a worker thread, then the supervisor's answer on the loop
    (:func:`_aget_connection_3_0`).
    2.11: the sync ORM/secrets lookup, in a worker thread.

    Airflow answers "isn't defined" whenever every secrets backend failed, a database error included, so that
    answer is asked again after ``CONNECTION_LOOKUP_RETRY_DELAYS`` (those that fit in half of ``within``, the
    check's time limit, so a short limit still ends in this clear error); it stays permanent (the message
    says how often it was asked) unless, on 3.1+, the supervisor then reports a failure rather than "not
    found" (``ConnectionLookupFailed``, transient).
    """
    import asyncio

    hook = locations.SensorBaseHook
    not_found_type = locations.AirflowNotFoundException
    delays: list[float] = []
    for delay in CONNECTION_LOOKUP_RETRY_DELAYS:
        if within is not None and sum(delays) + delay >= within / 2:
            break
        delays.append(delay)
    for pause in (*delays, None):
        try:
            if AIRFLOW_V_3_1_PLUS:
                return await hook.aget_connection(conn_id)
            if AIRFLOW_V_3_0_PLUS:
                return await _aget_connection_3_0(conn_id)
            return await asyncio.to_thread(hook.get_connection, conn_id)
        except not_found_type as exc:
            not_found = exc
        if pause is not None:
            await asyncio.sleep(pause)
    if AIRFLOW_V_3_1_PLUS:
        await _raise_if_lookup_failed(conn_id, not_found)
    raise not_found_type(
        f"{not_found} (looked up {len(delays) + 1} times over {sum(delays):g}s)"
    ) from not_found


async def _aget_connection_3_0(conn_id: str) -> Any:
    """3.0: the SDK's lookup (secrets backends, then the supervisor), with the supervisor's request on the loop.

    3.0's sync lookup sends through ``SUPERVISOR_COMMS.send``, ``async_to_sync(asend)``: called from a worker
    thread it runs in an event loop of its own on the runner's socket, beside the runner's loop; the channel's
    ``asyncio.Lock`` orders neither against the other, so two requests in flight read each other's replies and
    the trigger runner dies ("Response read out of order! Got frame.id=2, expect_id=3"; the triggerer exits,
    every trigger with it: apache/airflow#64620). ``asend`` on the loop takes that lock like the runner's own
    requests. The backends (environment variables; a configured backend may block) still run in a thread.
    """
    import asyncio

    from airflow.sdk.execution_time import task_runner

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:  # not in a triggerer's runner (no supervisor channel): the sync SDK call, as before
        return await asyncio.to_thread(locations.SensorBaseHook.get_connection, conn_id)
    from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse, GetConnection
    from airflow.sdk.execution_time.context import (  # type: ignore[attr-defined,unused-ignore] # 3.0's name
        _convert_connection_result_conn,
    )
    from airflow.sdk.execution_time.supervisor import ensure_secrets_backend_loaded
    from airflow.sdk.log import mask_secret

    def from_backends() -> Any:
        for backend in ensure_secrets_backend_loaded():
            try:
                found = backend.get_connection(conn_id=conn_id)
            except Exception:  # as the SDK: a failing backend, then the next one
                continue
            if found:
                return found
        return None

    connection = await asyncio.to_thread(from_backends)
    if connection is None:
        try:
            answer = await comms.asend(GetConnection(conn_id=conn_id))
        except AirflowRuntimeError as exc:  # an error frame
            answer = exc.error
        if isinstance(answer, ErrorResponse):
            if answer.error == ErrorType.CONNECTION_NOT_FOUND:
                raise locations.AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
            raise AirflowRuntimeError(answer)
        connection = _convert_connection_result_conn(answer)
    for secret in (connection.password, connection.extra):
        if secret:
            mask_secret(secret)
    return connection


class ConnectionLookupFailed(ConnectionError):
    """The triggerer could not look a connection up (its supervisor or the API failed): transient, unlike a
    connection that is not defined."""


async def _raise_if_lookup_failed(conn_id: str, not_found: BaseException) -> None:
    """3.1+: tell "not found" from "the lookup failed" once ``aget_connection`` keeps saying "isn't defined".

    The SDK turns every failed lookup through the supervisor (an API error, a broken request) into
    ``AirflowNotFoundException`` (``ExecutionAPISecretsBackend.aget_connection`` returns None on any error).
    One direct request to the supervisor says which it was: ``CONNECTION_NOT_FOUND`` or ``PERMISSION_DENIED``
    (or no way to ask) returns and the caller raises "not defined"; any other answer (an error, or the
    connection itself) raises ``ConnectionLookupFailed``, which a check rides out as a transient error.
    """
    try:
        from airflow.sdk.exceptions import AirflowRuntimeError
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import ErrorResponse, GetConnection
    except ImportError:  # an SDK layout we do not know: keep the SDK's answer
        return
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        return
    try:
        answer: Any = await comms.asend(GetConnection(conn_id=conn_id))
    except AirflowRuntimeError as exc:  # the supervisor answered with an error frame
        answer = exc.error
    except Exception as exc:
        answer = exc
    if isinstance(answer, ErrorResponse):
        # PERMISSION_DENIED: an authoritative deny (3.3+); the SDK raises it itself, but never ride it out.
        if answer.error.value in ("CONNECTION_NOT_FOUND", "PERMISSION_DENIED"):
            return
        detail = f"{answer.error.value}: {answer.detail}"
    elif isinstance(answer, Exception):
        detail = repr(answer)
    else:
        detail = "it is defined; the lookup just before failed"
    raise ConnectionLookupFailed(
        f"Looking up connection {conn_id!r} failed in the triggerer ({detail}); it is looked up again at the "
        f"next check"
    ) from not_found
