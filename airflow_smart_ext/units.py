"""Units, in one place: seconds, durations as text, and a moment as epoch seconds, an aware UTC datetime or
ISO 8601 text.

One precision wherever the package writes a moment (log lines, trigger events, the views' JSON and pages, the
last-check records): ISO 8601 in UTC, to the millisecond. A naive datetime is UTC (Airflow's database columns).
Pure and the lowest floor: it imports nothing of the package, so every module may use it, compat included.
``tests/unit/test_layout.py`` keeps ``fromtimestamp``, ``.timestamp()`` and ``total_seconds()`` here.
"""

from __future__ import annotations

import datetime
from typing import overload

UTC = datetime.timezone.utc


def seconds(value: float | datetime.timedelta) -> float:
    """A duration given as seconds or as a ``timedelta``, in seconds."""
    return value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)


def epoch(moment: datetime.datetime) -> float:
    """Epoch seconds of a moment (naive: UTC)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def utc(epoch_seconds: float) -> datetime.datetime:
    """The aware UTC datetime of epoch seconds."""
    return datetime.datetime.fromtimestamp(epoch_seconds, tz=UTC)


@overload
def iso(epoch_seconds: float) -> str: ...
@overload
def iso(epoch_seconds: None) -> None: ...
@overload
def iso(epoch_seconds: float | None) -> str | None: ...
def iso(epoch_seconds: float | None) -> str | None:
    """How the package writes a moment: ISO 8601, UTC, milliseconds (None stays None)."""
    return None if epoch_seconds is None else utc(epoch_seconds).isoformat(timespec="milliseconds")


def iso_of(moment: datetime.datetime | None) -> str | None:
    """:func:`iso` of a datetime (naive: UTC)."""
    return None if moment is None else iso(epoch(moment))


def duration_text(value: float) -> str:
    """A configured duration, exactly: ``90`` -> ``90s``, ``600`` -> ``10m``, ``86400`` -> ``1d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value:g}s"


def relative_text(value: float | None) -> str:
    """How far a moment is from now, for a reader: ``in 1h 2m``, ``3s ago`` ("" when unknown)."""
    if value is None:
        return ""
    whole = abs(round(value))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h"] if hours else []
    parts += [f"{minutes}m"] if minutes else []
    parts += [f"{secs}s"] if secs or not parts else []
    return f"in {' '.join(parts)}" if value >= 0 else f"{' '.join(parts)} ago"
