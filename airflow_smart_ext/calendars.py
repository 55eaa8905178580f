"""Day calendars for the timetables: which local calendar days are scheduled, and why the others are not.

Pure date logic (``datetime.date`` only): no Airflow, no time zones. The timetables turn the days chosen
here into aware instants at the edges.

* :class:`EveryDay` — every calendar day.
* :class:`BusinessCalendar` — the working days of a ``holidays`` library calendar (country + optional
  subdivision, and/or a financial market such as ``"NYSE"``) as the library models them: each calendar's
  own weekend, per date (Israel rests Fri/Sat; the UAE moved its weekend in 2022), its holidays and its
  make-up working days (China's, Russia's, Vietnam's and Taiwan's working Saturdays and Sundays). Explicit
  ``weekend``, ``extra_holidays`` and ``extra_business_days`` override (see :class:`BusinessCalendar`).
* :class:`CombinedCalendar` — calendar algebra: the days all calendars are open (``a & b``), any is open
  (``a | b``), or the first is open and the second closed (``a - b``).
* :class:`MonthlyBusinessDay` — the nth (``n >= 1``) or nth-from-last (``n <= -1``) business day of each
  month of a business-day calendar.

``holidays`` costs ~70 ms to import, and the scheduler imports the timetables on every parse loop, so it is
imported lazily inside the functions that need it. The library's model is read in blocks of years into
immutable per-year sets (cached); a ``holidays`` object is never shared (they mutate while expanding years).
A business-day calendar answers ``contains`` with one frozenset lookup, whatever it combines.

Every search for the next/previous scheduled day is bounded (:data:`MAX_SEARCH_DAYS`); a calendar with no
business day in that range raises :class:`CalendarSearchError` instead of looping.
"""

from __future__ import annotations

import datetime
import functools
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypedDict

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
"""The weekend of a calendar without a library source (and the one summaries do not mention)."""
MAX_NTH = 23
"""Largest ``abs(n)`` for :class:`MonthlyBusinessDay` (a month has at most 23 Mon-Fri days)."""
_BLOCK_YEARS = 8  # library years read at once (+1 on each side for make-up days moved across New Year)

_ONE_DAY = datetime.timedelta(days=1)


class CalendarKeywords(TypedDict, total=False):
    """THE definition of the business-calendar keywords, shared by :class:`BusinessCalendar` and every
    timetable that accepts a calendar (``**keywords: Unpack[CalendarKeywords]``): add an option here once."""

    country: str | None
    subdivision: str | None
    market: str | None
    categories: str | Iterable[str] | None
    extra_holidays: Iterable[datetime.date | str] | None
    extra_business_days: Iterable[datetime.date | str] | None
    weekend: Iterable[int | str] | None


CALENDAR_KEYWORDS: tuple[str, ...] = tuple(CalendarKeywords.__annotations__)


class CalendarSearchError(ValueError):
    """No scheduled day was found within the bounded search range."""


class DayCalendar(Protocol):
    """What the timetable engine needs from a calendar: the set of scheduled local days."""

    def contains(self, day: datetime.date) -> bool: ...

    def next_on_or_after(self, day: datetime.date) -> datetime.date: ...

    def prev_on_or_before(self, day: datetime.date) -> datetime.date: ...

    def explain(self, day: datetime.date) -> str | None: ...

    def to_dict(self) -> dict[str, Any]: ...

    def label(self) -> str: ...


# --- holidays library access (lazy) --------------------------------------------------------------------


def _holidays_module() -> Any:
    import holidays  # noqa: PLC0415 - ~70 ms import, kept off the plugin import path on purpose

    return holidays


