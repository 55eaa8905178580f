"""Looking a connection up from inside a trigger: through the triggerer supervisor (3.1+), the sync SDK call
in a thread (3.0), or the sync ORM/secrets lookup in a thread (2.11)."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat import locations
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_1_PLUS

__all__ = ["CONNECTION_LOOKUP_RETRY_DELAYS", "ConnectionLookupFailed", "aget_connection"]

# Seconds between the lookups of a connection that "isn't defined": every secrets backend's failure (a metadata-
# database hiccup included) reads as "not defined" in Airflow's lookup, so a short hiccup must not fail a wait.
CONNECTION_LOOKUP_RETRY_DELAYS = (1.0, 2.0, 4.0)


async def aget_connection(conn_id: str, within: float | None = None) -> Any:
    """Fetch a Connection from inside a trigger without blocking the event loop.

    3.1+: through the triggerer supervisor (``BaseHook.aget_connection``; 3.x triggers have no ORM access).
    3.0: the sync SDK call, in a worker thread (on the loop it raises an AsyncToSync error).
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
