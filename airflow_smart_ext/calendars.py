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
) -> list[tuple[str, Any]]:
    """Fresh ``holidays`` objects (never shared: they mutate while expanding years), each with the name of
    the calendar it comes from (e.g. ``"country 'DE' (subdivision 'BY')"``, ``"market 'NYSE'"``)."""
    lib = _holidays_module()
    cats = list(categories) if categories else None
    made = []
    if country is not None:
        made.append(
            (
                _source_name(country, subdivision, None),
                lib.country_holidays(country, subdiv=subdivision, years=year, categories=cats),
            )
        )
    if market is not None:
        made.append(
            (_source_name(None, None, market), lib.financial_holidays(market, years=year, categories=cats))
        )
    return made


def _source_name(country: str | None, subdivision: str | None, market: str | None) -> str:
    if market is not None:
        return f"market {market!r}"
    return f"country {country!r}" + (f" (subdivision {subdivision!r})" if subdivision else "")


class HolidayYearOutOfRange(ValueError):
    """The ``holidays`` library has no data for the requested year of a calendar (it would silently return
    no holidays, turning every weekday into a business day)."""


@functools.lru_cache(maxsize=256)
def supported_years(
    country: str | None, subdivision: str | None, market: str | None, categories: tuple[str, ...] | None
) -> tuple[tuple[str, int, int], ...]:
    """``(calendar name, first year, last year)`` per holiday source, from the library's own
    ``start_year`` / ``end_year`` attributes."""
    return tuple(
        (name, int(source.start_year), int(source.end_year))
        for name, source in _make_holidays(
            country=country, subdivision=subdivision, market=market, categories=categories, year=[]
        )
    )


def check_year_supported(
    country: str | None,
    subdivision: str | None,
    market: str | None,
    categories: tuple[str, ...] | None,
    year: int,
) -> None:
    """Raise :class:`HolidayYearOutOfRange` naming the calendar, the year and the supported range."""
    for name, first, last in supported_years(country, subdivision, market, categories):
        if not first <= year <= last:
            parameter = "market" if name.startswith("market") else "country"
            raise HolidayYearOutOfRange(
                f"{parameter}: the `holidays` library ({_holidays_module().__version__}) has no holiday data "
                f"for {name} in {year}; it supports {first}-{last} only. Outside that range the calendar "
                "would have no holidays at all, so it is refused: keep the DAG's runs within those years "
                "(start_date / end_date), or drop this calendar source."
            )


