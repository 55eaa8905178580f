"""Business-day partitions (Airflow >= 3.2): every case is one row of PARTITION_CASES.

Each row: a timetable config, a window of local dates, the expected partition keys (and, where the row is
about run times, the expected run day of some keys). Every row is checked through the calls Airflow makes:
the scheduler's ``next_dagrun_info_v2`` chain (catchup), backfill's ``iter_partition_dagrun_infos``, a
manual run's ``resolve_partition_date``, and Airflow's own serializer; and against the same timetable
unpartitioned (same days, same run times). Expected partition dates come from zoneinfo, not the engine.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import holidays
import pendulum
import pytest
import time_machine

from airflow_smart_ext import compat
from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.compat.partitions import InvalidPartitionKeyError
from airflow_smart_ext.compat.timetables import TimeRestriction
from airflow_smart_ext.timetables import (
    BusinessDaysTimetable,
    DelayedDailyTimetable,
    InvalidTimetableParameter,
    MonthlyBusinessDayTimetable,
    RollingWindowTimetable,
)

UTC = dt.timezone.utc
NY, BERLIN, SANTIAGO = "America/New_York", "Europe/Berlin", "America/Santiago"
H = dt.timedelta(hours=1)
NYSE = BusinessCalendar(market="NYSE")
XLON = BusinessCalendar(market="XLON")

needs_partitions = pytest.mark.skipif(
    not compat.partitions.PARTITIONS_SUPPORTED,
    reason="partitioned runs need Airflow >= 3.2; test_partitions_fail_at_parse_before_3_2 checks the "
    "parse-time error on this version",
)
# Airflow 3.3 decodes a manual run's partition key through the timetable (Timetable.resolve_partition_date,
# which calls our _decode_partition_date); 3.2 has no such hook: it stores a manual key as given, with no
# partition date and no check, so there is nothing of ours to call there.
needs_key_resolution = pytest.mark.skipif(
    not hasattr(compat.timetables.Timetable, "resolve_partition_date"),
    reason="this Airflow does not decode a manual run's partition key (Timetable.resolve_partition_date "
    "arrived in 3.3; on 3.2 the other partition tests run)",
)


def days(first: str, last: str, *, skip: str = "", weekdays_only: bool = True) -> list[str]:
    """Every local date from ``first`` to ``last`` (Mon-Fri only by default) minus the ``skip`` dates."""
    skipped = set(skip.split())
    out, day = [], dt.date.fromisoformat(first)
    while day <= dt.date.fromisoformat(last):
        if (not weekdays_only or day.weekday() < 5) and day.isoformat() not in skipped:
            out.append(day.isoformat())
        day += dt.timedelta(days=1)
    return out


class Case(NamedTuple):
    id: str
    make: Callable[..., Any]  # make(partitioned=..., key_format=...) -> timetable
    tz: str
    first: str  # window of local dates [first, last]: the partitions whose day D is inside
    last: str
    keys: list[str]  # expected partition keys, in order
    key_format: str | None = None
    run_days: dict[str, str] = {}  # key -> local date its run starts on (rows about run times)


PARTITION_CASES = [
    Case(
        "nyse-july-2026-independence-day",
        lambda **kw: BusinessDaysTimetable(market="NYSE", timezone=NY, **kw),
        NY,
        "2026-07-01",
        "2026-07-31",
        days("2026-07-01", "2026-07-31", skip="2026-07-03"),  # Independence Day observed on Friday 3rd
        run_days={"2026-07-02": "2026-07-03", "2026-07-31": "2026-08-01"},  # D+1 00:00, holiday or not
    ),
    Case(
        "nyse-november-2026-thanksgiving",
        lambda **kw: BusinessDaysTimetable(market="NYSE", delay=6 * H, timezone=NY, **kw),
        NY,
        "2026-11-01",
        "2026-11-30",
        days("2026-11-01", "2026-11-30", skip="2026-11-26"),  # Thanksgiving; Veterans Day is a trading day
    ),
    Case(
        "nyse-t-plus-2",
        lambda **kw: BusinessDaysTimetable(market="NYSE", lag=2, delay=6 * H, timezone=NY, **kw),
        NY,
        "2026-06-29",
        "2026-07-10",
        days("2026-06-29", "2026-07-10", skip="2026-07-03"),
        # the key is D; the run starts at 06:00 on the 2nd trading day after D (skipping the holiday)
        run_days={"2026-07-01": "2026-07-06", "2026-07-02": "2026-07-07", "2026-07-06": "2026-07-08"},
    ),
    Case(
        "monthly-last-nyse-business-day",
        lambda **kw: MonthlyBusinessDayTimetable(-1, market="NYSE", timezone=NY, **kw),
        NY,
        "2026-01-01",
        "2026-12-31",
        # Dec 31 is a Thursday and a trading day; Apr 30 Thu, May 29 Fri (Memorial Day is May 25)
        [
            "2026-01-30",
            "2026-02-27",
            "2026-03-31",
            "2026-04-30",
            "2026-05-29",
            "2026-06-30",
            "2026-07-31",
            "2026-08-31",
            "2026-09-30",
            "2026-10-30",
            "2026-11-30",
            "2026-12-31",
        ],
    ),
    Case(
        "monthly-first-nyse-business-day-t-plus-1",
        lambda **kw: MonthlyBusinessDayTimetable(1, market="NYSE", lag=1, timezone=NY, **kw),
        NY,
        "2026-01-01",
        "2026-03-31",
        ["2026-01-02", "2026-02-02", "2026-03-02"],  # Jan 1 is New Year's Day
        run_days={"2026-01-02": "2026-01-05"},
    ),
    Case(
        "algebra-nyse-and-xlon-christmas",
        lambda **kw: BusinessDaysTimetable(calendar=NYSE & XLON, timezone=NY, **kw),
        NY,
        "2026-12-21",
        "2027-01-08",
        # Christmas (both), Boxing Day observed Mon 28th (London), New Year's Day (both)
        days("2026-12-21", "2027-01-08", skip="2026-12-25 2026-12-28 2027-01-01"),
    ),
    Case(
        "algebra-nyse-minus-xlon",
        lambda **kw: BusinessDaysTimetable(calendar=NYSE - XLON, timezone=NY, **kw),
        NY,
        "2026-12-01",
        "2027-01-31",
        ["2026-12-28"],  # NYSE open, London closed (Boxing Day observed)
    ),
    Case(
        "custom-key-format",
        lambda **kw: BusinessDaysTimetable(market="NYSE", timezone=NY, **kw),
        NY,
        "2026-07-01",
        "2026-07-08",
        ["20260701", "20260702", "20260706", "20260707", "20260708"],
        key_format="%Y%m%d",
    ),
    Case(
        "dst-berlin-spring-forward-and-back",
        lambda **kw: BusinessDaysTimetable(country="DE", timezone=BERLIN, **kw),
        BERLIN,
        "2026-03-26",
        "2026-11-03",
        [
            k
            for k in days("2026-03-26", "2026-11-03")
            # Good Friday, Easter Monday, Labour Day, Ascension, Whit Monday, Unity Day (a Saturday)
            if k not in {"2026-04-03", "2026-04-06", "2026-05-01", "2026-05-14", "2026-05-25"}
        ],
    ),
    Case(
        "dst-santiago-day-starts-at-01",
        lambda **kw: DelayedDailyTimetable(delay=2 * H, timezone=SANTIAGO, **kw),
        SANTIAGO,
        "2026-09-04",
        "2026-09-08",
        days("2026-09-04", "2026-09-08", weekdays_only=False),  # 09-06 has no 00:00 (starts at 01:00)
    ),
]


def local_day_start(day: dt.date, tz: str) -> dt.datetime:
    """First instant of the local day (zoneinfo, fold=0: in a midnight gap that is the transition)."""
    return dt.datetime.combine(day, dt.time(0), tzinfo=ZoneInfo(tz)).astimezone(UTC)


def build(case: Case, partitioned: bool = True) -> Any:
    if not partitioned:
        return case.make()
    return case.make(partitioned=True, key_format=case.key_format)


def restriction(case: Case) -> TimeRestriction:
    return TimeRestriction(
        earliest=pendulum.instance(local_day_start(dt.date.fromisoformat(case.first), case.tz)),
        latest=pendulum.instance(local_day_start(dt.date.fromisoformat(case.last), case.tz)),
        catchup=True,
    )


def scheduler_chain(timetable: Any, limit: int = 400) -> Callable[[TimeRestriction], list[Any]]:
    """What the scheduler does: next_dagrun_info_v2, fed back the previous run as Airflow rebuilds it from
    the DB (``run_info_from_dag_run``: partition key and date, no data interval, the run's run_after)."""

    def chain(restrict: TimeRestriction) -> list[Any]:
        infos: list[Any] = []
        last = None
        for _ in range(limit):
            info = timetable.next_dagrun_info_v2(last_dagrun_info=last, restriction=restrict)
            if info is None:
                break
            infos.append(info)
            last = compat.timetables.DagRunInfo.exact(info.run_after)._replace(
                data_interval=None, partition_date=info.partition_date, partition_key=info.partition_key
            )
        return infos

    return chain


@needs_partitions
@pytest.mark.parametrize("case", PARTITION_CASES, ids=lambda c: c.id)
def test_partition_keys_of_the_scheduler_chain(case: Case) -> None:
    timetable = build(case)
    infos = scheduler_chain(timetable)(restriction(case))
    assert [i.partition_key for i in infos] == case.keys
    key_format = case.key_format or "%Y-%m-%d"
    for info in infos:
        day = dt.datetime.strptime(info.partition_key, key_format).date()
        assert info.data_interval is None and info.logical_date is None
        assert info.partition_date == local_day_start(day, case.tz)
        assert info.run_after > info.partition_date
    for key, run_day in case.run_days.items():
        (info,) = [i for i in infos if i.partition_key == key]
        assert info.run_after.astimezone(ZoneInfo(case.tz)).date().isoformat() == run_day


@needs_partitions
@pytest.mark.parametrize("case", PARTITION_CASES, ids=lambda c: c.id)
def test_partitions_are_the_unpartitioned_schedule_days_and_run_times(case: Case) -> None:
    partitioned, plain = build(case), build(case, partitioned=False)
    runs = scheduler_chain(partitioned)(restriction(case))
    restrict = restriction(case)
    plain_runs, last = [], None
    while (
        info := plain.next_dagrun_info(last_automated_data_interval=last, restriction=restrict)
    ) is not None:
        plain_runs.append(info)
        last = info.data_interval
    # unpartitioned, end_date bounds the interval start (a "since_previous" interval starts before its day D);
    # partitioned, it bounds D: compare the runs whose D is in the window
    last_day = dt.date.fromisoformat(case.last)
    plain_in_window = [
        p
        for p in plain_runs
        if p.data_interval.end.astimezone(ZoneInfo(case.tz)).date() <= last_day + dt.timedelta(1)
    ]
    assert [r.run_after for r in runs] == [p.run_after for p in plain_in_window]


@needs_partitions
@pytest.mark.parametrize("case", PARTITION_CASES, ids=lambda c: c.id)
def test_backfill_and_manual_keys_agree_with_the_scheduler(case: Case) -> None:
    timetable = build(case)
    scheduled = scheduler_chain(timetable)(restriction(case))
    # backfill passes the window as UTC wall clocks; the timetable reads them in its own zone (as Airflow's)
    backfill = list(
        timetable.iter_partition_dagrun_infos(
            earliest=pendulum.datetime(*map(int, case.first.split("-")), tz="UTC"),
            latest=pendulum.datetime(*map(int, case.last.split("-")), tz="UTC"),
        )
    )
    assert [(b.partition_key, b.partition_date, b.run_after) for b in backfill] == [
        (s.partition_key, s.partition_date, s.run_after) for s in scheduled
    ]


@needs_key_resolution
@pytest.mark.parametrize("case", PARTITION_CASES, ids=lambda c: c.id)
def test_manual_keys_resolve_to_the_scheduled_partition_dates(case: Case) -> None:
    timetable = build(case)
    scheduled = scheduler_chain(timetable)(restriction(case))
    assert scheduled
    for info in scheduled:
        assert timetable.resolve_partition_date(info.partition_key) == info.partition_date


@needs_partitions
@pytest.mark.parametrize("case", PARTITION_CASES, ids=lambda c: c.id)
def test_partitioned_timetable_survives_airflows_serializer(case: Case) -> None:
    timetable = build(case)
    encoded = json.loads(json.dumps(compat.serialization.encode_timetable(timetable)))
    assert encoded["__var"]["key_format"] == (case.key_format or "%Y-%m-%d")
    restored = compat.serialization.decode_timetable(encoded)
    assert restored == timetable and restored.partitioned is True
    assert [i.partition_key for i in scheduler_chain(restored)(restriction(case))] == case.keys


# --- NYSE as a universal: every month of 2026, keys = the trading days (python-holidays, independently) ----


def nyse_trading_days(year: int, month: int) -> list[str]:
    closed = holidays.financial_holidays("NYSE", years=year)
    first = dt.date(year, month, 1)
    out, day = [], first
    while day.month == month:
        if day.weekday() < 5 and day not in closed:
            out.append(day.isoformat())
        day += dt.timedelta(days=1)
    return out


@needs_partitions
@pytest.mark.parametrize("month", range(1, 13))
def test_nyse_partitions_are_the_trading_days_of_every_month(month: int) -> None:
    timetable = BusinessDaysTimetable(market="NYSE", timezone=NY, partitioned=True)
    first = dt.date(2026, month, 1)
    last = (first + dt.timedelta(days=31)).replace(day=1) - dt.timedelta(days=1)
    restrict = TimeRestriction(
        earliest=pendulum.instance(local_day_start(first, NY)),
        latest=pendulum.instance(local_day_start(last, NY)),
        catchup=True,
    )
    assert [i.partition_key for i in scheduler_chain(timetable)(restrict)] == nyse_trading_days(2026, month)


# --- catchup=False and a previous unpartitioned run ---------------------------------------------------------


@needs_partitions
def test_catchup_false_plans_the_latest_due_partition_only() -> None:
    timetable = BusinessDaysTimetable(market="NYSE", delay=6 * H, timezone=NY, partitioned=True)
    restrict = TimeRestriction(earliest=pendulum.datetime(2020, 1, 1, tz=NY), latest=None, catchup=False)
    # Monday 2026-07-06 10:00 NY: Friday 3rd is a holiday, so Thursday 2nd (run Mon 06:00) is the latest due
    with time_machine.travel(dt.datetime(2026, 7, 6, 14, 0, tzinfo=UTC), tick=False):
        info = timetable.next_dagrun_info_v2(last_dagrun_info=None, restriction=restrict)
        assert info.partition_key == "2026-07-02"
        after = timetable.next_dagrun_info_v2(last_dagrun_info=info, restriction=restrict)
    assert after.partition_key == "2026-07-06"


@needs_partitions
def test_switching_a_dag_to_partitions_continues_after_its_last_interval() -> None:
    plain = BusinessDaysTimetable(market="NYSE", timezone=NY)
    partitioned = BusinessDaysTimetable(market="NYSE", timezone=NY, partitioned=True)
    restrict = TimeRestriction(earliest=pendulum.datetime(2026, 6, 29, tz=NY), latest=None, catchup=True)
    last_plain = plain.next_dagrun_info_v2(last_dagrun_info=None, restriction=restrict)  # D = 2026-06-29
    assert last_plain.partition_key is None and last_plain.data_interval is not None
    following = partitioned.next_dagrun_info_v2(last_dagrun_info=last_plain, restriction=restrict)
    assert following.partition_key == "2026-06-30"


# --- manual runs with an explicit key ------------------------------------------------------------------------

BAD_MANUAL_KEYS = [
    # (key, fragments of the error)
    ("2026-07-03", ["Independence Day", "'2026-07-02' and '2026-07-06'"]),
    ("2026-07-04", ["weekend", "'2026-07-02' and '2026-07-06'"]),
    ("2026-7-6", ["write '2026-7-6' as '2026-07-06'"]),
    ("06/07/2026", ["does not match", "'%Y-%m-%d'"]),
]


@needs_key_resolution
@pytest.mark.parametrize(("key", "fragments"), BAD_MANUAL_KEYS, ids=[k for k, _ in BAD_MANUAL_KEYS])
def test_manual_key_that_is_no_partition_is_refused_with_the_reason(key: str, fragments: list[str]) -> None:
    timetable = BusinessDaysTimetable(market="NYSE", timezone=NY, partitioned=True)
    with pytest.raises(InvalidPartitionKeyError) as caught:
        timetable.resolve_partition_date(key)
    assert isinstance(caught.value, ValueError)  # Airflow's trigger endpoint answers 400 with the message
    for fragment in fragments:
        assert fragment in str(caught.value)


# --- parameters ----------------------------------------------------------------------------------------------

BAD_PARAMETERS = [
    # (what, constructor, fragments of the error)
    ("month-only format", lambda: BusinessDaysTimetable(market="NYSE", partitioned=True, key_format="%Y-%m"), ["key_format", "does not give the date back"]),
    ("empty format", lambda: BusinessDaysTimetable(market="NYSE", partitioned=True, key_format=""), ["key_format", "'%Y-%m-%d' (default)"]),
    ("format without partitioned", lambda: BusinessDaysTimetable(market="NYSE", key_format="%Y%m%d"), ["key_format", "only used with partitioned=True"]),
    ("partitioned not a bool", lambda: BusinessDaysTimetable(market="NYSE", partitioned="yes"), ["partitioned", "True or False"]),  # type: ignore[arg-type]
    ("rolling window", lambda: RollingWindowTimetable(5, market="NYSE", partitioned=True), ["RollingWindowTimetable cannot be partitioned", "BusinessDaysTimetable(partitioned=True)"]),
]  # fmt: skip


@needs_partitions
@pytest.mark.parametrize(("what", "make", "fragments"), BAD_PARAMETERS, ids=[w for w, _, _ in BAD_PARAMETERS])
def test_bad_partition_parameters_fail_at_parse(
    what: str, make: Callable[[], Any], fragments: list[str]
) -> None:
    with pytest.raises(InvalidTimetableParameter) as caught:
        make()
    for fragment in fragments:
        assert fragment in str(caught.value)


PARTITIONABLE = [
    lambda: BusinessDaysTimetable(market="NYSE", partitioned=True),
    lambda: MonthlyBusinessDayTimetable(-1, market="NYSE", partitioned=True),
    lambda: DelayedDailyTimetable(partitioned=True),
]


@pytest.mark.parametrize("make", PARTITIONABLE, ids=["business-days", "monthly", "delayed-daily"])
def test_partitions_fail_at_parse_before_3_2(
    make: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Airflow < 3.2 (really, on 2.11; simulated through the compat flag on newer versions)."""
    monkeypatch.setattr(compat.partitions, "PARTITIONS_SUPPORTED", False)
    with pytest.raises(InvalidTimetableParameter) as caught:
        make()
    assert "partitioned: partitioned runs need Airflow >= 3.2" in str(caught.value)
    assert f"this is Airflow {compat.versions.AIRFLOW_VERSION_STRING}" in str(caught.value)


def test_unpartitioned_timetables_keep_their_serialized_form_and_runs() -> None:
    plain = BusinessDaysTimetable(market="NYSE", lag=2, timezone=NY)
    assert "key_format" not in plain.serialize() and not plain.partitioned
    restrict = TimeRestriction(earliest=pendulum.datetime(2026, 7, 1, tz=NY), latest=None, catchup=True)
    v1 = plain.next_dagrun_info(last_automated_data_interval=None, restriction=restrict)
    assert plain.next_dagrun_info_v2(last_dagrun_info=None, restriction=restrict) == v1
    assert v1.data_interval is not None


@needs_partitions
def test_summary_and_description_name_the_partition_key() -> None:
    timetable = BusinessDaysTimetable(market="NYSE", lag=2, delay=6 * H, timezone=NY, partitioned=True)
    assert timetable.summary == "NYSE business days T+2 06:00 America/New_York, partitioned"
    assert "partition key is the day D as '%Y-%m-%d'" in timetable.description
    assert "no data interval" in timetable.description


# --- preview CLI: each run's key ---------------------------------------------------------------------------

PREVIEW_DAG_FILE = """
import pendulum
from airflow import DAG
from airflow_smart_ext.timetables import BusinessDaysTimetable

with DAG(
    dag_id="partitioned_nyse",
    schedule=BusinessDaysTimetable(market="NYSE", lag=2, timezone="America/New_York", partitioned=True),
    start_date=pendulum.datetime(2026, 1, 1, tz="America/New_York"),
):
    pass
"""


@needs_partitions
def test_preview_shows_each_runs_partition_key(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_smart_ext import preview

    dag_file = tmp_path / "partitioned_nyse.py"
    dag_file.write_text(PREVIEW_DAG_FILE)
    argv = [str(dag_file), "--at", "2026-07-02T12:00", "-p", "1", "-n", "3"]
    assert preview.main([*argv, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    runs = shown["previous"] + shown["next"]
    assert shown["partitioned"] is True
    # T+2: 06-30 ran at 07-02 00:00 (the latest due at 07-02 12:00); 07-03 is a holiday
    assert [r["partition_key"] for r in runs] == ["2026-06-30", "2026-07-01", "2026-07-02", "2026-07-06"]
    assert [r["run_after"][:10] for r in runs] == ["2026-07-02", "2026-07-06", "2026-07-07", "2026-07-08"]
    assert all(r["data_interval_start"] is None and r["logical_date"] is None for r in runs)
    assert runs[3]["partition_date"] == "2026-07-06T00:00:00-04:00"
    assert preview.main(argv) == 0
    text = capsys.readouterr().out
    assert "partition key" in text and "data interval" not in text.split("previous runs:")[1]
    assert "  Thu 2026-07-02  2026-07-02" in text
    assert "skipped Fri 2026-07-03: NYSE holiday: Independence Day (observed)" in text