class Source(NamedTuple):
    """One ``holidays`` library calendar: a country (+ subdivision) or a financial market."""

    country: str | None
    subdivision: str | None
    market: str | None
    categories: tuple[str, ...] | None

    @property
    def name(self) -> str:
        if self.market is not None:
            return f"market {self.market!r}"
        return f"country {self.country!r}" + (
            f" (subdivision {self.subdivision!r})" if self.subdivision else ""
        )

    @property
    def code(self) -> str:
        return self.market or "-".join(filter(None, (self.country, self.subdivision)))

    def make(self, years: Any) -> Any:
        """A fresh ``holidays`` object (never shared: they mutate while expanding years)."""
        lib = _holidays_module()
        cats = list(self.categories) if self.categories else None
        if self.market is not None:
            return lib.financial_holidays(self.market, years=years, categories=cats)
        return lib.country_holidays(self.country, subdiv=self.subdivision, years=years, categories=cats)


def _sources(
    country: str | None, subdivision: str | None, market: str | None, categories: tuple[str, ...] | None
) -> tuple[Source, ...]:
    found = []
    if country is not None:
        found.append(Source(country, subdivision, None, categories))
    if market is not None:
        found.append(Source(None, None, market, categories))
    return tuple(found)


class HolidayYearOutOfRange(ValueError):
    """The ``holidays`` library has no data for the requested year of a calendar (it would silently return
    no holidays, turning every weekday into a business day)."""


@functools.lru_cache(maxsize=256)
def source_years(source: Source) -> tuple[int, int]:
    """(first, last) year the library has data for, from its own ``start_year`` / ``end_year``."""
    made = source.make([])
    return int(made.start_year), int(made.end_year)


def _check_source_year(source: Source, year: int) -> None:
    first, last = source_years(source)
    if not first <= year <= last:
        parameter = "market" if source.market is not None else "country"
        raise HolidayYearOutOfRange(
            f"{parameter}: the `holidays` library ({_holidays_module().__version__}) has no holiday data "
            f"for {source.name} in {year}; it supports {first}-{last} only. Outside that range the calendar "
            "would have no holidays at all, so it is refused: keep the DAG's runs within those years "
            "(start_date / end_date), or drop this calendar source."
        )


@functools.lru_cache(maxsize=256)
def year_days(year: int, weekdays: frozenset[int] | None = None) -> frozenset[datetime.date]:
    """Every date of ``year`` (or only those on ``weekdays``), cached."""
    first = datetime.date(year, 1, 1).toordinal()
    stop = datetime.date(year + 1, 1, 1).toordinal()
    if weekdays is None:
        return frozenset(map(datetime.date.fromordinal, range(first, stop)))
    first_weekday = datetime.date.fromordinal(first).weekday()
    return frozenset(
        itertools.chain.from_iterable(
            map(datetime.date.fromordinal, range(first + (weekday - first_weekday) % 7, stop, 7))
            for weekday in weekdays
        )
    )


@dataclass(frozen=True)
class LibraryYear:
    """One year of one library calendar, as the library models it (its ``is_working_day``)."""

    weekend: frozenset[datetime.date]  # the calendar's weekend days of the year (its weekend per date)
    holidays: Mapping[datetime.date, str]  # holiday -> name (names joined with '; ')
    workdays: frozenset[datetime.date]  # make-up working days: weekend days that are working days

    def closed(self, weekend: frozenset[datetime.date] | None = None) -> frozenset[datetime.date]:
        """Non-working days: weekend or holiday, unless a make-up working day (``weekend`` overrides the
        calendar's own weekend days)."""
        return ((self.weekend if weekend is None else weekend) | self.holidays.keys()) - self.workdays


def read_library_years(made: Any, years: Iterable[int]) -> dict[int, LibraryYear]:
    """Per-year sets from a ``holidays`` object already populated for ``years`` (and their neighbours,
    which may move a make-up working day across New Year). Pure reading: vectorised per year."""
    lib = _holidays_module()
    wanted = sorted(set(years))
    names: dict[int, dict[datetime.date, str]] = {year: {} for year in wanted}
    for day, name in made.items():
        bucket = names.get(day.year)
        if bucket is not None:
            bucket[day] = name
    workdays: dict[int, set[datetime.date]] = {year: set() for year in wanted}
    for day in made.weekend_workdays:
        if day.year in workdays:
            workdays[day.year].add(day)
    # a calendar whose weekend changed over time overrides _get_weekend: ask it per date, else use the set
    per_date = type(made)._get_weekend is not lib.HolidayBase._get_weekend
    out = {}
    for year in wanted:
        if per_date:
            weekend = frozenset(d for d in year_days(year) if made.is_weekend(d))
        else:
            weekend = year_days(year, frozenset(made.weekend))
        out[year] = LibraryYear(weekend, names[year], frozenset(workdays[year]))
    return out