@functools.lru_cache(maxsize=1024)
def holiday_dates(
    country: str | None,
    subdivision: str | None,
    market: str | None,
    categories: tuple[str, ...] | None,
    year: int,
) -> frozenset[datetime.date]:
    """The holiday dates of one year for a (country, subdivision, market, categories) source, cached.

    Raises :class:`HolidayYearOutOfRange` for a year the library does not cover (never an empty set)."""
    check_year_supported(country, subdivision, market, categories, year)
    dates: set[datetime.date] = set()
    for _name, source in _make_holidays(
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
        for name, source in _make_holidays(
            country=country, subdivision=subdivision, market=market, categories=None, year=[]
        ):
            accepted = tuple(sorted(source.supported_categories))
            unknown = sorted(set(categories) - set(accepted))
            if unknown:
                raise ValueError(
                    f"categories: {', '.join(map(repr, unknown))} not supported by {name}; accepted: "
                    f"{', '.join(map(repr, accepted))} (None = the library default, usually 'public')."
                )


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
            # a calendar whose library data does not cover today fails now (DAG parse), not in the scheduler
            check_year_supported(
                self.country, self.subdivision, self.market, self.categories, datetime.date.today().year
            )
        self._check_closed_runs()

    def _check_closed_runs(self) -> None:
        """Reject a calendar with a run of >= MAX_SEARCH_DAYS consecutive non-business days: every search
        for the next/previous business day would fail there, at scheduling time instead of at DAG parse.

        Exact for the weekend + ``extra_holidays`` (minus ``extra_business_days``); library holidays are
        added at the edges of runs that are already long (cheap: few such runs can exist).
        """
        if not self.extra_holidays:
            return  # the weekend alone closes at most 6 days in a row
        run_first = run_last = None
        longest = (0, datetime.date.min, datetime.date.min)
        for day in [*sorted(self.extra_holidays), None]:
            if run_last is not None and day is not None and self._weekend_between(run_last, day):
                run_last = day
                continue
            if run_first is not None and run_last is not None:
                first, last = self._extend_closed(run_first, run_last)
                length = (last - first).days + 1
                if length > longest[0]:
                    longest = (length, first, last)
            run_first = run_last = day
        length, first, last = longest
        if length >= MAX_SEARCH_DAYS:
            raise ValueError(
                f"extra_holidays: {first.isoformat()} .. {last.isoformat()} are {length} consecutive "
                f"non-business days (with the weekend{' and library holidays' if self._has_library() else ''}); "
                f"the timetables search at most {MAX_SEARCH_DAYS} days for a business day, so at most "
                f"{MAX_SEARCH_DAYS - 1} consecutive days off are accepted. Shorten the list or add "
                "extra_business_days inside that range."
            )

    def _has_library(self) -> bool:
        return self.country is not None or self.market is not None

    def _weekend_off(self, day: datetime.date) -> bool:
        return day.weekday() in self.weekend and day not in self.extra_business_days

    def _weekend_between(self, first: datetime.date, last: datetime.date) -> bool:
        """True when every day strictly between ``first`` and ``last`` is a weekend day off."""
        gap = (last - first).days - 1
        if gap > 6:
            return False  # some weekday of that week is not a weekend day
        return all(self._weekend_off(first + datetime.timedelta(days=i)) for i in range(1, gap + 1))

    def _extend_closed(
        self, first: datetime.date, last: datetime.date
    ) -> tuple[datetime.date, datetime.date]:
        """Grow a run of extra holidays by the adjacent weekend days (and, for long runs, library holidays)."""
        long_run = self._has_library() and (last - first).days + 1 >= MAX_SEARCH_DAYS // 2
        off = self._closed_or_unknown if long_run else self._weekend_off
        for _ in range(MAX_SEARCH_DAYS):
            if first <= datetime.date.min + _ONE_DAY or not off(first - _ONE_DAY):
                break
            first -= _ONE_DAY
        for _ in range(MAX_SEARCH_DAYS):
            if last >= datetime.date.max - _ONE_DAY or not off(last + _ONE_DAY):
                break
            last += _ONE_DAY
        return first, last

    def _closed_or_unknown(self, day: datetime.date) -> bool:
        """Not a business day; a year without library data counts as open (it fails loudly on its own)."""
        try:
            return not self.contains(day)
        except HolidayYearOutOfRange:
            return day in self.extra_holidays or self._weekend_off(day)

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
        start = day
        for _ in range(MAX_SEARCH_DAYS):
            if self.contains(day):
                return day
            day += _ONE_DAY
        raise CalendarSearchError(
            f"{self.label()}: no business day within the {MAX_SEARCH_DAYS} days on or after {start.isoformat()}."
        )

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        start = day
        for _ in range(MAX_SEARCH_DAYS):
            if self.contains(day):
                return day
            day -= _ONE_DAY
        raise CalendarSearchError(
            f"{self.label()}: no business day within the {MAX_SEARCH_DAYS} days on or before {start.isoformat()}."
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


BUSINESS_CALENDAR_KEYS = (
    "type",
    "country",
    "subdivision",
    "market",
    "categories",
    "extra_holidays",
    "extra_business_days",
    "weekend",
)
_MONTHLY_KEYS = ("type", "n", "calendar")
CALENDAR_TYPES = ("every_day", "business", "monthly")


def _check_keys(data: Mapping[str, Any], accepted: tuple[str, ...], what: str) -> None:
    unknown = sorted(str(k) for k in data if k not in accepted)
    if unknown:
        raise ValueError(
            f"calendar: unknown key(s) {', '.join(map(repr, unknown))} in the {what} dict; accepted keys: "
            f"{', '.join(map(repr, accepted))}."
        )


def business_calendar_from_dict(data: Mapping[str, Any]) -> BusinessCalendar:
    """A :class:`BusinessCalendar` from its ``to_dict()`` form (``type`` may be omitted). Unknown keys and a
    ``type`` other than ``"business"`` are rejected (a typo must not silently drop a holiday source)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"calendar: expected a dict in BusinessCalendar.to_dict() form, got {data!r}.")
    _check_keys(data, BUSINESS_CALENDAR_KEYS, "business calendar")
    kind = data.get("type", "business")
    if kind != "business":
        raise ValueError(
            f"calendar: type {kind!r} is not a business-day calendar; accepted: 'business' (or omit 'type')."
        )
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
    """Inverse of ``to_dict`` for every calendar type (unknown keys and types are rejected)."""
    kind = data.get("type")
    if kind == "every_day":
        _check_keys(data, ("type",), "every_day calendar")
        return EveryDay()
    if kind == "business":
        return business_calendar_from_dict(data)
    if kind == "monthly":
        _check_keys(data, _MONTHLY_KEYS, "monthly calendar")
        return MonthlyBusinessDay(business_calendar_from_dict(data["calendar"]), int(data["n"]))
    raise ValueError(
        f"calendar: unknown calendar type {kind!r}; accepted: {', '.join(map(repr, CALENDAR_TYPES))}."
    )
