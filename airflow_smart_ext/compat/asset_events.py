"""Reading a watched asset's stored events from inside a trigger (issue 34): what a restarted watcher asks before
it re-sends an event it handed over but never committed.

A 3.x trigger runs in a process without database access (sdk/execution_time/supervisor.py ``block_orm_access``)
and its supervisor channel answers no asset-event read (3.3.2 jobs/triggerer_job_runner.py ``ToTriggerSupervisor``:
connections, variables, XComs, run/TI counts, HITL and the asset state store; the Task SDK's
``GetAssetEventByAsset`` is a worker's message). What is left is the api-server's public REST API
(``GET /api/v2/assets/events``), with the credentials of an Airflow connection.

3.3+ only: the prefix search below is 3.3's, and before 3.3 no watcher keeps a watermark (no asset state store),
so none has an uncommitted event to ask about. 2.11 has no asset watchers.
"""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS

__all__ = ["ASSET_EVENT_LOOKUP_SUPPORTED", "ASSET_EVENTS_READ", "recent_asset_events"]

ASSET_EVENT_LOOKUP_SUPPORTED = AIRFLOW_V_3_3_PLUS
#: How many of an asset's newest events are read: the uncommitted event is the watcher's newest, so only other
#: producers of the asset writing this many events since could push it out (then it is re-sent, flagged).
ASSET_EVENTS_READ = 100


def _base_url(connection: Any) -> str:
    """The api-server's base URL: the connection's host (``http://api-server:8080``), its port if given apart."""
    host = str(connection.host or "").rstrip("/")
    if not host:
        raise ValueError(f"connection {connection.conn_id!r} has no host (the api-server's base URL)")
    if "://" not in host:
        host = f"http://{host}"
    return f"{host}:{connection.port}" if connection.port else host


async def recent_asset_events(connection: Any, asset: str, *, timeout: float) -> list[dict[str, Any]]:
    """The newest events of the asset named ``asset`` (each as the REST API returns it, ``extra`` included),
    read from the api-server ``connection`` points at: as ``connection.login`` (a token from ``/auth/token``,
    the simple and FAB auth managers' endpoint), or without a token when it has no login. Raises when the
    API cannot answer (the caller then cannot know whether the event is stored)."""
    if not ASSET_EVENT_LOOKUP_SUPPORTED:
        raise RuntimeError("reading asset events from a trigger needs Airflow >= 3.3")
    import httpx

    async with httpx.AsyncClient(base_url=_base_url(connection), timeout=timeout) as client:
        headers = {}
        if connection.login:
            token = await client.post(
                "/auth/token", json={"username": connection.login, "password": connection.password or ""}
            )
            token.raise_for_status()
            headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        response = await client.get(
            "/api/v2/assets/events",
            params={"name_prefix_pattern": asset, "order_by": "-timestamp", "limit": ASSET_EVENTS_READ},
            headers=headers,
        )
        response.raise_for_status()
        # a prefix search: other assets whose names start with this one come too
        return [event for event in response.json()["asset_events"] if event.get("name") == asset]
