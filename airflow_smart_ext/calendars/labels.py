"""Words for days: weekday names and ordinals, as the labels and explanations of every calendar write them."""

from __future__ import annotations

from collections.abc import Iterable

WEEKDAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def weekday_names(days: Iterable[int]) -> str:
    return "/".join(WEEKDAY_NAMES[d] for d in sorted(days))


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 11 -> '11th'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