_LIBRARY_YEARS: dict[tuple[Source, int], LibraryYear] = {}
_LIBRARY_YEARS_MAX = 20_000  # ~250 sources x 80 years; cleared (not evicted one by one) when exceeded


def library_year(source: Source, year: int) -> LibraryYear:
    """One year of a library calendar, read with its block of :data:`_BLOCK_YEARS` years and cached.

    Raises :class:`HolidayYearOutOfRange` for a year the library does not cover (never an empty set)."""
    cached = _LIBRARY_YEARS.get((source, year))
    if cached is not None:
        return cached
    _check_source_year(source, year)
    first, last = source_years(source)
    block_start = year - (year - first) % _BLOCK_YEARS
    block = range(block_start, min(last, block_start + _BLOCK_YEARS - 1) + 1)
    made = source.make(range(max(first, block.start - 1), min(last, block.stop) + 1))
    read = read_library_years(made, block)
    if len(_LIBRARY_YEARS) + len(read) > _LIBRARY_YEARS_MAX:
        _LIBRARY_YEARS.clear()
    for other, data in read.items():
        _LIBRARY_YEARS[(source, other)] = data  # immutable values: concurrent fills are harmless
    return read[year]


def holiday_dates(
    country: str | None,
    subdivision: str | None,
    market: str | None,
    categories: tuple[str, ...] | None,
    year: int,
) -> frozenset[datetime.date]:
    """The library holiday dates of one year (country and market together), without weekends."""
    dates: set[datetime.date] = set()
    for source in _sources(country, subdivision, market, categories):
        dates.update(library_year(source, year).holidays)
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
        for source in _sources(country, subdivision, market, None):
            name = source.name
            accepted = tuple(sorted(source.make([]).supported_categories))
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


def _parse_weekend(values: Iterable[Any] | None) -> tuple[int, ...] | None:
    accepted = (
        "weekday numbers 0-6 (Mon=0 ... Sun=6) or names 'Mon'..'Sun', or None (the calendar's own weekend, "
        "per date)"
    )
    if values is None:
        return None
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
# --- calendars ---------------------------------------------------------------------------------------


def weekday_names(days: Iterable[int]) -> str:
    return "/".join(WEEKDAY_NAMES[d] for d in sorted(days))


@dataclass(frozen=True)
class EveryDay:
    """Every local calendar day is scheduled."""

    def contains(self, day: datetime.date) -> bool:
        return True

    def next_on_or_after(self, day: datetime.date) -> datetime.date:
        return day

    def prev_on_or_before(self, day: datetime.date) -> datetime.date:
        return day

    def explain(self, day: datetime.date) -> str | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "every_day"}

    def label(self) -> str:
        return "daily"


