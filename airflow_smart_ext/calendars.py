"""Day calendars for the timetables: which local calendar days are scheduled.

Pure date logic (``datetime.date`` only): no Airflow, no time zones. The timetables turn the days chosen
here into aware instants at the edges.

* :class:`EveryDay` — every calendar day.
* :class:`BusinessCalendar` — weekdays that are not holidays. Holidays come from the ``holidays`` library
  (country + optional subdivision, and/or a financial market such as ``"NYSE"``), plus explicit
  ``extra_holidays``; ``extra_business_days`` override both; the weekend is configurable.
* :class:`MonthlyBusinessDay` — the nth (``n >= 1``) or nth-from-last (``n <= -1``) business day of each
  month of a :class:`BusinessCalendar`.

``holidays`` costs ~70 ms to import, and the scheduler imports the timetables on every parse loop, so it is
imported lazily inside the functions that need it. Holiday dates are cached per (calendar source, year) as
frozensets; a ``holidays`` object is never shared (they mutate while expanding years).

Every search for the next/previous scheduled day is bounded (:data:`MAX_SEARCH_DAYS`); a calendar with no
business day in that range raises :class:`CalendarSearchError` instead of looping.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

MAX_SEARCH_DAYS = 366 * 2
"""Longest run of consecutive non-business days a calendar may contain."""

WEEKDAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_WEEKDAY_ALIASES = {
    **{name.lower(): i for i, name in enumerate(WEEKDAY_NAMES)},
    **{
        name: i
        for i, name in enumerate(
            ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
        )
    },
}
DEFAULT_WEEKEND = (5, 6)
MAX_NTH = 23
"""Largest ``abs(n)`` for :class:`MonthlyBusinessDay` (a month has at most 23 Mon-Fri days)."""

_ONE_DAY = datetime.timedelta(days=1)


class CalendarSearchError(ValueError):
    """No scheduled day was found within the bounded search range."""


class DayCalendar(Protocol):
    """What the timetable engine needs from a calendar: the set of scheduled local days."""

    def contains(self, day: datetime.date) -> bool: ...

    def next_on_or_after(self, day: datetime.date) -> datetime.date: ...

    def prev_on_or_before(self, day: datetime.date) -> datetime.date: ...

    def to_dict(self) -> dict[str, Any]: ...

    def label(self) -> str: ...


# --- holidays library access (lazy) --------------------------------------------------------------------


def _holidays_module() -> Any:
    import holidays  # noqa: PLC0415 - ~70 ms import, kept off the plugin import path on purpose

    return holidays


def _make_holidays(
    *,
    country: str | None,
    subdivision: str | None,
    market: str | None,
    categories: tuple[str, ...] | None,
    year: Any,
) -> list[Any]:
    """Fresh ``holidays`` objects (never shared: they mutate while expanding years)."""
    lib = _holidays_module()
    cats = list(categories) if categories else None
    made = []
    if country is not None:
        made.append(lib.country_holidays(country, subdiv=subdivision, years=year, categories=cats))
    if market is not None:
        made.append(lib.financial_holidays(market, years=year, categories=cats))
    return made


@functools.lru_cache(maxsize=1024)
def holiday_dates(
    country: str | None,
    subdivision: str | None,
    market: str | None,
    categories: tuple[str, ...] | None,
    year: int,
) -> frozenset[datetime.date]:
    """The holiday dates of one year for a (country, subdivision, market, categories) source, cached."""
    dates: set[datetime.date] = set()
    for source in _make_holidays(
        country=country, subdivision=subdivision, market=market, categories=categories, year=year
    ):
        dates.update(day for day in source if day.year == year)
    return frozenset(dates)


def _validate_holiday_source(
    country: str | None, subdivision: str | None, market: str | None, categories: tuple[str, ...] | None
) -> None:
    """Raise ValueError naming the parameter and how to list accepted codes when a code is unknown."""
    lib = _holidays_module()
    if country is not None:
        try:
            lib.country_holidays(country, years=[])
        except NotImplementedError:
            codes = ", ".join(sorted(c for c in lib.list_supported_countries() if len(c) == 2))
            raise ValueError(
                f"country: unknown country code {country!r}. Accepted: the ISO 3166-1 alpha-2 codes supported "
                f"by the `holidays` library ({codes}); full list with subdivisions: "
                "`python -c 'import holidays; print(holidays.list_supported_countries())'`."
            ) from None
        if subdivision is not None:
            try:
                lib.country_holidays(country, subdiv=subdivision, years=[])
            except NotImplementedError:
                subdivisions = lib.list_supported_countries().get(country, [])
                raise ValueError(
                    f"subdivision: unknown subdivision {subdivision!r} of country {country!r}. Accepted: "
                    f"{', '.join(subdivisions) or '(none: this country has no subdivisions)'}."
                ) from None
    if market is not None:
        try:
            lib.financial_holidays(market, years=[])
        except NotImplementedError:
            markets = ", ".join(sorted(lib.list_supported_financial()))
            raise ValueError(
                f"market: unknown financial market {market!r}. Accepted (holidays library): {markets}. List: "
                "`python -c 'import holidays; print(holidays.list_supported_financial())'`."
            ) from None
    if categories is not None:
        try:
            _make_holidays(
                country=country, subdivision=subdivision, market=market, categories=categories, year=[]
            )
        except ValueError as err:
            raise ValueError(
                f"categories: {err}. Accepted categories are listed by the `holidays` library as "
                "`<class>.supported_categories`, e.g. `holidays.US.supported_categories`."
            ) from None


# --- parsing helpers ---------------------------------------------------------------------------------


def _parse_dates(name: str, values: Iterable[Any] | None) -> frozenset[datetime.date]:
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


def _parse_weekend(values: Iterable[Any]) -> tuple[int, ...]:
    accepted = "weekday numbers 0-6 (Mon=0 ... Sun=6) or names 'Mon'..'Sun'"
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"weekend: expected a collection of {accepted}, got {values!r}.")
    days = set()
    for value in values:
        if isinstance(value, bool):
            raise ValueError(f"weekend: {value!r} is not a weekday; accepted: {accepted}.")
        if isinstance(value, int) and 0 <= value <= 6:
            days.add(value)
        elif isinstance(value, str) and value.lower() in _WEEKDAY_ALIASES:
            days.add(_WEEKDAY_ALIASES[value.lower()])
        else:
            raise ValueError(f"weekend: {value!r} is not a weekday; accepted: {accepted}.")
    if len(days) == 7:
        raise ValueError(
            "weekend: all seven weekdays are weekend days, so there is no business day; leave at least one out."
        )
    return tuple(sorted(days))


def _parse_categories(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = (value,) if isinstance(value, str) else value
    try:
        cats = tuple(sorted({str(c) for c in items}))
    except TypeError:
        raise ValueError(f"categories: expected a list of category names, got {value!r}.") from None
    if not cats:
        raise ValueError("categories: empty list; pass None for the library default or e.g. ('public',).")
    return cats


def _optional_code(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}: expected a non-empty code string or None, got {value!r}.")
    return value.strip()


# --- calendars ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EveryDay:
    """Every local calendar day is scheduled."""

    def contains(self, day: datetime.date) -> bool:
        return True

    def next_on_or_after(self, day: datetime.date) -> datetime.date:
        return day

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        return day

    def to_dict(self) -> dict[str, Any]:
        return {"type": "every_day"}

    def label(self) -> str:
        return "daily"


class BusinessCalendar:
    """Business days: weekdays outside ``weekend`` that are not holidays.

    :param country: ``holidays`` country code (e.g. ``"US"``, ``"DE"``); None for no country holidays.
    :param subdivision: subdivision code of ``country`` (e.g. ``"NY"``, ``"BY"``).
    :param market: ``holidays`` financial market code (e.g. ``"NYSE"``, ``"XLON"``, ``"ECB"``).
    :param categories: ``holidays`` categories (e.g. ``("public", "bank")``); None = the library default.
    :param extra_holidays: extra non-business days (dates or ``YYYY-MM-DD`` strings).
    :param extra_business_days: days that are business days whatever the weekend/holidays say.
    :param weekend: weekend weekdays, numbers 0-6 (Mon=0) or names; default Saturday and Sunday.

    With neither ``country`` nor ``market`` only the weekend and the explicit lists apply. Country and
    market holidays combine (a day off in either is not a business day). Immutable and hashable.
    """

    __slots__ = (
        "_by_year",
        "categories",
        "country",
        "extra_business_days",
        "extra_holidays",
        "market",
        "subdivision",
        "weekend",
    )

    country: str | None
    subdivision: str | None
    market: str | None
    categories: tuple[str, ...] | None
    extra_holidays: frozenset[datetime.date]
    extra_business_days: frozenset[datetime.date]
    weekend: tuple[int, ...]
    _by_year: dict[int, frozenset[datetime.date]]

    def __init__(
        self,
        *,
        country: str | None = None,
        subdivision: str | None = None,
        market: str | None = None,
        categories: str | Iterable[str] | None = None,
        extra_holidays: Iterable[datetime.date | str] | None = None,
        extra_business_days: Iterable[datetime.date | str] | None = None,
        weekend: Iterable[int | str] = DEFAULT_WEEKEND,
    ) -> None:
        set_ = object.__setattr__  # immutable after construction
        set_(self, "country", _optional_code("country", country))
        set_(self, "subdivision", _optional_code("subdivision", subdivision))
        set_(self, "market", _optional_code("market", market))
        set_(self, "categories", _parse_categories(categories))
        set_(self, "extra_holidays", _parse_dates("extra_holidays", extra_holidays))
        set_(self, "extra_business_days", _parse_dates("extra_business_days", extra_business_days))
        both = self.extra_holidays & self.extra_business_days
        if both:
            raise ValueError(
                "extra_holidays / extra_business_days: these dates are in both lists: "
                + ", ".join(sorted(d.isoformat() for d in both))
            )
        set_(self, "weekend", _parse_weekend(weekend))
        # year -> frozenset of holiday dates: a per-instance front of the module-level LRU (plain dict get
        # is the cheapest lookup; values are immutable, so concurrent fills are harmless)
        set_(self, "_by_year", {})
        if self.subdivision is not None and self.country is None:
            raise ValueError("subdivision: needs `country` (e.g. country='US', subdivision='NY').")
        if self.categories is not None and self.country is None and self.market is None:
            raise ValueError("categories: needs `country` or `market` (categories select their holidays).")
        if self.country is not None or self.market is not None:
            _validate_holiday_source(self.country, self.subdivision, self.market, self.categories)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("BusinessCalendar is immutable")

    def _key(self) -> tuple[Any, ...]:
        return (
            self.country,
            self.subdivision,
            self.market,
            self.categories,
            self.extra_holidays,
            self.extra_business_days,
            self.weekend,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BusinessCalendar) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        args = ", ".join(
            f"{k}={v!r}" for k, v in self.to_dict().items() if k != "type" and v not in (None, [])
        )
        return f"BusinessCalendar({args})"

    # The hot path: one weekday test, one cached frozenset lookup, two small set lookups.
    def contains(self, day: datetime.date) -> bool:
        if day in self.extra_business_days:
            return True
        if day.weekday() in self.weekend or day in self.extra_holidays:
            return False
        if self.country is None and self.market is None:
            return True
        return day not in holiday_dates(
            self.country, self.subdivision, self.market, self.categories, day.year
        )

    def next_on_or_after(self, day: datetime.date) -> datetime.date:
        for _ in range(MAX_SEARCH_DAYS):
            if self.contains(day):
                return day
            day += _ONE_DAY
        raise CalendarSearchError(
            f"{self.label()}: no business day within {MAX_SEARCH_DAYS} days before {day.isoformat()}."
        )

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        for _ in range(MAX_SEARCH_DAYS):
            if self.contains(day):
                return day
            day -= _ONE_DAY
        raise CalendarSearchError(
            f"{self.label()}: no business day within {MAX_SEARCH_DAYS} days after {day.isoformat()}."
        )

    def holidays_in(self, year: int) -> frozenset[datetime.date]:
        """Library holidays of ``year`` (without weekend and extra lists) — for docs and tests."""
        if self.country is None and self.market is None:
            return frozenset()
        return holiday_dates(self.country, self.subdivision, self.market, self.categories, year)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "business",
            "country": self.country,
            "subdivision": self.subdivision,
            "market": self.market,
            "categories": list(self.categories) if self.categories is not None else None,
            "extra_holidays": sorted(d.isoformat() for d in self.extra_holidays),
            "extra_business_days": sorted(d.isoformat() for d in self.extra_business_days),
            "weekend": list(self.weekend),
        }

    def label(self) -> str:
        source = " ".join(
            part
            for part in (
                self.market,
                self.country and "-".join(filter(None, (self.country, self.subdivision))),
            )
            if part
        )
        extra = "+custom" if self.extra_holidays or self.extra_business_days else ""
        weekend = (
            ""
            if self.weekend == DEFAULT_WEEKEND
            else " (weekend " + "/".join(WEEKDAY_NAMES[d] for d in self.weekend) + ")"
        )
        return f"{source + ' ' if source else ''}business days{extra and ' ' + extra}{weekend}"


@functools.lru_cache(maxsize=4096)  # calendars are frozen and hashable; a month is scanned once
def _scheduled_in_month(calendar: BusinessCalendar, n: int, year: int, month: int) -> datetime.date | None:
    first = datetime.date(year, month, 1)
    last = (first + datetime.timedelta(days=32)).replace(day=1) - _ONE_DAY
    step, day, stop = (_ONE_DAY, first, last) if n > 0 else (-_ONE_DAY, last, first)
    found: datetime.date | None = None
    count = 0
    while True:
        if calendar.contains(day):
            found, count = day, count + 1
            if count == abs(n):
                return found
        if day == stop:
            return found  # fewer than abs(n) business days: clamp to the last one found
        day += step


@dataclass(frozen=True)
class MonthlyBusinessDay:
    """The ``n``-th business day of each month (``n >= 1``), or the ``-n``-th from last (``n <= -1``).

    A month with fewer than ``abs(n)`` business days uses its last (``n > 0``) or first (``n < 0``)
    business day, so every month with a business day has exactly one scheduled day.
    """

    calendar: BusinessCalendar
    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.calendar, BusinessCalendar):
            raise ValueError(f"calendar: expected a BusinessCalendar, got {self.calendar!r}.")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n == 0 or abs(self.n) > MAX_NTH:
            raise ValueError(
                f"n: expected a non-zero integer between -{MAX_NTH} and {MAX_NTH} "
                f"(1 = first business day, -1 = last business day), got {self.n!r}."
            )

    def in_month(self, year: int, month: int) -> datetime.date | None:
        """The scheduled day of the month, or None when the month has no business day at all."""
        return _scheduled_in_month(self.calendar, self.n, year, month)

    def contains(self, day: datetime.date) -> bool:
        return self.in_month(day.year, day.month) == day

    def next_on_or_after(self, day: datetime.date) -> datetime.date:
        year, month = day.year, day.month
        for _ in range(MAX_SEARCH_DAYS // 28):
            chosen = self.in_month(year, month)
            if chosen is not None and chosen >= day:
                return chosen
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        raise CalendarSearchError(
            f"{self.label()}: no scheduled day within {MAX_SEARCH_DAYS // 28} months after {day}."
        )

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        year, month = day.year, day.month
        for _ in range(MAX_SEARCH_DAYS // 28):
            chosen = self.in_month(year, month)
            if chosen is not None and chosen <= day:
                return chosen
            year, month = (year - 1, 12) if month == 1 else (year, month - 1)
        raise CalendarSearchError(
            f"{self.label()}: no scheduled day within {MAX_SEARCH_DAYS // 28} months before {day}."
        )

    def to_dict(self) -> dict[str, Any]:
        return {"type": "monthly", "n": self.n, "calendar": self.calendar.to_dict()}

    def label(self) -> str:
        base = self.calendar.label().replace("business days", "business day")
        if self.n == -1:
            return f"last {base} of the month"
        if self.n < 0:
            return f"{_ordinal(-self.n)}-to-last {base} of the month"
        return f"{_ordinal(self.n)} {base} of the month"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def business_calendar_from_dict(data: Mapping[str, Any]) -> BusinessCalendar:
    return BusinessCalendar(
        country=data.get("country"),
        subdivision=data.get("subdivision"),
        market=data.get("market"),
        categories=data.get("categories"),
        extra_holidays=data.get("extra_holidays", ()),
        extra_business_days=data.get("extra_business_days", ()),
        weekend=data.get("weekend", DEFAULT_WEEKEND),
    )


def calendar_from_dict(data: Mapping[str, Any]) -> EveryDay | BusinessCalendar | MonthlyBusinessDay:
    """Inverse of ``to_dict`` for every calendar type."""
    kind = data.get("type")
    if kind == "every_day":
        return EveryDay()
    if kind == "business":
        return business_calendar_from_dict(data)
    if kind == "monthly":
        return MonthlyBusinessDay(business_calendar_from_dict(data["calendar"]), int(data["n"]))
    raise ValueError(
        f"calendar: unknown calendar type {kind!r}; accepted: 'every_day', 'business', 'monthly'."
    )
