"""Which watcher values a consumer has not processed yet, free of Airflow (the glue: ``consumers.py``).

A condition watcher numbers its values (``seq`` 1, 2, ... per watcher, kept across triggerer restarts in
Airflow 3.3's asset state store) and may hand one value to Airflow twice: the same ``seq``, the second copy
marked ``redelivered`` (docs/watchers.md, "Restarts and versions"). So ``(watcher, seq)`` names a value: a
consumer processes each such pair once, in ``seq`` order, whatever events of the asset it reads.

* :class:`ConsumerState`: the pairs processed so far, per watcher the highest ``seq`` below which all are
  done (``through``) and the ones done above it (after a gap); JSON, a few bytes.
* :func:`unprocessed`: the values of a list of asset events not processed yet, each once, in ``seq`` order
  per watcher: duplicates (a redelivered copy, or the same pair read twice) dropped, a gap skipped over (the
  missing ``seq`` is processed when its event shows up), events that no watcher wrote ignored;
* :func:`conflicts`: pairs that came with two different values (not a redelivery), for the caller to report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

STATE_FORMAT = 1


class ConsumerStateError(ValueError):
    """A stored consumer state that is not ours (edited by hand, or another format)."""


@dataclass(frozen=True)
class NewValue:
    """One value a watcher reported and this consumer has not processed yet."""

    value: Any
    seq: int
    previous: Any
    watcher: str  # the payload's ``watcher`` (the watcher's name); "" when the payload names none
    event_id: int  # the asset event it came in (the first one, when Airflow holds copies)
    observed_at: str | None = None
    redelivered: bool = False  # the event read was a re-sent copy (its first copy never reached Airflow)


@dataclass(frozen=True)
class _Done:
    through: int = 0  # every seq <= through is processed
    above: frozenset[int] = field(default_factory=frozenset)  # processed seqs > through (a gap below them)

    def has(self, seq: int) -> bool:
        return seq <= self.through or seq in self.above

    def add(self, seq: int) -> _Done:
        if self.has(seq):
            return self
        through, above = self.through, set(self.above) | {seq}
        while through + 1 in above:  # a filled gap folds into the contiguous prefix
            through += 1
            above.discard(through)
        return _Done(through, frozenset(above))


@dataclass(frozen=True)
class ConsumerState:
    """The ``(watcher, seq)`` pairs a consumer has processed."""

    watchers: Mapping[str, _Done] = field(default_factory=dict)

    def processed(self, watcher: str, seq: int) -> bool:
        return self.watchers.get(watcher, _Done()).has(seq)

    def marked(self, value: NewValue) -> ConsumerState:
        """The state once ``value`` is processed."""
        done = dict(self.watchers)
        done[value.watcher] = done.get(value.watcher, _Done()).add(value.seq)
        return ConsumerState(done)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": STATE_FORMAT,
                "watchers": {
                    name: {"through": done.through, "above": sorted(done.above)}
                    for name, done in sorted(self.watchers.items())
                },
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> ConsumerState:
        """The stored state; an empty one for None (nothing processed yet)."""
        if text is None:
            return cls()
        try:
            record = json.loads(text)
            if record["format"] != STATE_FORMAT:
                raise ValueError(f"format {record['format']!r}, expected {STATE_FORMAT}")
            watchers = {
                str(name): _Done(_seq(done["through"], zero=True), frozenset(map(_seq, done["above"])))
                for name, done in record["watchers"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ConsumerStateError(f"not a consumer state ({err}): {text[:200]!r}") from None
        return cls(watchers)


def _seq(value: Any, zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        raise ValueError(f"seq {value!r}")
    return value


def watcher_value(event_id: int, extra: Any) -> NewValue | None:
    """The watcher value an asset event carries (``extra["payload"]``), None for an event no watcher wrote."""
    payload = extra.get("payload") if isinstance(extra, Mapping) else None
    if not isinstance(payload, Mapping):
        return None
    seq = payload.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 or "value" not in payload:
        return None
    watcher = payload.get("watcher")
    return NewValue(
        value=payload["value"],
        seq=seq,
        previous=payload.get("previous"),
        watcher=watcher if isinstance(watcher, str) else "",
        event_id=event_id,
        observed_at=payload.get("observed_at"),
        redelivered=payload.get("redelivered") is True,
    )


def conflicts(events: Iterable[tuple[int, Any]]) -> list[tuple[str, int, list[int]]]:
    """The ``(watcher, seq)`` pairs that carry different values in different events, with those events' ids:
    two watchers of one asset whose payloads do not name them, or two triggerers reporting one ``seq``
    during a failover. Only the first stored of them is processed."""
    seen: dict[tuple[str, int], list[NewValue]] = {}
    for event_id, extra in sorted(events, key=lambda event: event[0]):
        value = watcher_value(event_id, extra)
        if value is not None:
            seen.setdefault((value.watcher, value.seq), []).append(value)
    return [
        (watcher, seq, [value.event_id for value in values])
        for (watcher, seq), values in sorted(seen.items())
        if any(value.value != values[0].value for value in values)
    ]


def unprocessed(events: Iterable[tuple[int, Any]], state: ConsumerState) -> list[NewValue]:
    """The values of ``events`` (``(asset event id, extra)`` pairs, any order) that ``state`` has not
    processed, each ``(watcher, seq)`` once, in ``seq`` order per watcher (watchers in name order).

    Of two events with one ``(watcher, seq)`` the first stored is kept (a redelivered copy was sent only
    because its first copy's fate was unknown; both carry the same value). A redelivered copy naming its
    watcher whose first copy, from the release before events named their watcher, named none is that copy.
    """
    first: dict[tuple[str, int], NewValue] = {}
    unnamed: dict[int, Any] = {}  # seq -> value of events that name no watcher (the previous release's)
    for event_id, extra in sorted(events, key=lambda event: event[0]):
        value = watcher_value(event_id, extra)
        if value is None or state.processed(value.watcher, value.seq):
            continue
        if value.watcher == "":
            unnamed.setdefault(value.seq, value.value)
        elif value.redelivered and (
            state.processed("", value.seq) or (value.seq in unnamed and unnamed[value.seq] == value.value)
        ):
            continue  # sent again after an upgrade: its first copy (stored before it) named no watcher
        first.setdefault((value.watcher, value.seq), value)
    return [first[key] for key in sorted(first)]
