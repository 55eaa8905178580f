"""Library-backed business calendars: a ``holidays`` country / market as the library models it, plus your lists."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from airflow_smart_ext.calendars.algebra import BusinessDayCalendar
from airflow_smart_ext.calendars.days import MAX_SEARCH_DAYS, ONE_DAY, year_days
from airflow_smart_ext.calendars.keywords import (
    DEFAULT_WEEKEND,
    optional_code,
    parse_categories,
    parse_weekend,
)
from airflow_smart_ext.calendars.labels import weekday_names
from airflow_smart_ext.calendars.library import (
    HolidayYearOutOfRange,
    Source,
    check_source_year,
    holiday_dates,
    holiday_sources,
    library_year,
    validate_holiday_source,
)
from airflow_smart_ext.calendars.lists import parse_dates


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
        set_(self, "country", optional_code("country", country))
        set_(self, "subdivision", optional_code("subdivision", subdivision))
        set_(self, "market", optional_code("market", market))
        set_(self, "categories", parse_categories(categories))
        set_(self, "extra_holidays", parse_dates("extra_holidays", extra_holidays))
        set_(self, "extra_business_days", parse_dates("extra_business_days", extra_business_days))
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
        set_(self, "sources", holiday_sources(self.country, self.subdivision, self.market, self.categories))
        parsed_weekend = parse_weekend(weekend)
        # without a library calendar there is no weekend model to take: Saturday and Sunday
        set_(
            self,
            "weekend",
            DEFAULT_WEEKEND if parsed_weekend is None and not self.sources else parsed_weekend,
        )
        if self.sources:
            validate_holiday_source(self.country, self.subdivision, self.market, self.categories)
            # a calendar whose library data does not cover today fails now (DAG parse), not in the scheduler
            for source in self.sources:
                check_source_year(source, datetime.date.today().year)
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
            if first <= datetime.date.min + ONE_DAY or not self._closed_or_unknown(first - ONE_DAY):
                break
            first -= ONE_DAY
        for _ in range(MAX_SEARCH_DAYS):
            if last >= datetime.date.max - ONE_DAY or not self._closed_or_unknown(last + ONE_DAY):
                break
            last += ONE_DAY
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