class BusinessDayCalendar:
    """A set of business days (base of :class:`BusinessCalendar` and :class:`CombinedCalendar`).

    Each year is one frozenset of closed days, computed once per calendar: ``contains`` is one dict get
    and one set lookup, whatever the calendar combines. Immutable and hashable; ``a & b`` (all open),
    ``a | b`` (any open) and ``a - b`` (``a`` open, ``b`` closed) combine calendars.
    """

    __slots__ = ("_closed_by_year",)

    _closed_by_year: dict[int, frozenset[datetime.date]]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init_cache(self) -> None:
        # year -> closed days: values are immutable, so concurrent fills are harmless
        object.__setattr__(self, "_closed_by_year", {})

    # --- to implement ----------------------------------------------------------------------------------

    def _compute_closed(self, year: int) -> frozenset[datetime.date]:
        raise NotImplementedError

    def explain(self, day: datetime.date) -> str | None:
        """Why ``day`` is not a business day (e.g. ``"NYSE holiday: Thanksgiving Day"``); None if it is."""
        raise NotImplementedError

    def working_note(self, day: datetime.date) -> str | None:
        """Why a business day on a weekday that is usually off is open (make-up working day), else None."""
        raise NotImplementedError

    def name(self) -> str:
        """Short name for labels and combinations, e.g. ``"NYSE"``, ``"IL (weekend Fri/Sat)"``."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    # --- shared ------------------------------------------------------------------------------------------

    def closed_days(self, year: int) -> frozenset[datetime.date]:
        """The non-business days of ``year`` (cached)."""
        closed = self._closed_by_year.get(year)
        if closed is None:
            closed = self._closed_by_year[year] = self._compute_closed(year)
        return closed

    # The hot path: one dict get, one set lookup.
    def contains(self, day: datetime.date) -> bool:
        closed = self._closed_by_year.get(day.year)
        if closed is None:
            closed = self.closed_days(day.year)
        return day not in closed

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

    def label(self) -> str:
        return f"{self.name()} business days"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __and__(self, other: BusinessDayCalendar) -> CombinedCalendar:
        return CombinedCalendar("intersection", (self, other))

    def __or__(self, other: BusinessDayCalendar) -> CombinedCalendar:
        return CombinedCalendar("union", (self, other))

    def __sub__(self, other: BusinessDayCalendar) -> CombinedCalendar:
        return CombinedCalendar("difference", (self, other))


class BusinessCalendar(BusinessDayCalendar):
    """The working days of a ``holidays`` library calendar, as the library models them, plus your lists.

    :param country: ``holidays`` country code (e.g. ``"US"``, ``"IL"``); None for no country calendar.
    :param subdivision: subdivision code of ``country`` (e.g. ``"NY"``, ``"BY"``).
    :param market: ``holidays`` financial market code (e.g. ``"NYSE"``, ``"XLON"``, ``"ECB"``).
    :param categories: ``holidays`` categories (e.g. ``("public", "bank")``); None = the library default.
    :param extra_holidays: extra non-business days (dates or ``YYYY-MM-DD`` strings).
    :param extra_business_days: days that are business days whatever the weekend/holidays say.
    :param weekend: None (default) = each calendar's own weekend, per date, from the library (Sat/Sun
        without a country or market); or weekday numbers 0-6 (Mon=0) / names, replacing it on every date.

    Precedence, highest first: ``extra_business_days`` (open) > ``extra_holidays`` (closed) > the library's
    make-up working days (open) > library holidays (closed) > weekend (closed) > open. Country and market
    combine: a day closed in either is closed. Immutable and hashable.
    """

    __slots__ = (
        "categories",
        "country",
        "extra_business_days",
        "extra_holidays",
        "market",
        "sources",
        "subdivision",
        "weekend",
    )

    country: str | None
    subdivision: str | None
    market: str | None
    categories: tuple[str, ...] | None
    extra_holidays: frozenset[datetime.date]
    extra_business_days: frozenset[datetime.date]
    weekend: tuple[int, ...] | None
    sources: tuple[Source, ...]

    def __init__(
        self,
        *,
        country: str | None = None,
        subdivision: str | None = None,
        market: str | None = None,
        categories: str | Iterable[str] | None = None,
        extra_holidays: Iterable[datetime.date | str] | None = None,
        extra_business_days: Iterable[datetime.date | str] | None = None,
        weekend: Iterable[int | str] | None = None,
    ) -> None:
        set_ = object.__setattr__  # immutable after construction
        self._init_cache()
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
        if self.subdivision is not None and self.country is None:
            raise ValueError("subdivision: needs `country` (e.g. country='US', subdivision='NY').")
        if self.categories is not None and self.country is None and self.market is None:
            raise ValueError("categories: needs `country` or `market` (categories select their holidays).")
        set_(self, "sources", _sources(self.country, self.subdivision, self.market, self.categories))
        parsed_weekend = _parse_weekend(weekend)
        # without a library calendar there is no weekend model to take: Saturday and Sunday
        set_(
            self,
            "weekend",
            DEFAULT_WEEKEND if parsed_weekend is None and not self.sources else parsed_weekend,
        )
        if self.sources:
            _validate_holiday_source(self.country, self.subdivision, self.market, self.categories)
            # a calendar whose library data does not cover today fails now (DAG parse), not in the scheduler
            for source in self.sources:
                _check_source_year(source, datetime.date.today().year)
        self._check_closed_runs()

    def _check_closed_runs(self) -> None:
        """Reject a calendar with a run of >= MAX_SEARCH_DAYS consecutive non-business days: every search
        for the next/previous business day would fail there, at scheduling time instead of at DAG parse.

        Exact: runs of ``extra_holidays`` joined and grown by the calendar's other closed days.
        """
        if not self.extra_holidays:
            return  # a weekend closes at most 6 days in a row
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
                f"non-business days (with the weekend{' and library holidays' if self.sources else ''}); "
                f"the timetables search at most {MAX_SEARCH_DAYS} days for a business day, so at most "
                f"{MAX_SEARCH_DAYS - 1} consecutive days off are accepted. Shorten the list or add "
                "extra_business_days inside that range."
            )

    def _weekend_between(self, first: datetime.date, last: datetime.date) -> bool:
        """True when every day strictly between ``first`` and ``last`` is closed (stops at the first open)."""
        gap = (last - first).days - 1
        return all(self._closed_or_unknown(first + datetime.timedelta(days=i)) for i in range(1, gap + 1))

    def _extend_closed(
        self, first: datetime.date, last: datetime.date
    ) -> tuple[datetime.date, datetime.date]:
        """Grow a run of extra holidays by the adjacent closed days (weekend, library holidays)."""
        for _ in range(MAX_SEARCH_DAYS):
            if first <= datetime.date.min + _ONE_DAY or not self._closed_or_unknown(first - _ONE_DAY):
                break
            first -= _ONE_DAY
        for _ in range(MAX_SEARCH_DAYS):
            if last >= datetime.date.max - _ONE_DAY or not self._closed_or_unknown(last + _ONE_DAY):
                break
            last += _ONE_DAY
        return first, last

    def _closed_or_unknown(self, day: datetime.date) -> bool:
        """Not a business day; a year without library data counts as open (it fails loudly on its own)."""
        try:
            return not self.contains(day)
        except HolidayYearOutOfRange:
            return day in self.extra_holidays

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

    def __repr__(self) -> str:
        args = ", ".join(
            f"{k}={v!r}" for k, v in self.to_dict().items() if k != "type" and v not in (None, [])
        )
        return f"BusinessCalendar({args})"

    def _weekend_days(self, year: int) -> frozenset[datetime.date] | None:
        """The explicit weekend's days of ``year``; None = each library calendar's own."""
        return None if self.weekend is None else year_days(year, frozenset(self.weekend))

    def _compute_closed(self, year: int) -> frozenset[datetime.date]:
        weekend = self._weekend_days(year)
        closed: frozenset[datetime.date] = weekend if not self.sources else frozenset()  # type: ignore[assignment]
        for source in self.sources:
            closed |= library_year(source, year).closed(weekend)
        if self.extra_holidays or self.extra_business_days:
            closed = (closed | self.extra_holidays) - self.extra_business_days
        return closed

    def explain(self, day: datetime.date) -> str | None:
        if day in self.extra_business_days:
            return None
        if day in self.extra_holidays:
            return "extra holiday"
        if not self.sources:
            return (
                f"weekend ({weekday_names(self.weekend or ())})"
                if day.weekday() in (self.weekend or ())
                else None
            )
        weekend = self._weekend_days(day.year)
        reasons = []
        for source in self.sources:
            data = library_year(source, day.year)
            if day in data.workdays:
                continue
            if day in data.holidays:
                reasons.append(f"{source.code} holiday: {data.holidays[day]}")
            elif weekend is not None and day in weekend:
                reasons.append(f"weekend ({weekday_names(self.weekend or ())})")
            elif weekend is None and day in data.weekend:
                reasons.append(f"{source.code} weekend ({weekday_names(self._library_weekend(source, day))})")
        return "; ".join(dict.fromkeys(reasons)) or None

    @staticmethod
    def _library_weekend(source: Source, day: datetime.date) -> tuple[int, ...]:
        """The library calendar's weekend weekdays in the week of ``day``."""
        monday = day - datetime.timedelta(days=day.weekday())
        week = [monday + datetime.timedelta(days=i) for i in range(7)]
        return tuple(d.weekday() for d in week if d in library_year(source, d.year).weekend)

    def working_note(self, day: datetime.date) -> str | None:
        if day in self.extra_business_days:
            return "extra business day"
        for source in self.sources:
            if day in library_year(source, day.year).workdays:
                return f"{source.code} make-up working day"
        return None

    def weekend_today(self) -> tuple[int, ...]:
        """The weekend weekdays in force this week (explicit, or the library calendars' own, combined)."""
        if self.weekend is not None:
            return self.weekend
        today = datetime.date.today()
        days: set[int] = set()
        for source in self.sources:
            try:
                days.update(self._library_weekend(source, today))
            except HolidayYearOutOfRange:
                days.update(source.make([]).weekend)
        return tuple(sorted(days))

    def holidays_in(self, year: int) -> frozenset[datetime.date]:
        """Library holidays of ``year`` (without weekend and extra lists) — for docs and tests."""
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
            "weekend": list(self.weekend) if self.weekend is not None else None,
        }

    def _source_text(self) -> str:
        return " ".join(source.code for source in reversed(self.sources))  # market first: "NYSE US"

    def _weekend_text(self) -> str:
        weekend = self.weekend_today()
        if weekend == DEFAULT_WEEKEND:
            return ""
        return f" (weekend {weekday_names(weekend)})" if weekend else " (no weekend)"

    def name(self) -> str:
        extra = "+custom" if self.extra_holidays or self.extra_business_days else ""
        return (self._source_text() + extra or "weekdays") + self._weekend_text()

    def label(self) -> str:
        source = self._source_text()
        extra = " +custom" if self.extra_holidays or self.extra_business_days else ""
        return f"{source + ' ' if source else ''}business days{extra}{self._weekend_text()}"


