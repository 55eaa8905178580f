"""``python -m airflow_smart_ext.waits``: the Waits view in a terminal, read from Airflow's metadata DB.

For operators without the UI: the same rows, groups and connections as ``/smart-ext/api/waits`` (``--json``
prints exactly that report), with the same filters. Run it where ``airflow`` itself runs (same config).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_smart_ext import clock, units
from airflow_smart_ext.ui.query_params import InvalidQuery
from airflow_smart_ext.ui.waits_report import SORTS, WaitsQuery, build_report
from airflow_smart_ext.ui.watchers_report import add_watchers

CONDITION_WIDTH = 60  # the table cuts long conditions (``--json`` has them whole)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _when(seconds: float | None) -> str:
    return units.relative_text(seconds) or "-"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(header), *(len(row[i]) for row in rows)]) for i, header in enumerate(headers)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [headers, *rows]
    )


def _served_by(wait: Mapping[str, Any]) -> str:
    served = wait["served_by"]
    if wait["unserved_reason"] is not None:
        return "NOT SERVED !"
    if wait.get("worker_host"):  # a check running in a worker (poke mode)
        return f"worker@{wait['worker_host']}"
    if served is None:
        return "-"
    host = f"@{served['hostname']}" if served["hostname"] else ""
    placed = "".join(
        f" {name} {wait[f'trigger_{name}']}" for name in ("queue", "team") if wait[f"trigger_{name}"]
    )
    return f"job {served['job_id']}{host} ({_when(served['heartbeat_age'])}){placed}"


def _task(wait: Mapping[str, Any]) -> str:
    return wait["task_id"] + (f"[{wait['map_index']}]" if wait["map_index"] >= 0 else "")


# late_alerted: sent, due at the next check, or not known (a worker-side wait before 3.3: its log says)
_ALERTED = {True: "alerted", False: "alert due", None: "alert: see its log"}


def _due(wait: Mapping[str, Any]) -> str:
    """When its data is due (``due=``) and, still waiting after it, how late (and whether it alerted)."""
    if wait.get("due") is None:
        return "-"
    if wait.get("late_by") is None:
        return f"{_cell(wait['due'])} ({_when(wait['due_in'])})"
    told = wait.get("late_alerted")
    alerted = _ALERTED[None if told is None else bool(told)]
    return f"{_cell(wait['due'])} LATE by {units.duration_text(wait['late_by'])} ({alerted})"


def render_text(report: Mapping[str, Any]) -> str:
    """The report as terminal tables: waits, then groups, then connections and the summary."""
    waits = [
        [
            wait["dag_id"],
            wait["run_id"],
            _task(wait),
            wait["path"],
            _short(wait["condition"], CONDITION_WIDTH),
            str(wait["shared_with"]),
            _cell(wait["checks_made"]),
            _served_by(wait),
            # an unserved wait is checked only once a triggerer takes it, whatever its schedule says
            *(
                (
                    _cell(wait["next_check"]) + ("" if wait["next_check_exact"] else " ~"),
                    _when(wait["next_check_in"]),
                )
                if wait["unserved_reason"] is None
                else ("when a triggerer picks it up", "-")
            ),
            _when(wait["deadline_in"]),
            _due(wait),
            wait["last_outcome"],
        ]
        for wait in report["waits"]
    ]
    headers = [
        "DAG",
        "RUN",
        "TASK",
        "PATH",
        "CONDITION",
        "SHARED",
        "CHECKS",
        "SERVED BY (HEARTBEAT AGE)",
        "NEXT CHECK",
        "IN",
        "DEADLINE IN",
        "DUE",
    ]
    parts = [_table([*headers, "LAST OUTCOME"], waits)]
    shown = len(report["waits"])
    if shown < report["total"]:
        parts.append(f"({shown} of {report['total']} waits shown; raise --limit for more)")
    unserved = [wait for wait in report["waits"] if wait["unserved_reason"] is not None]
    if unserved:
        parts.append(
            "\n".join(
                f"NOT SERVED: {wait['dag_id']} {wait['run_id']} {_task(wait)}: {wait['unserved_reason']}"
                for wait in unserved
            )
        )
    groups = [
        [
            _short(group["condition"], CONDITION_WIDTH),
            str(group["tasks"]),
            f"{group['checks_per_hour_unshared']:g}",
            f"{group['checks_per_hour_shared']:g}",
        ]
        for group in report["groups"]
    ]
    parts.append(_table(["CONDITION", "TASKS", "CHECKS/H UNSHARED", "CHECKS/H SHARED"], groups))
    connections = [
        [item["conn_id"], f"{item['checks_per_second']:g}", _cell(item["rate_limit"])]
        for item in report["connections"]
    ]
    parts.append(_table(["CONNECTION", "CHECKS/S", "RATE LIMIT"], connections))
    watchers = [
        [
            watcher["asset"],
            _cell(watcher["watcher"]),
            _short(watcher["condition"], CONDITION_WIDTH),
            _cell(watcher["last_seq"] if watcher["last_seq"] is not None else watcher["last_event_seq"]),
            _short(
                json.dumps(
                    watcher["last_value"] if watcher["last_seq"] is not None else watcher["last_event_value"]
                ),
                30,
            ),
            _cell(watcher["last_event_at"]),
            watcher["last_outcome"],
            _due(watcher),
            _served_by(watcher),
        ]
        for watcher in report["watchers"]
    ]
    if watchers:
        headers = [
            "ASSET",
            "WATCHER",
            "CONDITION",
            "SEQ",
            "LAST VALUE",
            "LAST EVENT",
            "LAST OUTCOME",
            "DUE",
            "SERVED BY",
        ]
        parts.append(_table(headers, watchers))
    parts += [
        f"NOT SERVED: watcher {watcher['watcher']} on {watcher['asset']}: {watcher['unserved_reason']}"
        for watcher in report["watchers"]
        if watcher["unserved_reason"] is not None
    ]
    summary = report["summary"]
    if summary["unserved"]:
        parts.append(f"!! {summary['unserved']} waits no live triggerer serves !!")
    if summary["unserved_watchers"]:
        parts.append(f"!! {summary['unserved_watchers']} watchers no live triggerer serves !!")
    if summary.get("late_watchers"):
        parts.append(f"!! {summary['late_watchers']} watchers past their due time without a new value !!")
    parts.append(
        f"{summary['waits']} waits in {summary['groups']} groups: "
        f"{summary['checks_per_hour_shared']:g} checks/h "
        f"with sharing instead of {summary['checks_per_hour_unshared']:g} "
        f"({summary['checks_saved_per_hour']:g} saved); '~': estimated (templates rendered in the triggerer)."
    )
    return "\n\n".join(parts) + "\n"


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """Keep stdout for the report alone (``--json | jq``): Airflow's console logging writes to stdout -- to
    whatever ``sys.stdout`` is or to the stream it was configured with, by version -- and importing its
    models logs alembic's INFO lines. Both ways are sent to stderr while Airflow is used."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for stream in {sys.stdout, sys.__stdout__}:
            if stream is not None:
                stream.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_smart_ext.waits",
        description="Every live wait of airflow_smart_ext's deferrable sensors: its condition (secrets "
        "redacted), who shares it, checks made, the next check and the deadline.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON (the API's)")
    parser.add_argument("--dag-id", help="only this DAG")
    parser.add_argument("--conn-id", help="only checks on this connection")
    parser.add_argument("--sensor-class", help="only this sensor class (dotted path or class name)")
    parser.add_argument(
        "--due-within", metavar="S", help="only waits whose next check is due within S seconds"
    )
    parser.add_argument("--sort", help=f"one of {', '.join(SORTS)} (default next_check)")
    parser.add_argument("--limit", help="at most this many waits (1-100000, default 1000)")
    parser.add_argument("--late", action="store_true", help="only waits past their due time (due=)")
    args = parser.parse_args(argv)
    names = ("dag_id", "conn_id", "sensor_class", "due_within", "sort", "limit")
    params = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.late:
        params["late"] = "true"
    try:
        query = WaitsQuery.from_params(params)
    except InvalidQuery as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    with _logs_to_stderr():
        from airflow.utils.session import create_session

        from airflow_smart_ext.conditions.runtime import connection_rate_limit
        from airflow_smart_ext.ui.waits_source import load_live_waits, load_triggerers, load_worker_waits
        from airflow_smart_ext.ui.watchers_source import load_watchers

        with create_session() as session:
            waits = load_live_waits(session, None)  # every DAG: groups count all who share (as the JSON)
            watchers = load_watchers(session)
            now = clock.now()
            triggerers = load_triggerers(session, now)
            workers = load_worker_waits(session, None)
    report = build_report(waits, query, now, connection_rate_limit(None), triggerers, workers)
    add_watchers(report, watchers, triggerers, now, query)
    print(json.dumps(report, indent=2) if args.json else render_text(report), end="\n" if args.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
