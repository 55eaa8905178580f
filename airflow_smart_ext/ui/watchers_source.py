"""The Waits view's watchers from the metadata DB (Airflow 3.x; 2.11 has no asset watchers): the glue that
reads what ``watchers_report`` shows. One query for the watchers, their assets and trigger rows' holders,
one for the assets' newest events, one for our watermarks in the asset state store (3.3+)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from airflow_smart_ext import compat, units
from airflow_smart_ext.ui.serving import Triggerer
from airflow_smart_ext.ui.trigger_rows import redact_sealed
from airflow_smart_ext.ui.watchers_report import AssetEvent, LiveWatcher
from airflow_smart_ext.wait_model import deferral_paths
from airflow_smart_ext.wait_model.watcher_state import STATE_KEY_PREFIX, state_store_key

__all__ = ["load_watchers"]


def _epoch(value: datetime.datetime | None) -> float | None:
    """Epoch seconds of Airflow's ``UtcDateTime`` (UTC; a naive value from some drivers is UTC too)."""
    return None if value is None else units.epoch(value)


def _decoded(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None


def _newest_events(session: Any, asset_ids: set[int]) -> dict[int, AssetEvent]:
    from airflow.models.asset import AssetEvent as AssetEventModel
    from sqlalchemy import func, select

    if not asset_ids:
        return {}
    newest = (
        select(func.max(AssetEventModel.id))
        .where(AssetEventModel.asset_id.in_(asset_ids))
        .group_by(AssetEventModel.asset_id)
    )
    rows = session.execute(
        select(AssetEventModel.asset_id, AssetEventModel.timestamp, AssetEventModel.extra).where(
            AssetEventModel.id.in_(newest)
        )
    )
    events = {}
    for row in rows:
        extra = _decoded(row.extra)
        payload = extra.get("payload") if isinstance(extra, dict) and extra.get("from_trigger") else None
        events[row.asset_id] = AssetEvent(
            units.iso_of(row.timestamp) or "", payload if isinstance(payload, dict) else None
        )
    return events


def load_watchers(session: Any) -> list[LiveWatcher]:
    """Every asset watcher whose trigger is one of our condition watchers ([] before Airflow 3.0)."""
    if not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED:
        return []
    from airflow.jobs.job import Job
    from airflow.models.asset import AssetModel
    from airflow.models.trigger import Trigger
    from sqlalchemy import literal, select

    placement = compat.trigger_placement.trigger_placement_columns()
    link, name = compat.asset_watchers.asset_watcher_links()
    rows = session.execute(
        select(
            (literal(None) if name is None else name).label("name"),
            AssetModel.id.label("asset_id"),
            AssetModel.name.label("asset"),
            AssetModel.uri,
            Trigger.id.label("trigger_id"),
            Trigger.encrypted_kwargs,
            Trigger.triggerer_id,
            Job.id.label("holder_job"),
            Job.hostname,
            Job.latest_heartbeat,
            Job.end_date,
            *(column.label(f"trigger_{name}") for name, column in placement.items()),
        )
        .select_from(link)
        .join(AssetModel, AssetModel.id == link.c.asset_id)
        .join(Trigger, Trigger.id == link.c.trigger_id)
        .outerjoin(Job, Job.id == Trigger.triggerer_id)
        .where(Trigger.classpath == deferral_paths.CONDITION_WATCHER)
    ).all()
    asset_ids = {row.asset_id for row in rows}
    states = compat.asset_watchers.asset_state_records(session, asset_ids, f"{STATE_KEY_PREFIX}:")
    events = _newest_events(session, asset_ids)
    watchers = []
    for row in rows:
        try:
            kwargs = {
                name: compat.asset_watchers.decode_watcher_kwarg(value)
                for name, value in Trigger._decrypt_kwargs(row.encrypted_kwargs).items()
            }
            key = state_store_key(
                kwargs["check"],
                kwargs.get("value_key"),
                kwargs.get("state_key"),
                bool(kwargs.get("every_value")),
            )
        except Exception:  # e.g. Fernet's InvalidToken (a rotated key): this row shows as unreadable
            kwargs, key = {}, ""
        shown = {
            name: compat.locations.redact_secrets(redact_sealed(value), name)
            for name, value in kwargs.items()
        }
        holder = (
            None
            if row.holder_job is None
            else Triggerer(
                row.holder_job, row.hostname, _epoch(row.latest_heartbeat), row.end_date is not None
            )
        )
        state = states.get(row.asset_id, {})
        watchers.append(
            LiveWatcher(
                asset=row.asset,
                asset_uri=row.uri,
                name=row.name,
                trigger_id=row.trigger_id,
                shown_kwargs=shown,
                state_key=key,
                state={key: _decoded(value) for key, (value, _) in state.items()},
                state_updated_at={key: units.iso_of(updated) or "" for key, (_, updated) in state.items()},
                last_event=events.get(row.asset_id),
                triggerer_id=row.triggerer_id,
                holder=holder,
                trigger_queue=getattr(row, "trigger_queue", None),
                trigger_team=getattr(row, "trigger_team", None),
                outcome_recorded=compat.asset_watchers.ASSET_STATE_STORE_SUPPORTED,
            )
        )
    return watchers
