"""Condition watchers (issue 27): asset watchers (3.0+; 2.11 has none), their state store and shared streams
(both 3.3+).

* 3.0+: ``Asset(watchers=[AssetWatcher(name, trigger)])`` with a ``BaseEventTrigger`` (airflow.triggers.base,
  ``compat.locations.EventTriggerBase``); 2.11 has neither: a watcher fails at DAG parse
  (``require_asset_watchers``).
* 3.3+: the triggerer injects ``asset_state_store`` (AIP-103, ``AssetStateStoreAccessors`` of the watched
  assets: jobs/triggerer_job_runner.py ``create_triggers``) and runs triggers with a ``shared_stream_key``
  through one shared poll (triggers/shared_stream.py). 3.0-3.2: neither (the watermark lives in memory).
"""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import (
    AIRFLOW_V_3_0_PLUS,
    AIRFLOW_V_3_2_PLUS,
    AIRFLOW_V_3_3_PLUS,
    AIRFLOW_VERSION_STRING,
)

__all__ = [
    "ASSET_STATE_STORE_SUPPORTED",
    "ASSET_WATCHERS_MIN_AIRFLOW",
    "ASSET_WATCHERS_SUPPORTED",
    "AssetWatchersUnsupported",
    "SHARED_STREAMS_SUPPORTED",
    "asset_state_accessors",
    "asset_state_store_problem",
    "asset_state_records",
    "asset_watcher_links",
    "decode_watcher_kwarg",
    "watched_assets",
    "require_asset_watchers",
]

ASSET_WATCHERS_MIN_AIRFLOW = "3.0.0"
ASSET_WATCHERS_SUPPORTED = AIRFLOW_V_3_0_PLUS
ASSET_STATE_STORE_SUPPORTED = AIRFLOW_V_3_3_PLUS
SHARED_STREAMS_SUPPORTED = AIRFLOW_V_3_3_PLUS


class AssetWatchersUnsupported(ImportError, RuntimeError):
    """A condition watcher was used on an Airflow without asset watchers (before 3.0): raised when one is
    built, and by ``from airflow_smart_ext.watchers import ConditionWatcher`` (an import error there)."""


# 3.2 (before the fix in 3.3, apache/airflow#65973): the dag-processor wraps a dict-valued watcher kwarg (and
# a datetime, ...) with BaseSerialization's Encoding enum keys, and serde stores those keys with ``str()``: on
# Python 3.11+ "Encoding.TYPE" / "Encoding.VAR", not "__type" / "__var". The triggerer then hands the wrapper
# to the trigger as it is (its clean-up looks for "__type" only), and so does ``Trigger._decrypt_kwargs``.
_STRINGIFIED_MARKERS = {"Encoding.TYPE": "__type", "Encoding.VAR": "__var"}


def decode_watcher_kwarg(value: Any) -> Any:
    """A watcher trigger's kwarg as its DAG file gave it, also when 3.2 stored it BaseSerialization-wrapped with
    stringified markers (above); any other value unchanged."""
    if not (isinstance(value, dict) and ("Encoding.TYPE" in value or "__type" in value)):
        return value
    from airflow.serialization.serialized_objects import BaseSerialization

    return BaseSerialization.deserialize(_restore_markers(value))


def _restore_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {_STRINGIFIED_MARKERS.get(key, key): _restore_markers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_restore_markers(item) for item in value]
    return value


def asset_state_store_problem(what: str, alternative: str) -> str | None:
    """Why ``what`` cannot run on this Airflow (None: it can): it keeps its state in the asset state store
    (3.3+)."""
    if ASSET_STATE_STORE_SUPPORTED:
        return None
    return (
        f"{what} needs Airflow >= 3.3 (the asset state store keeps its state across restarts); this is Airflow "
        f"{AIRFLOW_VERSION_STRING}. {alternative}"
    )


