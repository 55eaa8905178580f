"""Preview a DAG's schedule: the next and previous runs, and why every day in between is skipped.

    python -m airflow_smart_ext.preview path/to/dag.py [dag_id] [-n 10] [-p 3] [--at 2026-12-24T12:00] [--json]

For each DAG of the file that uses one of this package's timetables (or only ``dag_id``): its summary,
then ``-p`` previous and ``-n`` next runs around ``--at`` (default: now) with the day D, the data interval
(partitioned timetables: the partition key) and the run time in the timetable's local time, and before
each run every skipped day with its reason — weekend, the holiday's name from the calendar, an extra
holiday, a closed market in an intersection.
Runs outside the DAG's ``start_date`` / ``end_date`` are not shown. ``--json`` prints the same as JSON.

The DAG file is imported as the dag-processor would (its top-level code runs); no database is used.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.calendars import (
    BusinessDayCalendar,
    CalendarSearchError,
    HolidayYearOutOfRange,
    MonthlyBusinessDay,
)
from airflow_smart_ext.timetables.engine import ScheduleEngine, Slot
from airflow_smart_ext.timetables.local_day import LocalDayTimetable

_ONE_DAY = datetime.timedelta(days=1)


class PreviewError(Exception):
    """A problem with the command line or the DAG file (printed without a traceback)."""


# --- loading DAGs ----------------------------------------------------------------------------------------


def load_dags(path: str) -> list[Any]:
    """Import the DAG file and return its DAGs as Airflow's DagBag finds them: every ``with DAG(...)`` block
    (Airflow's autoregistration; no variable needed) and every DAG a module-level name holds."""
    from airflow import DAG  # noqa: PLC0415 - Airflow only for the CLI, not for importing this module

    file = Path(path)
    if not file.is_file():
        raise PreviewError(f"dag file: {path!r} does not exist or is not a file.")
    name = f"smart_ext_preview_{abs(hash(file.resolve()))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise PreviewError(f"dag file: cannot import {path!r} (not a Python file?).")
    module = importlib.util.module_from_spec(spec)
    context = compat.dag_parsing.dag_context()
    saved = context.autoregistered_dags, context.current_autoregister_module_name
    context.autoregistered_dags, context.current_autoregister_module_name = set(), name
    sys.modules[name] = module  # autoregistration looks the module up by name
    sys.path.insert(0, str(file.resolve().parent))  # as the dag-processor does for the dags folder
    try:
        spec.loader.exec_module(module)
        registered = [dag for dag, _module in context.autoregistered_dags]
    except Exception as err:  # the DAG file's own error (e.g. an invalid timetable argument): show it plainly
        raise PreviewError(f"dag file: importing {path} failed: {type(err).__name__}: {err}") from None
    finally:
        context.autoregistered_dags, context.current_autoregister_module_name = saved
        sys.modules.pop(name, None)
        sys.path.remove(str(file.resolve().parent))
    held = [value for value in vars(module).values() if isinstance(value, DAG)]
    dags = {id(dag): dag for dag in [*registered, *held]}
    return sorted(dags.values(), key=lambda dag: dag.dag_id)


def pick_dags(dags: Sequence[Any], dag_id: str | None, path: str) -> list[Any]:
    ours = [dag for dag in dags if isinstance(dag.timetable, LocalDayTimetable)]
    if dag_id is not None:
        chosen = [dag for dag in dags if dag.dag_id == dag_id]
        if not chosen:
            raise PreviewError(
                f"dag_id: no DAG {dag_id!r} in {path}; accepted: {', '.join(d.dag_id for d in dags) or '(none)'}."
            )
        if not ours or chosen[0] not in ours:
            raise PreviewError(
                f"dag_id: DAG {dag_id!r} uses {type(chosen[0].timetable).__name__}; the preview covers the "
                "airflow_smart_ext timetables only."
            )
        return chosen
    if not ours:
        found = ", ".join(f"{d.dag_id} ({type(d.timetable).__name__})" for d in dags) or "no DAGs"
        raise PreviewError(f"dag file: {path} has no DAG with an airflow_smart_ext timetable ({found}).")
    return ours


# --- computing the preview (pure: no Airflow) -------------------------------------------------------------


def _local(engine: ScheduleEngine, instant: datetime.datetime) -> datetime.datetime:
    return instant.astimezone(engine.tz)


def skipped_days(engine: ScheduleEngine, after: datetime.date, before: datetime.date) -> list[dict[str, Any]]:
    """The days strictly between two scheduled days, each with the calendar's reason. The open business days
    a monthly calendar does not choose are counted in one entry instead of listed one by one."""
    calendar = engine.calendar
    base = calendar.calendar if isinstance(calendar, MonthlyBusinessDay) else None
    skipped: list[dict[str, Any]] = []
    not_chosen: list[datetime.date] = []
    day = after + _ONE_DAY
    while day < before:
        if base is not None and base.contains(day):
            not_chosen.append(day)
        elif calendar.contains(day):  # scheduled by the calendar, but the zone skips that date entirely
            skipped.append(
                {"day": day.isoformat(), "reason": f"the local day does not exist in {engine.tz.key}"}
            )
        else:
            skipped.append({"day": day.isoformat(), "reason": calendar.explain(day) or "not scheduled"})
        day += _ONE_DAY
    if not_chosen:
        skipped.append(
            {
                "days": len(not_chosen),
                "first": not_chosen[0].isoformat(),
                "last": not_chosen[-1].isoformat(),
                "reason": f"{len(not_chosen)} business days {calendar.explain(not_chosen[0])}",
            }
        )
    return skipped


def _run(timetable: LocalDayTimetable, slot: Slot) -> dict[str, Any]:
    engine = timetable.engine
    note = None
    calendar = engine.calendar
    if isinstance(calendar, MonthlyBusinessDay):
        calendar = calendar.calendar
    if isinstance(calendar, BusinessDayCalendar):
        note = calendar.working_note(slot.day)
    run: dict[str, Any] = {
        "day": slot.day.isoformat(),
        "weekday": slot.day.strftime("%a"),
        "partition_key": None,
        "partition_date": None,
        "logical_date": slot.start.isoformat(),
        "data_interval_start": _local(engine, slot.start).isoformat(),
        "data_interval_end": _local(engine, slot.end).isoformat(),
        "run_after": _local(engine, slot.run_after).isoformat(),
        "note": note,
    }
    if timetable.partitioned:  # as Airflow stores the run: a key and a date, no logical date or interval
        run.update(
            partition_key=timetable.partition_key(slot.day),
            partition_date=_local(engine, engine.day_start(slot.day)).isoformat(),
            logical_date=None,
            data_interval_start=None,
            data_interval_end=None,
        )
    return run


def preview(
    timetable: LocalDayTimetable,
    *,
    at: datetime.datetime,
    next_runs: int,
    previous_runs: int,
    start_date: datetime.datetime | None = None,
    end_date: datetime.datetime | None = None,
) -> dict[str, Any]:
    """Runs around ``at``: the ``previous_runs`` latest whose run time has passed and the ``next_runs``
    following, within [start_date, end_date] (bounds on the data interval start, as in Airflow)."""
    engine = timetable.engine

    def allowed(slot: Slot) -> bool:
        return (start_date is None or slot.start >= start_date) and (
            end_date is None or slot.start <= end_date
        )

    try:
        due: datetime.date | None = engine.due_day(at)
    except (RuntimeError, ValueError):
        due = None  # nothing due before ``at`` (e.g. before the calendar's first year)
    previous: list[Slot] = []
    day = due
    while day is not None and len(previous) < previous_runs:
        slot = engine.slot(day)
        if start_date is not None and slot.start < start_date:
            break
        if allowed(slot):
            previous.append(slot)
        try:
            day = engine.prev_day(day - _ONE_DAY)
        except (RuntimeError, ValueError):
            break
    previous.reverse()
    following: list[Slot] = []
    day = engine.next_day(due + _ONE_DAY) if due is not None else engine.next_day(engine.local_date(at))
    while len(following) < next_runs:
        slot = engine.slot(day)
        if end_date is not None and slot.start > end_date:
            break
        if allowed(slot):
            following.append(slot)
        day = engine.next_day(day + _ONE_DAY)
    runs = [_run(timetable, slot) for slot in previous + following]
    slots = previous + following
    for index, run in enumerate(runs):
        run["skipped_before"] = skipped_days(engine, slots[index - 1].day, slots[index].day) if index else []
    return {
        "timetable": type(timetable).__name__,
        "summary": timetable.summary,
        "description": timetable.description,
        "timezone": engine.tz.key,
        "partitioned": timetable.partitioned,
        "at": _local(engine, at).isoformat(),
        "previous": runs[: len(previous)],
        "next": runs[len(previous) :],
    }


# --- text output ---------------------------------------------------------------------------------------------


def _short(iso: str) -> str:
    """'2026-11-25T06:00:00-05:00' -> 'Wed 11-25 06:00 -05'."""
    moment = datetime.datetime.fromisoformat(iso)
    offset = moment.strftime("%z")
    offset = offset[:3] if offset.endswith("00") else f"{offset[:3]}:{offset[3:]}"
    seconds = f":{moment.second:02d}" if moment.second else ""
    return f"{moment.strftime('%a %m-%d %H:%M')}{seconds} {offset}"


def render_text(dag_id: str, result: dict[str, Any]) -> str:
    lines = [
        f"DAG {dag_id}: {result['timetable']}",
        f"  schedule: {result['summary']}",
        f"  {result['description']}",
        f"  times are local to {result['timezone']}; now/at: {_short(result['at'])}",
        "",
    ]
    middle = "partition key" if result["partitioned"] else "data interval"
    header = f"  {'day D':<15} {middle:<42} run at"
    for title, runs in (("previous runs", result["previous"]), ("next runs", result["next"])):
        lines.append(f"{title}:" if runs else f"{title}: none")
        if runs:
            lines.append(header)
        for run in runs:
            for skip in run["skipped_before"]:
                when = (
                    f"{skip['first']} .. {skip['last']}"
                    if "days" in skip
                    else datetime.date.fromisoformat(skip["day"]).strftime("%a %Y-%m-%d")
                )
                lines.append(f"      skipped {when}: {skip['reason']}")
            interval = (
                run["partition_key"]
                if result["partitioned"]
                else f"{_short(run['data_interval_start'])} -> {_short(run['data_interval_end'])}"
            )
            note = f"  ({run['note']})" if run["note"] else ""
            lines.append(f"  {run['weekday']} {run['day']}  {interval:<42} {_short(run['run_after'])}{note}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- command line ------------------------------------------------------------------------------------------------


def _parse_at(value: str | None, timetable: LocalDayTimetable) -> datetime.datetime:
    if value is None:
        return datetime.datetime.now(datetime.timezone.utc)
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise PreviewError(
            f"--at: {value!r} is not an ISO date/time; accepted: e.g. 2026-12-24 or 2026-12-24T18:00 (local "
            "time of the timetable's zone) or 2026-12-24T18:00+00:00."
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timetable.engine.tz)
    return moment.astimezone(datetime.timezone.utc)


def _count(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 1000:
        raise argparse.ArgumentTypeError(f"{name}: expected a whole number 0-1000, got {value!r}")
    return number


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_smart_ext.preview",
        description="Preview the runs of DAGs that use airflow_smart_ext timetables, with every skipped day "
        "and its reason.",
    )
    parser.add_argument("dag_file", help="path to the DAG file")
    parser.add_argument(
        "dag_id", nargs="?", help="only this DAG (default: every DAG of the file with our timetables)"
    )
    parser.add_argument(
        "-n", "--next", type=lambda v: _count("-n", v), default=10, help="next runs (default 10)"
    )
    parser.add_argument(
        "-p", "--previous", type=lambda v: _count("-p", v), default=3, help="previous runs (default 3)"
    )
    parser.add_argument("--at", help="preview around this moment instead of now (ISO; naive = local time)")
    parser.add_argument("--json", action="store_true", help="print JSON (one object per DAG, in a list)")
    args = parser.parse_args(argv)
    try:
        dags = pick_dags(load_dags(args.dag_file), args.dag_id, args.dag_file)
        results = []
        for dag in dags:
            timetable = dag.timetable
            result = preview(
                timetable,
                at=_parse_at(args.at, timetable),
                next_runs=args.next,
                previous_runs=args.previous,
                start_date=dag.start_date,
                end_date=dag.end_date,
            )
            results.append({"dag_id": dag.dag_id, **result})
    except PreviewError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (HolidayYearOutOfRange, CalendarSearchError) as err:  # e.g. --at beyond the holiday data
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("\n".join(render_text(r["dag_id"], r) for r in results), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
