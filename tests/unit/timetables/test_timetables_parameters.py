"""The timetables' parameters and their edges: serialization, UI texts, parameter errors, local dates that do
not exist (Pacific/Apia 2011-12-30), time zone names, calendar keywords, years without holiday data.

"now" is frozen with time_machine; nothing here measures time.
"""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from typing import Any

import pendulum
import pytest
import time_machine

from airflow_smart_ext import compat
from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.compat.timetables import AirflowTimetableInvalid
from airflow_smart_ext.timetables import (
    TIMETABLE_CLASSES,
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    InvalidTimetableParameter,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)
from tests.unit.timetables.helpers import (
    NY,
    NYSE,
    H,
    at,
    day_of,
    next_info,
)

# --- serialization ----------------------------------------------------------------------------------------

FULL_CALENDAR = BusinessCalendar(
    country="DE",
    subdivision="BY",
    market="XLON",
    categories=("public",),
    extra_holidays=["2026-12-24", dt.date(2026, 12, 31)],
    extra_business_days=["2026-12-27"],
    weekend=("Fri", "Sat"),
)
ROUND_TRIP = [
    DelayedDailyTimetable(),
    DelayedDailyTimetable(
        delay=dt.timedelta(days=1, hours=6, seconds=7, microseconds=5), timezone="Asia/Kathmandu"
    ),
    DelayedDailyTimetable(timezone=pendulum.timezone("Australia/Lord_Howe")),
    DelayedDailyTimetable(timezone=zoneinfo.ZoneInfo("America/Santiago")),
    RollingWindowTimetable(7, delay=H, timezone=NY),
    RollingWindowTimetable(
        3660, calendar=FULL_CALENDAR, delay=dt.timedelta(days=365, hours=23), timezone="Europe/Berlin"
    ),
    RollingWindowTimetable(5, calendar=FULL_CALENDAR.to_dict(), timezone=NY),
    BusinessDaysTimetable(),
    BusinessDaysTimetable(calendar=FULL_CALENDAR, window="since_previous", delay=6 * H, timezone=NY),
    BusinessDaysTimetable(
        country="US", subdivision="NY", categories="public", weekend=(6,), extra_holidays=["2026-11-27"]
    ),
    MonthlyBusinessDayTimetable(-1, market="NYSE", delay=2 * H, timezone=NY),
    MonthlyBusinessDayTimetable(23, calendar=FULL_CALENDAR, window="day", timezone="Europe/Berlin"),
    MonthlyBusinessDayTimetable(-23, weekend=(), timezone="UTC"),
]


@pytest.mark.parametrize("timetable", ROUND_TRIP, ids=repr)
def test_serialize_round_trip(timetable):
    """Both through Timetable.serialize/deserialize and Airflow's own encoder/decoder (the decoder finds the
    class through the installed `airflow.plugins` entry point; unit tests need no extra plugin setup)."""
    data = timetable.serialize()
    json.dumps(data)  # JSON-able as stored
    restored = type(timetable).deserialize(json.loads(json.dumps(data)))
    encoded = json.loads(json.dumps(compat.serialization.encode_timetable(timetable)))
    decoded = compat.serialization.decode_timetable(encoded)
    for other in (restored, decoded):
        assert type(other) is type(timetable)
        assert other == timetable
        assert other.serialize() == data
        assert other.summary == timetable.summary and other.description == timetable.description
        other.validate()
        start = at("2026-02-20", "Europe/Berlin")
        assert other.iter_runs(start, 5) == timetable.iter_runs(start, 5)
    assert restored._delay == timetable._delay  # microseconds survive the float seconds
    for key in ("timezone", "delay"):
        assert key in data


def test_serialized_form_is_stable():
    """The stored form is a compatibility contract: pin one full example."""
    timetable = BusinessDaysTimetable(
        calendar=FULL_CALENDAR, window="since_previous", delay=6 * H, timezone=NY
    )
    assert timetable.serialize() == {
        "timezone": NY,
        "delay": 21600.0,
        "calendar": {
            "type": "business",
            "country": "DE",
            "subdivision": "BY",
            "market": "XLON",
            "categories": ["public"],
            "extra_holidays": ["2026-12-24", "2026-12-31"],
            "extra_business_days": ["2026-12-27"],
            "weekend": [4, 5],
        },
        "window": "since_previous",
    }


def test_plugin_registers_every_timetable_class():
    from airflow_smart_ext.plugin import SmartExtPlugin

    assert set(SmartExtPlugin.timetables) == set(TIMETABLE_CLASSES)


