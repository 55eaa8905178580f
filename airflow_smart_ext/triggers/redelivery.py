"""Before a restarted watcher sends again the event it handed over but never committed (issue 34): does
Airflow hold it already?

A stop of the triggerer cannot commit it on the way out: Airflow 3.3 cancels a trigger only after it has
closed the trigger's channel to its supervisor (jobs/triggerer_job_runner.py ``TriggerRunner.arun``: the
comms reader is cancelled in its ``finally``, the triggers by ``asyncio.run`` after it), and a trigger is
not told that its event was stored (only 3.3's shared-stream producers are). So the restart asks: when every
watched asset already has an event with this ``seq``, ``value`` and ``previous``, the watcher commits it
without sending it. When that cannot be told (no ``[smart_ext] watcher_api_conn_id``, Airflow < 3.3, the API
down or refusing), it is sent again flagged ``redelivered``, as before: a duplicate is possible, a lost value
is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.triggers import log_lines
from airflow_smart_ext.triggers.watermark import Report

#: ``[smart_ext]`` option: the Airflow connection to the api-server a watcher reads asset events through.
API_CONN_OPTION = "watcher_api_conn_id"
#: How long the lookup may take (connection, token, one read per asset) before the event is sent again.
LOOKUP_TIMEOUT_SECONDS = 10.0


def is_this_event(event: Mapping[str, Any], report: Report, watcher: str) -> bool:
    """Whether a stored asset event (the REST API's shape) is ``watcher``'s ``report`` (another watcher of the
    asset may have sent the same seq and value; an event of the previous release names no watcher)."""
    extra = event.get("extra")
    payload = extra.get("payload") if isinstance(extra, Mapping) else None
    return (
        isinstance(payload, Mapping)
        and payload.get("watcher") in (None, watcher)
        and payload.get("seq") == report.seq
        and payload.get("value") == report.value
        and payload.get("previous") == report.previous
    )


async def stored_already(report: Report, watcher: str, assets: Sequence[str], log: Any) -> bool:
    """True when each of ``assets`` holds the event of ``report`` (then it must not be sent again); False
    when one does not, or when Airflow cannot be asked (then it is sent again, flagged)."""
    conn_id = runtime.config_text(API_CONN_OPTION).strip()
    if not (conn_id and assets and compat.asset_events.ASSET_EVENT_LOOKUP_SUPPORTED):
        return False
    try:
        connection = await compat.connections.aget_connection(conn_id, within=LOOKUP_TIMEOUT_SECONDS)
        missing = [
            asset
            for asset in assets
            if not any(
                is_this_event(event, report, watcher)
                for event in await compat.asset_events.recent_asset_events(
                    connection, asset, timeout=LOOKUP_TIMEOUT_SECONDS
                )
            )
        ]
    except Exception as err:  # any failure means "unknown": sending again loses nothing
        log_lines.emit(
            log,
            "warning",
            "could not read the asset events through connection %r (%s: %s): value #%d is sent again",
            conn_id,
            type(err).__name__,
            err,
            report.seq,
        )
        return False
    if missing:
        log_lines.emit(
            log, "info", "value #%d is not stored in %s: sent again", report.seq, ", ".join(missing)
        )
        return False
    log_lines.emit(
        log,
        "info",
        "value #%d: %r is stored already (the triggerer stopped before its commit): committed, not sent again",
        report.seq,
        report.value,
    )
    return True