COMBINATIONS = {
    "intersection": "days all of them are open (a & b)",
    "union": "days any of them is open (a | b)",
    "difference": "days the first is open and the second closed (a - b)",
}


class CombinedCalendar(BusinessDayCalendar):
    """Calendar algebra over business-day calendars: ``"intersection"`` (all open, ``a & b``), ``"union"``
    (any open, ``a | b``) or ``"difference"`` (the first open and the second closed, ``a - b``).

    Accepted wherever a business calendar is (``calendar=``). Rejected at construction: fewer than two
    calendars (exactly two for a difference), a part that is not a business-day calendar, and a combination
    with no business day within :data:`MAX_SEARCH_DAYS` days from today (e.g. ``a - a``).
    """

    __slots__ = ("op", "parts")

    op: str
    parts: tuple[BusinessDayCalendar, ...]

    def __init__(self, op: str, parts: Iterable[BusinessDayCalendar]) -> None:
        if op not in COMBINATIONS:
            raise ValueError(
                f"calendar: unknown combination {op!r}; accepted: "
                + ", ".join(f"{k!r} ({v})" for k, v in COMBINATIONS.items())
                + "."
            )
        flat: list[BusinessDayCalendar] = []
        for part in parts:
            if not isinstance(part, BusinessDayCalendar):
                raise ValueError(
                    f"calendar: a {op} combines business-day calendars (BusinessCalendar or a combination of "
                    f"them), got {part!r}."
                )
            if op != "difference" and isinstance(part, CombinedCalendar) and part.op == op:
                flat.extend(part.parts)  # (a & b) & c == a & b & c
            else:
                flat.append(part)
        if op != "difference":
            flat = list(dict.fromkeys(flat))  # a & a == a
        if op == "difference" and len(flat) != 2:
            raise ValueError(f"calendar: a difference takes exactly two calendars (a - b), got {len(flat)}.")
        if len(flat) < 2:
            raise ValueError(
                f"calendar: a {op} needs at least two different calendars, got {len(flat)}: "
                "use the calendar itself."
            )
        self._init_cache()
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "parts", tuple(flat))
        start = datetime.date.today()
        try:
            self.next_on_or_after(start)
        except CalendarSearchError:
            raise ValueError(
                f"calendar: {self.label()} has no business day in the {MAX_SEARCH_DAYS} days from "
                f"{start.isoformat()} — the combination is empty or contradictory "
                f"({COMBINATIONS[op]}); check the calendars and their weekends."
            ) from None

    def _key(self) -> tuple[Any, ...]:
        return (self.op, self.parts)

    def __repr__(self) -> str:
        return f"CombinedCalendar({self.op!r}, {list(self.parts)!r})"

    def _compute_closed(self, year: int) -> frozenset[datetime.date]:
        closed = [part.closed_days(year) for part in self.parts]
        if self.op == "intersection":
            return frozenset().union(*closed)
        if self.op == "union":
            return frozenset.intersection(*closed)
        return closed[0] | (year_days(year) - closed[1])

    def explain(self, day: datetime.date) -> str | None:
        if self.contains(day):
            return None
        if self.op == "difference":
            first, second = self.parts
            return first.explain(day) or f"{second.name()} open (excluded)"
        reasons = (part.explain(day) for part in self.parts)
        return "; ".join(dict.fromkeys(r for r in reasons if r)) or None

    def working_note(self, day: datetime.date) -> str | None:
        for part in self.parts:
            if part.contains(day):
                note = part.working_note(day)
                if note:
                    return note
        return None

    def _part_names(self) -> list[str]:
        return [f"({p.name()})" if isinstance(p, CombinedCalendar) else p.name() for p in self.parts]

    def closed_text(self) -> str:
        """When this combination is closed, e.g. ``"XLON and DE are both closed"`` for ``XLON | DE``."""
        names = self._part_names()
        listed = ", ".join(names[:-1])
        if self.op == "union":  # closed when every part is
            return f"{listed} and {names[-1]} are {'both' if len(names) == 2 else 'all'} closed"
        if self.op == "intersection":  # closed when any part is
            return f"{listed} or {names[-1]} is closed"
        return f"({self.name()}) is closed"

    def name(self) -> str:
        names = self._part_names()
        if self.op == "difference":
            return f"{names[0]} when {_closed_text(self.parts[1])}"
        joined = ", ".join(names[:-1]) + (" and " if self.op == "intersection" else " or ") + names[-1]
        return joined

    def label(self) -> str:
        if self.op == "difference":
            return f"{self.parts[0].label()} when {_closed_text(self.parts[1])}"
        return f"{self.name()} business days"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.op, "calendars": [part.to_dict() for part in self.parts]}


