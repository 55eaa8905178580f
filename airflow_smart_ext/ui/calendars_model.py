"""The Calendars view's data: for each DAG with one of our timetables, the preview CLI's content (next and
previous runs, every skipped day with its reason) and a month grid of the current and the next month.

``calendar_report`` works on a timetable alone (the runs and reasons come from ``preview.preview``, the CLI's
own computation); ``load_calendars`` is the glue reading serialized DAGs and their runs from the metadata DB.
"""

from __future__ import annotations

import calendar as stdlib_calendar
import datetime
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

from airflow_smart_ext import compat, units
from airflow_smart_ext.calendars import (
    BusinessCalendar,
    BusinessDayCalendar,
    CombinedCalendar,
    MonthlyBusinessDay,
)
from airflow_smart_ext.calendars.library import library_year
from airflow_smart_ext.preview import preview
from airflow_smart_ext.timetables import TIMETABLE_CLASSES, LocalDayTimetable
from airflow_smart_ext.ui.calendar_due import DueRule, due_rules, run_due_times

__all__ = ["calendar_report", "load_calendars", "month_grid"]

_UTC = datetime.timezone.utc
_ONE_DAY = datetime.timedelta(days=1)
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
CLASSPATHS = {f"{cls.__module__}.{cls.__qualname__}": cls for cls in TIMETABLE_CLASSES}
_TIMETABLES: dict[str, LocalDayTimetable] = {}  # stored timetable JSON -> timetable (its holiday caches stay)
_CACHE_SIZE = 1000
_MAX_NOTED = 3  # days off named in a run's note; more are counted


def _moment(now: datetime.datetime | float) -> datetime.datetime:
    if isinstance(now, datetime.datetime):
        return now.astimezone(_UTC)
    return units.utc(now)


def _local_iso(value: Any, tz: datetime.tzinfo) -> Any:
    return value.astimezone(tz).isoformat() if isinstance(value, datetime.datetime) else value


# --- the month grid ------------------------------------------------------------------------------------------


def _off_kind(reason: str) -> str:
    """The grid's class of a day off, from the calendar's reason: a holiday (named, or an extra one) wins over
    a weekend; anything else is 'closed' (calendar algebra, a day the zone skips)."""
    if "holiday" in reason:
        return "holiday"
    return "weekend" if "weekend" in reason else "closed"


def _cell(
    timetable: LocalDayTimetable,
    day: datetime.date,
    today: datetime.date,
    allowed: Callable[[datetime.date], bool],
) -> dict[str, Any]:
    engine = timetable.engine
    chosen = engine.calendar  # what picks day D: a business calendar, every day, or the nth business day
    base = chosen.calendar if isinstance(chosen, MonthlyBusinessDay) else chosen
    classes: list[str] = []
    notes: list[str] = []
    if isinstance(base, BusinessDayCalendar):
        reason = base.explain(day)
        if reason is None:
            classes.append("business")
            notes.append("business day")
            notes += [note for note in (base.working_note(day),) if note]
        else:
            classes.append(_off_kind(reason))
            notes.append(reason)
    if chosen.contains(day) and engine.exists(day) and allowed(day):
        classes.append("run")
        run_after = engine.run_after(day).astimezone(engine.tz)
        notes.append(f"run for this day at {run_after:%a %Y-%m-%d %H:%M %Z}")
    elif isinstance(chosen, MonthlyBusinessDay) and "business" in classes:
        notes.append(f"not the {chosen.label().removesuffix(' of the month')}")
    elif not engine.exists(day):
        classes.append("closed")
        notes.append(f"the local day does not exist in {engine.tz.key}")
    if day == today:
        classes.append("today")
    return {
        "date": day.isoformat(),
        "day": day.day,
        "classes": classes,
        "title": f"{day:%a %Y-%m-%d}: " + "; ".join(notes or ["no run"]),
    }


def _weekend_weekdays(calendar: Any, first: datetime.date, last: datetime.date) -> frozenset[int]:
    """The weekdays that are weekend days of ``calendar`` from ``first`` to ``last``: an explicit weekend, or
    the ``holidays`` library's per date (the UAE moved its weekend from Fri/Sat to Sat/Sun in 2022). Algebra
    follows the closed days: an intersection is closed on any part's weekend, a union on all parts' only."""
    if isinstance(calendar, MonthlyBusinessDay):
        return _weekend_weekdays(calendar.calendar, first, last)
    if isinstance(calendar, CombinedCalendar):
        parts = [_weekend_weekdays(part, first, last) for part in calendar.parts]
        if calendar.op == "intersection":
            return frozenset().union(*parts)
        return frozenset.intersection(*parts) if calendar.op == "union" else parts[0]
    if not isinstance(calendar, BusinessCalendar):
        return frozenset()  # every day: no weekend
    if calendar.weekend is not None:
        return frozenset(calendar.weekend)
    days = [first + datetime.timedelta(days=i) for i in range((last - first).days + 1)]
    return frozenset(
        day.weekday()
        for source in calendar.sources
        for day in days
        if day in library_year(source, day.year).weekend
    )


