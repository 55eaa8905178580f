"""DueTime: a wait's due time on the timetables' calendars (holidays, make-up days, T+k, DST), its dict form and
its errors, each naming the parameter."""

from __future__ import annotations

import datetime
import json
from zoneinfo import ZoneInfo

import pytest

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables import DueTime, InvalidDueTime
from airflow_smart_ext.timetables.due import due_time_arg

NY = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")
UTC = datetime.timezone.utc
NYSE_0930 = DueTime("09:30", market="NYSE", timezone="America/New_York")


def local(day: str, zone: ZoneInfo = NY) -> datetime.datetime:
    return datetime.datetime.fromisoformat(day).replace(tzinfo=zone)


@pytest.mark.parametrize(
    ("reference", "due"),
    [
        ("2026-11-24", "2026-11-24 09:30"),  # a Tuesday session: that day
        ("2026-11-26", "2026-11-27 09:30"),  # Thanksgiving, the exchange is closed: the next session
        ("2026-11-28", "2026-11-30 09:30"),  # Saturday: Monday
        ("2026-04-03", "2026-04-06 09:30"),  # Good Friday (closed) and the weekend: Monday
    ],
)
def test_a_local_midnight_reference_is_due_at_on_the_first_session_from_that_day(
    reference: str, due: str
) -> None:
    assert NYSE_0930.due_at(local(reference)) == local(due).astimezone(UTC)


def test_a_reference_after_at_is_due_at_the_next_business_days_at() -> None:
    """The first ``at`` at or after the reference instant: an interval that ends after 09:30 (a UTC-midnight
    interval seen from New York ends at 19:00 the day before) is due the next session, never before it ends."""
    assert NYSE_0930.due_at(local("2026-11-30 00:00", UTC)) == local("2026-11-30 09:30")  # Sunday 19:00 EST
    assert NYSE_0930.due_at(local("2026-11-27 10:00")) == local("2026-11-30 09:30")  # Friday, after 09:30
    assert NYSE_0930.due_at(local("2026-11-30 09:30")) == local("2026-11-30 09:30")  # at it: due then
    assert NYSE_0930.due_at(local("2026-11-30 09:30:01")) == local("2026-12-01 09:30")
    t1 = DueTime("07:00", country="GB", lag=1, timezone="Europe/London")
    assert t1.due_at(local("2026-12-22 10:00", LONDON)) == local("2026-12-24 07:00", LONDON)  # 23rd, then T+1
    for reference in (
        local(f"2026-11-{day:02d} {hour:02d}:17") for day in range(23, 31) for hour in range(24)
    ):
        due = NYSE_0930.due_at(reference)
        assert due >= reference and due - reference < datetime.timedelta(days=5), (reference, due)


def test_a_gap_moves_at_forward_a_fold_takes_its_first_occurrence_a_skipped_day_does_not_count() -> None:
    gap = DueTime("02:30", timezone="America/New_York")  # 2026-03-08 02:00-03:00 does not exist
    assert gap.due_at(local("2026-03-08 03:15")) == local("2026-03-08 03:30")  # 02:30 moved forward by 1 h
    assert gap.due_at(local("2026-03-08 03:45")) == local("2026-03-09 02:30")
    fold = DueTime("01:30", timezone="America/New_York")  # 2026-11-01 01:00-02:00 happens twice
    # (in UTC: Python's == across zones is False for a time in a fold, PEP 495)
    first_0130 = datetime.datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # 01:30 EDT
    assert fold.due_at(local("2026-11-01 01:15")) == first_0130
    after_first = datetime.datetime(2026, 11, 1, 5, 45, tzinfo=UTC)  # 01:45 EDT: the first 01:30 has passed
    assert fold.due_at(after_first) == local("2026-11-02 01:30")
    apia = ZoneInfo("Pacific/Apia")  # Samoa skipped 2011-12-30
    t1 = DueTime("09:00", timezone="Pacific/Apia", lag=1)
    assert t1.due_at(local("2011-12-29 10:00", apia)) == local("2012-01-01 09:00", apia)


def test_09_30_stays_09_30_local_across_both_clock_changes() -> None:
    # US clocks went forward on 2026-03-08 and back on 2026-11-01 (Sundays): the Fridays and Mondays around them
    for day in ("2026-03-06", "2026-03-09", "2026-10-30", "2026-11-02"):
        due = NYSE_0930.due_at(local(day))
        assert due.astimezone(NY).time() == datetime.time(9, 30), day
    assert NYSE_0930.due_at(local("2026-03-06")).hour == 14  # EST: UTC-5
    assert NYSE_0930.due_at(local("2026-03-09")).hour == 13  # EDT: UTC-4
    assert NYSE_0930.due_at(local("2026-11-02")).hour == 14


