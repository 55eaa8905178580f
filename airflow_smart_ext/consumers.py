"""Consumers of condition watchers: every value not processed yet, in ``seq`` order, each once (Airflow >= 3.3).

::

    from airflow.sdk import DAG, task
    from airflow_smart_ext.consumers import every_new_value

    with DAG("orders_report", schedule=[orders_daily], max_active_runs=1):

        @task(inlets=[orders_daily])
        def report():
            for new in every_new_value(orders_daily):
                load_day(new.value)  # marked processed once this body returns and the loop asks for more

A run reads *all* the asset's events (``inlet_events``, not only the ones that triggered it: Airflow can
leave a value out of a queued run), skips the ``(watcher, seq)`` pairs already processed and redelivered
copies, and marks each value processed, in an Airflow Variable, after the loop body for it returned. A body
that raises (or a ``break``) leaves its value unmarked: the next run processes it again. See docs/watchers.md,
"Consumers".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.consumer_state import ConsumerState, NewValue, conflicts, unprocessed

__all__ = ["NewValue", "every_new_value", "state_variable_key"]

log = logging.getLogger(__name__)

#: The prefix of a consumer's Variable: ``<prefix>:<consumer>:<asset name>``.
VARIABLE_PREFIX = "airflow_smart_ext.consumer"


def state_variable_key(consumer: str, asset_name: str) -> str:
    """The Variable that holds what ``consumer`` processed of ``asset_name`` (delete it to process all again)."""
    return f"{VARIABLE_PREFIX}:{consumer}:{asset_name}"


def every_new_value(asset: Any, *, consumer: str | None = None) -> Iterator[NewValue]:
    """The asset's watcher values this consumer has not processed, in ``seq`` order, each once; call it in a
    task that has ``asset`` in its ``inlets``.

    Each value is marked processed when the loop asks for the next one (or ends), i.e. after the body for it
    returned. ``consumer`` names the record (default ``<dag_id>.<task_id>``): two tasks processing the same
    values each need their own.
    """
    compat.consumers.require_consumers("every_new_value")
    context = compat.consumers.current_task_context()
    if consumer is None:
        ti = context["ti"]
        consumer = f"{ti.dag_id}.{ti.task_id}"
    try:
        events = context["inlet_events"][asset]
    except KeyError:
        raise ValueError(
            f"every_new_value({asset!r}): the task must list the asset in its inlets (@task(inlets=[asset])) "
            "to read its events"
        ) from None
    read = [(event.id, event.extra) for event in events]
    for watcher, seq, event_ids in conflicts(read):
        log.warning(
            "asset %s: events %s carry different values for watcher %r seq %d; only the first is processed "
            "(several watchers of one asset whose events do not name them: give each watcher its own asset)",
            asset.name,
            event_ids,
            watcher,
            seq,
        )
    key = state_variable_key(consumer, asset.name)
    state = ConsumerState.from_json(compat.consumers.read_variable(key))
    for new in unprocessed(read, state):
        yield new
        # Reached only when the caller asks for the next value: the body for this one returned.
        state = state.marked(new)
        compat.consumers.write_variable(key, state.to_json())