def week_start(weekend: Collection[int]) -> int:
    """The weekday a week starts on: the day after the weekend (after its longest run of days; Monday on a
    tie, and without a weekend). Sat/Sun -> Monday, Fri/Sat -> Sunday, Fri -> Saturday."""
    if not weekend or len(weekend) == 7:
        return 0

    def run_length(last: int) -> int:
        return next(n for n in range(1, 8) if (last - n) % 7 not in weekend)

    ends = [day for day in weekend if (day + 1) % 7 not in weekend]
    return (max(ends, key=lambda day: (run_length(day), day == 6)) + 1) % 7


def month_grid(
    timetable: LocalDayTimetable,
    today: datetime.date,
    months: int = 2,
    allowed: Callable[[datetime.date], bool] = lambda day: True,
) -> dict[str, Any]:
    """``months`` months from ``today``'s, each as weeks x 7 days (from the day after the calendar's weekend
    that month, ``weekdays`` naming the columns; None outside the month), every day classed business /
    holiday / weekend / closed, plus run (a run's day D) and today, titled with why."""
    grid = []
    year, month = today.year, today.month
    for _ in range(months):
        first = datetime.date(year, month, 1)
        last = datetime.date(year, month, stdlib_calendar.monthrange(year, month)[1])
        start = week_start(_weekend_weekdays(timetable.engine.calendar, first, last))
        weeks = stdlib_calendar.Calendar(firstweekday=start).monthdatescalendar(year, month)
        grid.append(
            {
                "year": year,
                "month": month,
                "title": first.strftime("%B %Y"),
                "weekdays": [WEEKDAYS[(start + i) % 7] for i in range(7)],
                "weeks": [
                    [_cell(timetable, day, today, allowed) if day.month == month else None for day in week]
                    for week in weeks
                ],
            }
        )
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return {"months": grid}


# --- one DAG's report ------------------------------------------------------------------------------------------


