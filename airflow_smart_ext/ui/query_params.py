"""The numeric URL parameters of every view (Waits and Calendars), read by one pair of parsers.

Pure: ``float()`` and ``int()`` also take "٣٠", "５", "1_000", "1e3" and "inf", so each view would refuse
different characters; these take ASCII digits only, and few, so a bad value is a 400 naming the parameter.
"""

from __future__ import annotations

import re


class InvalidQuery(ValueError):
    """A bad query parameter; the message names the parameter and its accepted values."""


def whole_number(text: str) -> bool:
    """ASCII digits only, and few (``"²".isdigit()`` is true; ``int()`` refuses it and very long strings)."""
    return text.isascii() and text.isdigit() and len(text) <= 9


_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?")


def decimal_number(text: str) -> float | None:
    """ASCII digits with an optional decimal point, and few; None otherwise. Every numeric parameter of the
    views is read by this or :func:`whole_number`, so each refuses the same characters."""
    return float(text) if _DECIMAL.fullmatch(text) else None


def bounded_whole(name: str, text: str, low: int, high: int) -> int:
    """``text`` as a whole number from ``low`` to ``high``, else :class:`InvalidQuery` naming ``name``."""
    if not whole_number(text) or not low <= int(text) <= high:
        raise InvalidQuery(
            f"{name} must be a whole number from {low} to {high} in ASCII digits; got {text!r}"
        )
    return int(text)