def _closed_text(calendar: BusinessDayCalendar) -> str:
    if isinstance(calendar, CombinedCalendar):
        return calendar.closed_text()
    return f"{calendar.name()} is closed"


def intersection(*calendars: BusinessDayCalendar) -> CombinedCalendar:
    """The days all ``calendars`` are open, e.g. ``intersection(BusinessCalendar(market="NYSE"),
    BusinessCalendar(market="XLON"))`` (same as ``a & b``)."""
    return CombinedCalendar("intersection", calendars)


def union(*calendars: BusinessDayCalendar) -> CombinedCalendar:
    """The days any of ``calendars`` is open (same as ``a | b``)."""
    return CombinedCalendar("union", calendars)


def difference(first: BusinessDayCalendar, second: BusinessDayCalendar) -> CombinedCalendar:
    """The days ``first`` is open and ``second`` is closed (same as ``first - second``)."""
    return CombinedCalendar("difference", (first, second))


@functools.lru_cache(maxsize=4096)  # calendars are frozen and hashable; a month is scanned once
def _scheduled_in_month(calendar: BusinessDayCalendar, n: int, year: int, month: int) -> datetime.date | None:
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

    calendar: BusinessDayCalendar
    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.calendar, BusinessDayCalendar):
            raise ValueError(
                f"calendar: expected a BusinessCalendar or a combination of them, got {self.calendar!r}."
            )
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

    def explain(self, day: datetime.date) -> str | None:
        if self.contains(day):
            return None
        return self.calendar.explain(day) or f"not the {self.label().removesuffix(' of the month')}"

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
            return f"{ordinal(-self.n)}-to-last {base} of the month"
        return f"{ordinal(self.n)} {base} of the month"


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 11 -> '11th'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


