"""The ``holidays`` library, read lazily into immutable per-year sets: its calendars (:class:`Source`), the
years it has data for, and the refusal of any other year (:class:`HolidayYearOutOfRange`)."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from airflow_smart_ext.calendars.days import year_days

_BLOCK_YEARS = 8  # library years read at once (+1 on each side for make-up days moved across New Year)


def holidays_module() -> Any:
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
        lib = holidays_module()
        cats = list(self.categories) if self.categories else None
        if self.market is not None:
            return lib.financial_holidays(self.market, years=years, categories=cats)
        return lib.country_holidays(self.country, subdiv=self.subdivision, years=years, categories=cats)


def holiday_sources(
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
    no holidays, turning every weekday into a business day). ``year`` is the year asked for."""

    def __init__(self, message: str, *, year: int) -> None:
        super().__init__(message)
        self.year = year


def holidays_version() -> str:
    return str(holidays_module().__version__)


@functools.lru_cache(maxsize=256)
def source_years(source: Source) -> tuple[int, int]:
    """(first, last) year the library has data for, from its own ``start_year`` / ``end_year``."""
    made = source.make([])
    return int(made.start_year), int(made.end_year)


def check_source_year(source: Source, year: int) -> None:
    first, last = source_years(source)
    if not first <= year <= last:
        parameter = "market" if source.market is not None else "country"
        raise HolidayYearOutOfRange(
            f"{parameter}: the `holidays` library ({holidays_version()}) has no holiday data "
            f"for {source.name} in {year}; it supports {first}-{last} only. Outside that range the calendar "
            "would have no holidays at all, so it is refused: keep the DAG's runs within those years "
            "(start_date / end_date), or drop this calendar source.",
            year=year,
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
    lib = holidays_module()
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
    check_source_year(source, year)
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
    for source in holiday_sources(country, subdivision, market, categories):
        dates.update(library_year(source, year).holidays)
    return frozenset(dates)


def validate_holiday_source(
    country: str | None, subdivision: str | None, market: str | None, categories: tuple[str, ...] | None
) -> None:
    """Raise ValueError naming the parameter and how to list accepted codes when a code is unknown."""
    lib = holidays_module()
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
        for source in holiday_sources(country, subdivision, market, None):
            name = source.name
            accepted = tuple(sorted(source.make([]).supported_categories))
            unknown = sorted(set(categories) - set(accepted))
            if unknown:
                raise ValueError(
                    f"categories: {', '.join(map(repr, unknown))} not supported by {name}; accepted: "
                    f"{', '.join(map(repr, accepted))} (None = the library default, usually 'public')."
                )