def test_t_plus_1_counts_business_days_past_holidays() -> None:
    due = DueTime("07:00", country="GB", lag=1, timezone="Europe/London")
    # Thu 2026-12-24 is T; Christmas (Fri), the weekend and Boxing Day's substitute (Mon 28th) are not
    assert due.due_at(local("2026-12-24", LONDON)) == local("2026-12-29 07:00", LONDON).astimezone(UTC)
    assert due.due_at(local("2026-12-22", LONDON)) == local("2026-12-23 07:00", LONDON).astimezone(UTC)


def test_a_make_up_working_day_is_a_business_day_as_the_library_keeps_it() -> None:
    # China's make-up working day Sunday 2025-09-28 (National Day's), and an explicit extra business day
    china = DueTime("09:00", country="CN", timezone="Asia/Shanghai")
    shanghai = ZoneInfo("Asia/Shanghai")
    assert china.due_at(local("2025-09-28", shanghai)) == local("2025-09-28 09:00", shanghai).astimezone(UTC)
    assert china.due_at(local("2025-10-01", shanghai)) == local("2025-10-09 09:00", shanghai).astimezone(UTC)
    extra = DueTime("09:00", calendar=BusinessCalendar(market="NYSE", extra_business_days=["2026-11-28"]))
    assert extra.due_at(local("2026-11-28", UTC)) == local("2026-11-28 09:00", UTC)  # type: ignore[arg-type]


def test_a_plain_offset_counts_from_the_reference_instant() -> None:
    due = DueTime(after=datetime.timedelta(hours=2))
    assert due.due_at(local("2026-06-01 23:30", NY)) == local("2026-06-02 01:30", NY).astimezone(UTC)
    assert DueTime(after=90).due_at(local("2026-06-01", UTC)) == local("2026-06-01 00:01:30", UTC)  # type: ignore[arg-type]


def test_the_dict_form_is_json_and_rebuilds_the_same_due_time() -> None:
    for due in (
        NYSE_0930,
        DueTime("07:00", country="GB", lag=2, timezone="Europe/London", reference="data_interval_start"),
        DueTime(datetime.time(6, 15, 30)),
        DueTime(after=datetime.timedelta(minutes=45), reference="logical_date"),
        DueTime("09:30", calendar=BusinessCalendar(market="NYSE") & BusinessCalendar(market="XLON")),
    ):
        data = json.loads(json.dumps(due.to_dict()))
        assert DueTime.from_dict(data) == due
        assert due_time_arg(data) == due
        assert DueTime.from_dict(data).due_at(local("2026-07-03")) == due.due_at(local("2026-07-03"))


def test_describe_says_the_rule() -> None:
    assert str(NYSE_0930) == (
        "DueTime(the first 09:30 America/New_York on a NYSE business day at or after data_interval_end)"
    )
    assert DueTime("07:00", country="GB", lag=1).describe().endswith(", then 1 GB business day later (T+1)")


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"at": "25:00"}, "due.at"),
        ({"at": "9:30"}, "due.at"),
        ({"at": datetime.time(9, 30, tzinfo=UTC)}, "due.at"),
        ({"at": "09:30", "lag": -1}, "due.lag"),
        ({"at": "09:30", "lag": 1.5}, "due.lag"),
        ({"at": "09:30", "timezone": "Mars/Olympus"}, "due.timezone"),
        ({"at": "09:30", "market": "NOPE"}, "due.market"),
        ({"at": "09:30", "reference": "run_after"}, "due.reference"),
        ({"after": -5}, "due.after"),
        ({"after": "2h"}, "due.after"),
        ({"after": 60, "market": "NYSE"}, "due: after="),
        ({}, "due: pass exactly one of at="),
        ({"at": "09:30", "after": 60}, "due: pass exactly one of at="),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs: dict, names: str) -> None:
    with pytest.raises(InvalidDueTime) as raised:
        DueTime(**kwargs)
    assert str(raised.value).startswith(names), raised.value
    assert isinstance(raised.value, ValueError)


def test_the_dict_form_refuses_unknown_keys_and_other_types() -> None:
    with pytest.raises(InvalidDueTime, match=r"unknown key\(s\) \['when'\]"):
        DueTime.from_dict({"when": "09:30"})
    with pytest.raises(InvalidDueTime, match="expected airflow_smart_ext.timetables.DueTime"):
        due_time_arg("09:30")
