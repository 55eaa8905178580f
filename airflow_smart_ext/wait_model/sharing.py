"""How identical waits share one check: the seed every wait on one condition draws its jitter from, and how
much earlier than due a subscriber may be served by a check made for another (the coalescing window).
Asked by the sensor, both triggers, the condition watcher and the Waits view."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_smart_ext.backoff import condition_seed
from airflow_smart_ext.conditions.runtime import config_non_negative_float
from airflow_smart_ext.conditions.spec import sharing_key

DEFAULT_SHARING_WINDOW_SECONDS = 5.0
DEFAULT_SHARING_WINDOW_FRACTION = 0.1


def wait_seed(check: Mapping[str, Any]) -> str:
    """The jitter seed of a wait on ``check``: one per condition, so identical waits check together."""
    return condition_seed(sharing_key(check))


def sharing_window_config() -> tuple[float, float]:
    """``([smart_ext] sharing_window_seconds, [smart_ext] sharing_window_fraction)``, validated."""
    return (
        config_non_negative_float("sharing_window_seconds", DEFAULT_SHARING_WINDOW_SECONDS),
        config_non_negative_float("sharing_window_fraction", DEFAULT_SHARING_WINDOW_FRACTION),
    )


def coalescing_window(interval: float, config: tuple[float, float] | None = None) -> float:
    """How much earlier than due a subscriber may be served by a shared check.

    ``min([smart_ext] sharing_window_seconds, [smart_ext] sharing_window_fraction * interval)``, where
    ``interval`` is the gap to this subscriber's previous scheduled check. ``config`` is
    :func:`sharing_window_config` (read once per trigger run, not on every check).
    """
    seconds, fraction = config if config is not None else sharing_window_config()
    return max(0.0, min(seconds, fraction * max(0.0, interval)))
