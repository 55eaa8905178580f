"""Your own lists of days (``extra_holidays`` / ``extra_business_days``): parsing them, naming the parameter."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any


def parse_dates(name: str, values: Iterable[Any] | None) -> frozenset[datetime.date]:
    """``extra_holidays`` / ``extra_business_days``: dates or ISO ``YYYY-MM-DD`` strings."""
    if values is None:
        return frozenset()
    if isinstance(values, (str, bytes, datetime.date)):
        raise ValueError(
            f"{name}: expected a list of dates (datetime.date or 'YYYY-MM-DD' strings), got {values!r}."
        )
    parsed = set()
    try:
        items = list(values)
    except TypeError:
        raise ValueError(
            f"{name}: expected a list of dates (datetime.date or 'YYYY-MM-DD' strings), got {values!r}."
        ) from None
    for value in items:
        if isinstance(value, datetime.datetime):
            raise ValueError(f"{name}: {value!r} is a datetime; pass a date (datetime.date or 'YYYY-MM-DD').")
        if isinstance(value, datetime.date):
            parsed.add(value)
        elif isinstance(value, str):
            try:
                parsed.add(datetime.date.fromisoformat(value))
            except ValueError:
                raise ValueError(
                    f"{name}: {value!r} is not an ISO date; accepted: 'YYYY-MM-DD' strings or datetime.date."
                ) from None
        else:
            raise ValueError(
                f"{name}: {value!r} is not a date; accepted: 'YYYY-MM-DD' strings or datetime.date."
            )
    return frozenset(parsed)