# --- summary / description ---------------------------------------------------------------------------------


@pytest.mark.parametrize("timetable", ROUND_TRIP, ids=repr)
def test_summary_and_description(timetable):
    assert isinstance(timetable.summary, str) and timetable.summary.strip()
    assert isinstance(timetable.description, str) and timetable.description.strip()
    assert len(timetable.description) <= 1000
    assert timetable._timezone_name in timetable.summary and timetable._timezone_name in timetable.description


# --- bad input fails loudly, naming the parameter and what is accepted ---------------------------------------


@pytest.mark.parametrize(
    ("make", "parameter", "accepted"),
    [
        (lambda: DelayedDailyTimetable(timezone="Mars/Olympus_Mons"), "timezone", "IANA"),
        (lambda: DelayedDailyTimetable(timezone="+05:00"), "timezone", "Fixed offsets"),
        (lambda: DelayedDailyTimetable(timezone=None), "timezone", "IANA"),
        (lambda: DelayedDailyTimetable(delay=-H), "delay", ">= 0"),
        (lambda: DelayedDailyTimetable(delay=7200), "delay", "timedelta"),
        (lambda: DelayedDailyTimetable(delay=dt.timedelta(days=366)), "delay", "366 days"),
        (lambda: BusinessDaysTimetable(country="XX"), "country", "Accepted"),
        (lambda: BusinessDaysTimetable(country="US", subdivision="XX"), "subdivision", "Accepted: AK"),
        (lambda: BusinessDaysTimetable(subdivision="NY"), "subdivision", "needs `country`"),
        (lambda: BusinessDaysTimetable(market="NOPE"), "market", "NYSE"),
        (lambda: BusinessDaysTimetable(categories=("public",)), "categories", "needs `country` or `market`"),
        (lambda: BusinessDaysTimetable(extra_holidays=["2026-13-01"]), "extra_holidays", "YYYY-MM-DD"),
        (lambda: BusinessDaysTimetable(extra_holidays=["26-1-1"]), "extra_holidays", "YYYY-MM-DD"),
        (lambda: BusinessDaysTimetable(extra_holidays="2026-01-01"), "extra_holidays", "list of dates"),
        (lambda: BusinessDaysTimetable(extra_business_days=[20260101]), "extra_business_days", "YYYY-MM-DD"),
        (lambda: BusinessDaysTimetable(weekend=range(7)), "weekend", "leave at least one"),
        (
            lambda: BusinessDaysTimetable(weekend=("Sat", "Sun", "Mon", "Tue", "Wed", "Thu", "Fri")),
            "weekend",
            "leave at least one",
        ),
        (lambda: BusinessDaysTimetable(weekend=("Funday",)), "weekend", "'Mon'..'Sun'"),
        (lambda: BusinessDaysTimetable(weekend=(7,)), "weekend", "0-6"),
        (lambda: BusinessDaysTimetable(window="week"), "window", "'since_previous'"),
        (lambda: MonthlyBusinessDayTimetable(1, window="month"), "window", "'day'"),
        (lambda: BusinessDaysTimetable(calendar=NYSE, country="US"), "calendar", "not both"),
        (lambda: BusinessDaysTimetable(calendar="NYSE"), "calendar", "BusinessCalendar"),
        (lambda: RollingWindowTimetable(0), "days", "between 1 and 3660"),
        (lambda: RollingWindowTimetable(-3), "days", "between 1 and 3660"),
        (lambda: RollingWindowTimetable(3661), "days", "between 1 and 3660"),
        (lambda: RollingWindowTimetable(2.5), "days", "whole number"),
        (lambda: RollingWindowTimetable(True), "days", "whole number"),
        (
            lambda: RollingWindowTimetable(3, calendar={"type": "business", "weekend": list(range(7))}),
            "weekend",
            "leave at least one",
        ),
        (lambda: MonthlyBusinessDayTimetable(0), "n", "non-zero integer between -23 and 23"),
        (lambda: MonthlyBusinessDayTimetable(24), "n", "non-zero integer between -23 and 23"),
        (lambda: MonthlyBusinessDayTimetable(-24), "n", "non-zero integer between -23 and 23"),
        (lambda: MonthlyBusinessDayTimetable(True), "n", "non-zero integer"),
    ],
)
def test_bad_input_raises_invalid_timetable_parameter(make, parameter, accepted):
    with pytest.raises(InvalidTimetableParameter) as caught:
        make()
    assert isinstance(caught.value, AirflowTimetableInvalid)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message.startswith(f"{parameter}:"), message
    assert accepted in message, message