def _skipped(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The preview's skipped days before each run, by date; a range of business days not chosen is one entry."""
    skipped = []
    for run in runs:
        for skip in run["skipped_before"]:
            if "days" in skip:
                skipped.append(
                    {
                        "date": skip["first"],
                        "last": skip["last"],
                        "days": skip["days"],
                        "reason": skip["reason"],
                    }
                )
            else:
                skipped.append({"date": skip["day"], "reason": skip["reason"]})
    return sorted(skipped, key=lambda skip: skip["date"])


def _day(iso: str) -> str:
    return f"{datetime.date.fromisoformat(iso):%a %Y-%m-%d}"


def _notable(reason: str) -> bool:
    """A day off worth a run's note: a holiday or a day the zone skips (not a weekend, not calendar algebra,
    which would list every day a difference of calendars excludes)."""
    return "holiday" in reason or "does not exist" in reason


def _note(timetable: LocalDayTimetable, run: Mapping[str, Any]) -> str | None:
    """What is unusual about a run, as the model knows it: a make-up working day (the preview's note), the
    holidays (and days the zone skips) before it, the holidays a business-day lag moves its run day past,
    and a run time moved because its wall time does not exist in the zone. None for an ordinary run."""
    engine = timetable.engine
    day = datetime.date.fromisoformat(run["day"])
    notes = [run["note"]] if run["note"] else []
    days_off = [skip for skip in run["skipped_before"] if "day" in skip and _notable(skip["reason"])]
    if len(days_off) > _MAX_NOTED:  # a sparse calendar (e.g. a difference) skips months: count them
        first, last = _day(days_off[0]["day"]), _day(days_off[-1]["day"])
        notes.append(f"after {len(days_off)} holidays from {first} to {last} (see the skipped days)")
    else:
        notes += [f"after {_day(skip['day'])}: {skip['reason']}" for skip in days_off]
    run_day = engine.run_day(day)
    if engine.lag:
        between = (day + datetime.timedelta(days=i) for i in range(1, (run_day - day).days))
        notes += [
            f"runs on {run_day:%a %Y-%m-%d}, past {past:%a %Y-%m-%d}: {reason}"
            for past in between
            if (reason := engine.lag_calendar.explain(past)) and _notable(reason)
        ]
    planned = datetime.datetime.combine(run_day, datetime.time()) + engine.delay
    actual = datetime.datetime.fromisoformat(run["run_after"]).replace(tzinfo=None)
    if actual != planned:
        notes.append(f"runs at {actual:%a %H:%M}: {planned:%a %H:%M} does not exist in {engine.tz.key}")
    return "; ".join(notes) or None


def _empty_report(dag_id: str, error: str | None = None) -> dict[str, Any]:
    return {
        "dag_id": dag_id,
        "timetable": None,
        "summary": None,
        "description": None,
        "timezone": None,
        "partitioned": False,
        "generated_at": None,
        "next_runs": [],
        "previous_runs": [],
        "skipped": [],
        "month": {"months": []},
        "notice": None,
        "due_rules": [],
        "error": error,
    }


def _notice(
    report: Mapping[str, Any],
    at: datetime.datetime,
    start_date: datetime.datetime | None,
    end_date: datetime.datetime | None,
    runs: int,
    tz: datetime.tzinfo,
) -> str | None:
    """Why the grid and the next runs hold fewer runs than asked: a start_date in the future, an end_date."""
    next_runs = report["next_runs"]
    if start_date is not None and start_date > at:
        start = f"the DAG's start_date ({start_date.astimezone(tz):%Y-%m-%d %H:%M %Z}) is in the future"
        if not next_runs:
            return f"no run: {start} and its end_date is before its first run"
        first = datetime.datetime.fromisoformat(next_runs[0]["run_after"]).astimezone(tz)
        return f"first run on {first:%a %Y-%m-%d %H:%M %Z}: {start}"
    if end_date is not None and len(next_runs) < runs:
        end = f"{end_date.astimezone(tz):%Y-%m-%d %H:%M %Z}"
        if not next_runs:
            return f"no next run: the DAG's end_date ({end}) has passed"
        return f"last run for {_day(next_runs[-1]['day'])}: the DAG's end_date is {end}"
    return None


def calendar_report(
    dag_id: str,
    timetable: LocalDayTimetable,
    now: datetime.datetime | float,
    runs: int = 10,
    past: int = 5,
    *,
    start_date: datetime.datetime | None = None,
    end_date: datetime.datetime | None = None,
    previous_runs: Sequence[Mapping[str, Any]] | None = None,
    due: Sequence[DueRule] = (),
) -> dict[str, Any]:
    """One DAG's calendar around ``now``: ``runs`` next runs, the previous runs (``previous_runs``: the DAG's
    stored runs; None: the ``past`` latest scheduled ones), every skipped day with its reason, and the month
    grid. Times are ISO in the timetable's zone. ``due``: the DAG's waits' due times (``due_rules``), each next
    run with when its data is due by each (``due``: ISO in the rule's zone). A calendar that cannot be computed
    (e.g. holiday data ends) gives a report with ``error`` set instead of raising."""
    at = _moment(now)
    engine = timetable.engine
    report = _empty_report(dag_id)
    report.update(
        timetable=type(timetable).__name__,
        summary=timetable.summary,
        description=timetable.description,
        timezone=engine.tz.key,
        partitioned=timetable.partitioned,
        generated_at=at.astimezone(engine.tz).isoformat(),
        due_rules=[rule.to_dict() for rule in due],
    )

    def allowed(day: datetime.date) -> bool:  # as preview: the bounds apply to the data interval's start
        start = engine.slot(day).start
        return (start_date is None or start >= start_date) and (end_date is None or start <= end_date)

    try:
        result = preview(
            timetable, at=at, next_runs=runs, previous_runs=past, start_date=start_date, end_date=end_date
        )
        month = month_grid(timetable, engine.local_date(at), allowed=allowed)
    except (ValueError, RuntimeError) as err:  # HolidayYearOutOfRange, CalendarSearchError, no day found
        report["error"] = f"{type(err).__name__}: {err}"
        return report
    computed = result["previous"] + result["next"]
    report["next_runs"] = [
        {
            **{k: v for k, v in run.items() if k != "skipped_before"},
            "note": _note(timetable, run),
            "due": run_due_times(run, due),
        }
        for run in result["next"]
    ]
    report["previous_runs"] = (
        [{k: v for k, v in run.items() if k != "skipped_before"} for run in result["previous"]]
        if previous_runs is None
        else [{k: _local_iso(v, engine.tz) for k, v in run.items()} for run in previous_runs]
    )
    report["skipped"] = _skipped(computed)
    report["month"] = month
    report["notice"] = _notice(report, at, start_date, end_date, runs, engine.tz)
    return report


# --- reading the metadata DB ------------------------------------------------------------------------------------


def _timetable(encoded: Mapping[str, Any]) -> LocalDayTimetable:
    """A stored timetable (Airflow's ``{"__type", "__var"}`` form) deserialized by its own class, cached."""
    key = json.dumps(encoded, sort_keys=True)
    timetable = _TIMETABLES.get(key)
    if timetable is None:
        if len(_TIMETABLES) >= _CACHE_SIZE:
            _TIMETABLES.clear()
        stored = CLASSPATHS[encoded["__type"]].deserialize(dict(encoded["__var"]))
        timetable = _TIMETABLES[key] = cast(LocalDayTimetable, stored)  # each class builds its own kind
    return timetable


def _previous_runs(session: Any, dag_ids: Sequence[str], past: int) -> dict[str, list[dict[str, Any]]]:
    """The ``past`` latest runs of each DAG, oldest first (one query: ranked per DAG by a window function)."""
    if not dag_ids or past <= 0:
        return {}
    from airflow.models.dagrun import DagRun
    from sqlalchemy import func, select

    columns = compat.metadata_db.dag_run_columns()
    order = columns.get("run_after", columns["logical_date"])
    rank = func.row_number().over(partition_by=DagRun.dag_id, order_by=order.desc()).label("rank")
    ranked = (
        select(DagRun.dag_id.label("dag_id"), rank, *(column.label(name) for name, column in columns.items()))
        .where(DagRun.dag_id.in_(list(dag_ids)))
        .subquery()
    )
    query = select(ranked).where(ranked.c.rank <= past).order_by(ranked.c.dag_id, ranked.c.rank.desc())
    runs: dict[str, list[dict[str, Any]]] = {}
    for row in session.execute(query).mappings():
        run = {name: row[name] for name in columns}
        run["path"] = compat.web_urls.dag_page_path(row["dag_id"], row["run_id"])
        runs.setdefault(row["dag_id"], []).append(run)
    return runs


def _epoch_date(value: Any) -> datetime.datetime | None:
    """A serialized DAG's start/end date (epoch seconds on 2.11 and 3.x)."""
    return None if value is None else units.utc(float(value))


def load_calendars(
    session: Any, dag_ids: Collection[str] | None, now: datetime.datetime | float, runs: int, past: int = 5
) -> list[dict[str, Any]]:
    """The calendar report of every DAG (``dag_ids`` None: all; empty: none) whose serialized timetable is one
    of ours; only the timetable is deserialized. Each report has ``path``: Airflow's page of the DAG."""
    if dag_ids is not None and not dag_ids:
        return []
    found, unreadable = [], []
    for dag_id, stored, compressed in compat.metadata_db.latest_serialized_dags(session, dag_ids, CLASSPATHS):
        try:
            dag = compat.metadata_db.stored_dag(stored, compressed).get("dag", {})
        except Exception as err:  # one unreadable row must not hide every other DAG's calendar
            unreadable.append((dag_id, f"cannot read its serialized DAG: {type(err).__name__}"))
            continue
        encoded = dag.get("timetable") or {}
        if encoded.get("__type") in CLASSPATHS:
            found.append((dag_id, encoded, dag))
    previous = _previous_runs(session, [dag_id for dag_id, _, _ in found], past)
    reports = []
    for dag_id, encoded, dag in found:
        try:
            report = calendar_report(
                dag_id,
                _timetable(encoded),
                now,
                runs,
                past,
                start_date=_epoch_date(dag.get("start_date")),
                end_date=_epoch_date(dag.get("end_date")),
                previous_runs=previous.get(dag_id, []),
                due=due_rules(dag),
            )
        except Exception as err:  # stored by another release with arguments this one refuses: say so, go on
            report = _empty_report(dag_id, f"cannot read its timetable: {type(err).__name__}: {err}")
        reports.append({**report, "path": compat.web_urls.dag_page_path(dag_id)})
    reports += [
        {**_empty_report(dag_id, error), "path": compat.web_urls.dag_page_path(dag_id)}
        for dag_id, error in unreadable
    ]
    return reports