def require_asset_watchers(what: str) -> None:
    """Raise :class:`AssetWatchersUnsupported` (at DAG parse) unless this Airflow has asset watchers."""
    if ASSET_WATCHERS_SUPPORTED:
        return
    raise AssetWatchersUnsupported(
        f"{what} needs Airflow >= {ASSET_WATCHERS_MIN_AIRFLOW} (event-driven scheduling: "
        f"Asset(watchers=[AssetWatcher(...)])); this is Airflow {AIRFLOW_VERSION_STRING}. On this version "
        "wait for the condition with a deferrable sensor instead: BackoffSqlSensor(..., deferrable=True), or "
        "your BackoffSensor subclass with deferrable=True, at the start of the DAG that needs the data."
    )


def asset_state_accessors(trigger: Any) -> list[Any]:
    """The asset state store accessors of every asset ``trigger`` watches (3.3+; [] before, or when the
    triggerer injected none: ``dag.test()``, no watched asset).

    Airflow runs one trigger for identical watchers of several assets and injects one
    ``AssetStateStoreAccessors`` for all of them; it has no public way to list them (sdk/execution_time/
    context.py ``AssetStateStoreAccessors.__init__`` keeps them in ``_by_name`` / ``_by_uri``), so they are read
    there, falling back to the object itself (its single-asset ``aget`` / ``aset``).
    """
    store = getattr(trigger, "asset_state_store", None) if ASSET_STATE_STORE_SUPPORTED else None
    if store is None:
        return []
    by_name = getattr(store, "_by_name", None)
    by_uri = getattr(store, "_by_uri", None)
    if isinstance(by_name, dict) and isinstance(by_uri, dict):
        return [*by_name.values(), *by_uri.values()]
    return [store]


def watched_assets(trigger: Any) -> list[str]:
    """The names (or URIs) of the assets ``trigger`` watches, as the 3.3+ triggerer injects them with the
    state store ([] before 3.3: Airflow tells a trigger nothing about its assets)."""
    store = getattr(trigger, "asset_state_store", None) if ASSET_STATE_STORE_SUPPORTED else None
    names = [*(getattr(store, "_by_name", None) or ()), *(getattr(store, "_by_uri", None) or ())]
    return sorted(str(name) for name in names)


def asset_state_records(session: Any, asset_ids: Any, prefix: str) -> dict[int, dict[str, tuple[str, Any]]]:
    """3.3+: the asset state store rows of ``asset_ids`` whose key starts with ``prefix``, as asset id -> key ->
    (stored JSON text, updated_at). {} before 3.3 (no store)."""
    if not ASSET_STATE_STORE_SUPPORTED or not asset_ids:
        return {}
    from airflow.models.asset_state_store import AssetStateStoreModel
    from sqlalchemy import select

    rows = session.execute(
        select(
            AssetStateStoreModel.asset_id,
            AssetStateStoreModel.key,
            AssetStateStoreModel.value,
            AssetStateStoreModel.updated_at,
        ).where(
            AssetStateStoreModel.asset_id.in_(list(asset_ids)), AssetStateStoreModel.key.startswith(prefix)
        )
    )
    found: dict[int, dict[str, tuple[str, Any]]] = {}
    for row in rows:
        found.setdefault(row.asset_id, {})[row.key] = (row.value, row.updated_at)
    return found


def asset_watcher_links() -> tuple[Any, Any]:
    """What links an asset to its watchers' trigger rows: (the table, its column of the ``AssetWatcher``'s name,
    or None). 3.2+: ``asset_watcher`` (asset_id, trigger_id, name); 3.0-3.1: ``asset_trigger`` (asset_id,
    trigger_id: the watcher's name is not kept)."""
    if AIRFLOW_V_3_2_PLUS:
        from airflow.models.asset import AssetWatcherModel

        table = AssetWatcherModel.__table__
        return table, table.c.name
    from airflow.models import asset

    return asset.asset_trigger_association_table, None  # type: ignore[attr-defined,unused-ignore]