def test_empty_weekend_is_valid_every_day_is_a_business_day():
    timetable = BusinessDaysTimetable(weekend=(), timezone=NY)
    assert [day_of(i) for i in timetable.iter_runs(at("2026-11-27"), 3)] == [
        "2026-11-27",
        "2026-11-28",
        "2026-11-29",
    ]


def test_invalid_serialized_data_fails_loudly_on_deserialize():
    data = RollingWindowTimetable(3).serialize() | {"days": 0}
    with pytest.raises(InvalidTimetableParameter, match="days:"):
        RollingWindowTimetable.deserialize(data)
    data = DelayedDailyTimetable().serialize() | {"timezone": "Nowhere/Town"}
    with pytest.raises(InvalidTimetableParameter, match="timezone:"):
        DelayedDailyTimetable.deserialize(data)


# --- a local date that does not exist: Pacific/Apia skipped 2011-12-30 ---------------------------------------

APIA = "Pacific/Apia"


def test_apia_missing_day_is_never_scheduled():
    timetable = DelayedDailyTimetable(timezone=APIA)
    infos = timetable.iter_runs(at("2011-12-28", APIA), 4)
    assert [i.data_interval.start.in_tz(APIA).date().isoformat() for i in infos] == [
        "2011-12-28",
        "2011-12-29",
        "2011-12-31",  # 12-30 does not exist: 12-29 23:59:59 -10 was followed by 12-31 00:00 +14
        "2012-01-01",
    ]
    assert all(i.data_interval.start < i.data_interval.end for i in infos)
    assert all(b.data_interval.start == a.data_interval.end for a, b in zip(infos, infos[1:], strict=False))


@pytest.mark.parametrize(
    "moment", ["2011-12-30T10:00:00+00:00", "2011-12-30T11:00:00+00:00", "2011-12-30T23:59:59+00:00"]
)
def test_apia_manual_run_on_missing_day_gets_the_covering_real_interval(moment):
    """Before the fix, infer_manual_data_interval returned the empty interval [12-31 00:00, 12-31 00:00) of
    the non-existent local day 12-30 for these moments (local 12-31 00:00-13:59 +14)."""
    timetable = DelayedDailyTimetable(timezone=APIA)
    now = pendulum.parse(moment)
    manual = timetable.infer_manual_data_interval(run_after=now)
    assert manual.start < manual.end
    assert manual.start == pendulum.datetime(2011, 12, 29, tz=APIA)
    assert manual.end == pendulum.datetime(2011, 12, 31, tz=APIA)  # the real 24 h of local 12-29
    scheduled = next_info(timetable, now=now, earliest=pendulum.datetime(2011, 12, 1, tz=APIA), catchup=False)
    assert scheduled.data_interval == manual


@pytest.mark.parametrize(
    "timetable",
    [
        DelayedDailyTimetable(delay=2 * H, timezone=APIA),
        RollingWindowTimetable(3, timezone=APIA),
        BusinessDaysTimetable(weekend=(), window="since_previous", delay=30 * H, timezone=APIA),
        BusinessDaysTimetable(timezone=APIA),  # 2011-12-30 was a Friday
    ],
    ids=repr,
)
def test_apia_other_schedules_stay_non_empty_and_advancing(timetable):
    infos = timetable.iter_runs(at("2011-12-25", APIA), 8)
    assert all(i.data_interval.start < i.data_interval.end for i in infos)
    assert all(b.data_interval.start > a.data_interval.start for a, b in zip(infos, infos[1:], strict=False))
    assert all(b.data_interval.end > a.data_interval.end for a, b in zip(infos, infos[1:], strict=False))
    # run times strictly increase (3.x run ids derive from run_after), also across the 24-hour gap
    assert all(b.run_after > a.run_after for a, b in zip(infos, infos[1:], strict=False))
    for hour in range(0, 48, 5):
        moment = pendulum.datetime(2011, 12, 29, 12).add(hours=hour)
        manual = timetable.infer_manual_data_interval(run_after=moment)
        assert manual.start < manual.end