BUSINESS_CALENDAR_KEYS = ("type", *CALENDAR_KEYWORDS)
_COMBINED_KEYS = ("type", "calendars")
_MONTHLY_KEYS = ("type", "n", "calendar")
CALENDAR_TYPES = ("every_day", "business", *COMBINATIONS, "monthly")


def _check_keys(data: Mapping[str, Any], accepted: tuple[str, ...], what: str) -> None:
    unknown = sorted(str(k) for k in data if k not in accepted)
    if unknown:
        raise ValueError(
            f"calendar: unknown key(s) {', '.join(map(repr, unknown))} in the {what} dict; accepted keys: "
            f"{', '.join(map(repr, accepted))}."
        )


def business_calendar_from_dict(data: Mapping[str, Any]) -> BusinessDayCalendar:
    """A business-day calendar from its ``to_dict()`` form: ``type`` ``"business"`` (may be omitted),
    ``"intersection"``, ``"union"`` or ``"difference"``. Unknown keys and other types are rejected (a typo
    must not silently drop a holiday source)."""
    if not isinstance(data, Mapping):
        raise ValueError(
            f"calendar: expected a dict in BusinessCalendar.to_dict() / CombinedCalendar.to_dict() form, "
            f"got {data!r}."
        )
    kind = data.get("type", "business")
    if kind in COMBINATIONS:
        _check_keys(data, _COMBINED_KEYS, f"{kind} calendar")
        parts = data.get("calendars")
        if not isinstance(parts, (list, tuple)):
            raise ValueError(
                f"calendar: 'calendars' of a {kind} must be a list of calendar dicts, got {parts!r}."
            )
        return CombinedCalendar(kind, [business_calendar_from_dict(part) for part in parts])
    if kind != "business":  # before the keys: a mistyped type is the error, not the keys it brings
        raise ValueError(
            f"calendar: type {kind!r} is not a business-day calendar; accepted: 'business' (or omit 'type'), "
            f"{', '.join(map(repr, COMBINATIONS))}."
        )
    _check_keys(data, BUSINESS_CALENDAR_KEYS, "business calendar")
    keywords: CalendarKeywords = {k: data[k] for k in CALENDAR_KEYWORDS if k in data}  # type: ignore[assignment]
    return BusinessCalendar(**keywords)


def calendar_from_dict(data: Mapping[str, Any]) -> EveryDay | BusinessDayCalendar | MonthlyBusinessDay:
    """Inverse of ``to_dict`` for every calendar type (unknown keys and types are rejected)."""
    kind = data.get("type")
    if kind == "every_day":
        _check_keys(data, ("type",), "every_day calendar")
        return EveryDay()
    if kind == "business" or kind in COMBINATIONS:
        return business_calendar_from_dict(data)
    if kind == "monthly":
        _check_keys(data, _MONTHLY_KEYS, "monthly calendar")
        return MonthlyBusinessDay(business_calendar_from_dict(data["calendar"]), int(data["n"]))
    raise ValueError(
        f"calendar: unknown calendar type {kind!r}; accepted: {', '.join(map(repr, CALENDAR_TYPES))}."
    )