@pytest.mark.parametrize("hours", [24, 30, 47])
@pytest.mark.parametrize("window", ["day", "since_previous"])
def test_apia_delay_of_a_day_or_more_gives_strictly_increasing_run_after(hours, window):
    """Before the fix, with delay >= 1 day the runs of 2011-12-28 and 12-29 had the same run_after: 12-28's
    wall time (12-30 + delay - 24 h) is in the skipped day and moves forward by 24 h onto 12-29's. The
    later day now runs 1 s after the earlier one (documented rule); other days keep their wall time."""
    timetable = BusinessDaysTimetable(weekend=(), window=window, delay=hours * H, timezone=APIA)
    infos = timetable.iter_runs(at("2011-12-25", APIA), 8)
    runs = [i.run_after for i in infos]
    assert all(b > a for a, b in zip(runs, runs[1:], strict=False)), runs
    # keyed by the local date the interval ends on (12-29's interval ends on 12-31: 12-30 does not exist)
    by_end = {i.data_interval.end.in_tz(APIA).date().isoformat(): i.run_after for i in infos}
    # 12-28's wall time 12-30 00:00 + (hours - 24) h is in the skipped day: moved forward by 24 h
    assert by_end["2011-12-29"] == pendulum.datetime(2011, 12, 31, tz=APIA).add(hours=hours - 24)
    # 12-29's own wall time is that same instant: it runs 1 s later
    assert by_end["2011-12-31"] == by_end["2011-12-29"] + dt.timedelta(seconds=1)
    assert by_end["2012-01-02"] == pendulum.datetime(2012, 1, 2, tz=APIA).add(hours=hours)
    # manual runs and catchup=False agree with the adjusted run times
    for info in infos:
        assert timetable.infer_manual_data_interval(run_after=info.run_after) == info.data_interval
        before = info.run_after - dt.timedelta(microseconds=1)
        assert timetable.infer_manual_data_interval(run_after=before) != info.data_interval


# --- time zones: portable IANA names only ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["localtime", "posixrules", "Factory", "posix/Europe/Berlin", "right/UTC"])
def test_machine_dependent_zone_names_are_rejected(name):
    """Before the fix 'localtime' (the parsing machine's own zone) and friends were accepted."""
    with pytest.raises(InvalidTimetableParameter, match=r"^timezone: .*not a portable IANA") as caught:
        DelayedDailyTimetable(timezone=name)
    assert "zoneinfo.available_timezones()" in str(caught.value)


@pytest.mark.parametrize("name", ["utc", "america/new_york", "Mars/Olympus_Mons", "+05:00", ""])
def test_zone_names_not_in_available_timezones_are_rejected(name):
    with pytest.raises(InvalidTimetableParameter, match=r"^timezone: ") as caught:
        DelayedDailyTimetable(timezone=name)
    assert "available_timezones()" in str(caught.value) or "IANA" in str(caught.value)


@pytest.mark.parametrize(
    "zone",
    [
        "UTC",
        "EST5EDT",
        "Etc/GMT+5",
        "US/Eastern",
        pendulum.timezone("Europe/Berlin"),
        zoneinfo.ZoneInfo("Asia/Kathmandu"),
        pendulum.UTC,
    ],
    ids=str,
)
def test_iana_names_and_named_zone_objects_are_accepted(zone):
    timetable = DelayedDailyTimetable(timezone=zone)
    assert DelayedDailyTimetable.deserialize(timetable.serialize()) == timetable
    assert timetable._timezone_name in zoneinfo.available_timezones() | {"UTC"}


# --- RollingWindowTimetable takes the business-day calendar keywords -----------------------------------------


def test_rolling_window_on_nyse_trading_days_is_one_line():
    by_keyword = RollingWindowTimetable(5, market="NYSE", delay=6 * H, timezone=NY)
    by_calendar = RollingWindowTimetable(5, calendar=NYSE, delay=6 * H, timezone=NY)
    assert by_keyword == by_calendar and by_keyword.serialize() == by_calendar.serialize()
    assert by_keyword.summary == "5-day window, NYSE business days 06:00 America/New_York"
    runs = by_keyword.iter_runs(at("2026-11-16"), 5)
    assert [day_of(i) for i in runs] == ["2026-11-20", "2026-11-23", "2026-11-24", "2026-11-25", "2026-11-27"]
    assert runs == by_calendar.iter_runs(at("2026-11-16"), 5)
    restored = RollingWindowTimetable.deserialize(json.loads(json.dumps(by_keyword.serialize())))
    assert restored == by_keyword


def test_rolling_window_accepts_every_business_days_timetable_calendar_keyword():
    import inspect

    def keywords(cls):
        return {
            name for name, p in inspect.signature(cls.__init__).parameters.items() if p.kind is p.KEYWORD_ONLY
        }

    # The keywords the three share are written once (DayKeywords: the run keywords and CalendarKeywords)
    from airflow_smart_ext.calendars import CALENDAR_KEYWORDS, BusinessCalendar
    from airflow_smart_ext.timetables.local_day import RUN_KEYWORDS, DayKeywords

    for cls in (BusinessDaysTimetable, MonthlyBusinessDayTimetable, RollingWindowTimetable):
        [shared] = [p for p in inspect.signature(cls.__init__).parameters.values() if p.kind is p.VAR_KEYWORD]
        assert shared.annotation == "Unpack[DayKeywords]", cls
    assert set(DayKeywords.__annotations__) == set(RUN_KEYWORDS) | set(CALENDAR_KEYWORDS)
    assert set(RUN_KEYWORDS) == {"lag", "delay", "timezone", "partitioned", "key_format"}
    # The calendar keywords are defined once (CalendarKeywords): BusinessCalendar takes exactly those.

    assert set(CALENDAR_KEYWORDS) == keywords(BusinessCalendar) | {
        name
        for name, p in inspect.signature(BusinessCalendar.__init__).parameters.items()
        if p.kind is p.POSITIONAL_OR_KEYWORD and name != "self"
    }
    calendar: dict[str, Any] = {
        "country": "US",
        "subdivision": "NY",
        "categories": ("public",),
        "extra_holidays": ["2026-11-27"],
        "extra_business_days": ["2026-11-28"],
        "weekend": ("Sun",),
    }
    rolling = RollingWindowTimetable(3, **calendar, timezone=NY)
    business = BusinessDaysTimetable(**calendar, timezone=NY)
    assert rolling._business == business._business
    with pytest.raises(InvalidTimetableParameter, match=r"^calendar: pass either .* \['market'\], not both"):
        RollingWindowTimetable(3, calendar=NYSE, market="NYSE")
    with pytest.raises(InvalidTimetableParameter, match=r"^market: unknown financial market 'NYSEE'"):
        RollingWindowTimetable(3, market="NYSEE")
    with pytest.raises(InvalidTimetableParameter, match=r"^categories: 'bank' not supported by country 'US'"):
        RollingWindowTimetable(3, country="US", categories=["bank"])


@pytest.mark.parametrize(
    "make",
    [
        lambda: RollingWindowTimetable(3, calendar={"markte": "NYSE"}),
        lambda: BusinessDaysTimetable(calendar={"contry": "US"}),
        lambda: MonthlyBusinessDayTimetable(-1, calendar={"type": "every_day"}),
    ],
)
def test_calendar_dict_typos_fail_at_construction(make):
    """Before the fix a misspelt key was ignored: a calendar without the intended holidays."""
    with pytest.raises(InvalidTimetableParameter, match=r"^calendar: .*accepted"):
        make()


# --- holiday data outside the library's years: loud, never an empty holiday set -----------------------------


def test_timetable_for_years_without_holiday_data_fails_loudly():
    timetable = BusinessDaysTimetable(market="XETR", timezone="Europe/Berlin")
    with pytest.raises(
        ValueError, match=r"^market: .*no holiday data for market 'XETR' in 2015; it supports 2016-"
    ):
        next_info(timetable, now=at("2026-01-10"), earliest=at("2015-06-01"), catchup=True)
    with pytest.raises(ValueError, match=r"'XETR' in 2015"):
        timetable.infer_manual_data_interval(run_after=at("2015-06-01"))
    # at DAG parse on a machine whose clock is in an uncovered year: the constructor refuses it
    with time_machine.travel(dt.datetime(2015, 6, 1, tzinfo=dt.timezone.utc), tick=False):
        with pytest.raises(InvalidTimetableParameter, match=r"^market: .*'XETR' in 2015; it supports 2016-"):
            BusinessDaysTimetable(market="XETR")
        with pytest.raises(InvalidTimetableParameter, match=r"^market: .*'XETR' in 2015"):
            RollingWindowTimetable(3, market="XETR")


def test_validate_computes_the_current_run():
    """validate() used to compute a run in 2000, which would now fail for calendars covered only later."""
    in_2000 = dt.datetime(2000, 6, 1, tzinfo=dt.timezone.utc)
    for market in ("XETR", "HKEX", "ENX"):
        timetable = BusinessDaysTimetable(market=market)
        assert timetable.validate() is None  # now: covered, the run is computed
        # It really computes the run current *now*: with the clock in 2000, the same timetable is refused.
        refused = pytest.raises(
            InvalidTimetableParameter, match=rf"cannot compute runs: .*'{market}' in 2000"
        )
        with time_machine.travel(in_2000, tick=False), refused:
            timetable.validate()
