"""The Waits page: a self-contained HTML page (no external assets) from ``waits_model.build_report``.

Pure: the web glue passes ``links`` (a row -> the URL of Airflow's own page of that task instance), because
that URL's shape depends on the Airflow version and where Airflow is served. Every value is HTML-escaped.
Links to Airflow's pages leave the frame the page is shown in on Airflow 3.1+ (``FRAME_LINKS_SCRIPT``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from airflow_smart_ext import units
from airflow_smart_ext.ui import airflow_style, worker_rows
from airflow_smart_ext.ui.waits_report import DEFAULT_LIMIT, SORTS, WaitsQuery
from airflow_smart_ext.ui.web_common import FRAME_LINKS_SCRIPT
from airflow_smart_ext.wait_model import last_check

TaskLink = Callable[[Mapping[str, Any]], str]

STYLE = airflow_style.scoped("""
table{border-collapse:collapse;margin:.5rem 0 1.5rem}
th,td{border:1px solid var(--line);padding:.25rem .5rem;text-align:left;vertical-align:top;font-size:.85rem}
th{background:var(--head)} td.num{text-align:right} code{white-space:pre-wrap;word-break:break-word}
form label{margin-right:.75rem} .over{color:var(--bad);font-weight:bold} tr.unserved td{background:var(--bad-bg)}
""")


def _text(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _rate(value: float | None, digits: int = 1) -> str:
    """A rate for reading (the JSON keeps the exact figure)."""
    return "" if value is None else f"{value:,.{digits}f}"


def _when(iso: str | None, seconds: float | None) -> str:
    if iso is None:
        return '<span class="muted">none</span>'
    return f'{airflow_style.ui_time(iso)}<br><span class="muted">{units.relative_text(seconds)}</span>'


def _shared_with(count: int) -> str:
    """The wait's group, itself included: 1 means it shares its check with no other wait."""
    return "alone" if count <= 1 else f"{count} waits"


def _table(table_id: str, headers: Sequence[str], rows: list[str], empty: str) -> str:
    head = "".join(f"<th>{_text(header)}</th>" for header in headers)
    body = "".join(rows) or f'<tr class="empty"><td colspan="{len(headers)}">{_text(empty)}</td></tr>'
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


WAIT_HEADERS = (
    "Task",
    "Path",
    "Condition",
    "Shared with",
    "Checks made",
    "Served by",
    "Next check",
    "Deadline",
    "Due",
    "Last outcome",
)


def _served_by(row: Mapping[str, Any]) -> str:
    """Who serves the wait (its triggerer job, host and heartbeat age), or why nothing does."""
    served, reason = row["served_by"], row["unserved_reason"]
    placed = ", ".join(
        f"{name} {_text(row[key])}"
        for name, key in (("queue", "trigger_queue"), ("team", "trigger_team"))
        if row[key]
    )
    placed = f'<br><span class="muted">{placed}</span>' if placed else ""
    if reason is not None:
        return f'<span class="over">not served</span><br>{_text(reason)}' + placed
    if row.get("worker_host"):  # a check running in a worker (poke mode)
        return f"a worker on {_text(row['worker_host'])}"
    if served is None:
        return '<span class="muted">unknown</span>' + placed
    age = served["heartbeat_age"]
    return (
        f"triggerer job {_text(served['job_id'])}"
        + (f" on {_text(served['hostname'])}" if served["hostname"] else "")
        + (f'<br><span class="muted">heartbeat {units.relative_text(-age)}</span>' if age is not None else "")
        + placed
    )


def _next_check(row: Mapping[str, Any]) -> str:
    """An unserved wait is checked only once a triggerer takes it: its schedule is not when that happens."""
    estimate = "" if row.get("next_check_exact", True) else '<br><span class="muted">(estimate)</span>'
    if row["path"] == worker_rows.WORKER and row["next_check"] is None:
        return '<span class="muted">in the worker (its own poke_interval)</span>'
    if row["unserved_reason"] is None:
        return _when(row["next_check"], row["next_check_in"]) + estimate
    planned = f"<br>{_when(row['next_check'], row['next_check_in'])}" if row["next_check"] else ""
    return (
        '<span class="over">when a triggerer picks it up</span>'
        + (f'<br><span class="muted">its schedule says:</span>{planned}' if planned else "")
        + estimate
    )


def _last_outcome(row: Mapping[str, Any]) -> str:
    """The last check's outcome as the triggerer recorded it (kind, error class, errors in a row, since when
    and when checked, in the UI's timezone), or the row's words when none is recorded."""
    record = row.get("last_check")
    if record is None:
        return f'<span class="muted">{_text(row["last_outcome"])}</span>'
    bad = record["outcome"] in ("transient error", "error")
    reason = f' title="{_text(record["reason"])}"' if record.get("reason") else ""
    return (
        f'<span class="last-outcome{" over" if bad else ""}"{reason}>{_text(last_check.words(record))}</span>'
        f"<br>since {airflow_style.ui_time(record['since'])}"
        f'<br><span class="muted">checked {airflow_style.ui_time(record["at"])}</span>'
    )


# late_alerted: sent, said at the next check, or not known (a worker-side wait before 3.3: its log says)
_ALERTED = {True: "alert sent", False: "alert at its next check", None: "alert: see the task's log"}


def _due(row: Mapping[str, Any]) -> str:
    """When its data is due (``due=``), and how late it is while it still waits (alert sent or not yet)."""
    if row.get("due") is None:
        return '<span class="muted">-</span>'
    if row.get("late_by") is None:
        return _when(row["due"], row["due_in"])
    told = row.get("late_alerted")
    alerted = _ALERTED[None if told is None else bool(told)]
    return (
        f'{airflow_style.ui_time(row["due"])}<br><span class="over late">late by '
        f"{_text(units.duration_text(row['late_by']))}</span>"
        f'<br><span class="muted">({_text(alerted)})</span>'
    )


def _deadline(row: Mapping[str, Any]) -> str:
    if row["path"] in worker_rows.PATHS:  # a sensor's timeout is not in its serialized task
        return '<span class="muted">its timeout (not known here)</span>'
    by = f'<br><span class="muted">({_text(row["deadline_by"])})</span>' if row.get("deadline_by") else ""
    return _when(row["deadline"], row["deadline_in"]) + by


def _wait_row(row: Mapping[str, Any], links: TaskLink) -> str:
    attributes = {
        "data-dag-id": row["dag_id"],
        "data-run-id": row["run_id"],
        "data-task-id": row["task_id"],
        "data-map-index": row["map_index"],
        "data-next-check": row["next_check"] or "",
        "data-deadline": row["deadline"] or "",
        "data-deadline-by": row.get("deadline_by") or "",
        "data-path": row["path"],
        "data-sharing-key": row["sharing_key_hash"] or "",
        "data-shared-with": row["shared_with"],
        "data-served-by": (row["served_by"] or {}).get("job_id", ""),
        "data-unserved-reason": row["unserved_reason"] or "",
        "data-last-outcome": (row["last_check"] or {}).get("outcome", ""),
        "data-due": row.get("due") or "",
        "data-late-by": "" if row.get("late_by") is None else row["late_by"],
    }
    attrs = " ".join(f'{name}="{_text(value)}"' for name, value in attributes.items())
    attrs += ' class="unserved"' if row["unserved_reason"] is not None else ""
    mapped = f" [{row['map_index']}]" if row["map_index"] >= 0 else ""
    task = (
        f'<a href="{_text(links(row))}" target="_top">'
        f"{_text(row['dag_id'])} / {_text(row['task_id'])}{mapped}</a>"
        f'<br><span class="muted"><span class="id">{_text(row["run_id"])}</span> (try {_text(row["try_number"])})</span>'
    )
    cells = (
        task,
        _text(row["path"]),
        f"<code>{_text(row['condition'])}</code>",
        f'<td class="num">{_shared_with(row["shared_with"])}',
        f'<td class="num">{_text("-" if row["checks_made"] is None else row["checks_made"])}',
        _served_by(row),
        _next_check(row),
        _deadline(row),
        _due(row),
        _last_outcome(row),
    )
    tds = "".join(cell if cell.startswith("<td") else f"<td>{cell}" for cell in cells)
    return f"<tr {attrs}>{tds}</tr>"


WATCHER_HEADERS = (
    "Asset",
    "Watcher",
    "Condition",
    "Polls",
    "Last value",
    "Last event",
    "Last outcome",
    "Due",
    "Served by",
)


def _json_text(value: Any) -> str:
    return _text(json.dumps(value, default=str))


def _watcher_row(row: Mapping[str, Any]) -> str:
    attributes = {
        "data-asset": row["asset"],
        "data-watcher": row["watcher"],
        "data-last-seq": "" if row["last_seq"] is None else row["last_seq"],
        "data-last-event-seq": "" if row["last_event_seq"] is None else row["last_event_seq"],
        "data-served-by": (row["served_by"] or {}).get("job_id", ""),
        "data-unserved-reason": row["unserved_reason"] or "",
        "data-last-outcome": (row["last_check"] or {}).get("outcome", ""),
        "data-late-by": "" if row.get("late_by") is None else row["late_by"],
    }
    attrs = " ".join(f'{name}="{_text(value)}"' for name, value in attributes.items())
    attrs += ' class="unserved"' if row["unserved_reason"] is not None else ""
    if row["last_seq"] is not None:  # 3.3+: the watermark the watcher keeps
        last = f"#{_text(row['last_seq'])}: <code>{_json_text(row['last_value'])}</code>"
        if row["handing_over"] is not None:
            last += (
                f'<br><span class="muted">handing over <code>{_json_text(row["handing_over"])}</code></span>'
            )
        if row["watermark_updated_at"]:
            last += (
                f'<br><span class="muted">written {airflow_style.ui_time(row["watermark_updated_at"])}</span>'
            )
    else:
        last = '<span class="muted">none kept (Airflow &lt; 3.3 keeps no watermark)</span>'
    if row["last_event_at"] is None:
        event = '<span class="muted">none yet</span>'
    else:
        event = airflow_style.ui_time(row["last_event_at"])
        if row["last_event_seq"] is not None:
            event += (
                f"<br>#{_text(row['last_event_seq'])}: <code>{_json_text(row['last_event_value'])}</code>"
            )
            event += " (sent again after a restart)" if row["last_event_redelivered"] else ""
        else:
            event += '<br><span class="muted">not from this watcher</span>'
    cells = (
        f'{_text(row["asset"])}<br><span class="muted id">{_text(row["asset_uri"])}</span>',
        f'<span class="id">{_text(row["watcher"])}</span>'
        if row["watcher"] is not None
        else '<span class="muted">(Airflow &lt; 3.2 keeps no name)</span>',
        f"<code>{_text(row['condition'])}</code>",
        _text(row["polls"]),
        last,
        event,
        _last_outcome(row),
        _due(row)
        + (f'<br><span class="muted">{_text(row["due_rule"])}</span>' if row.get("due_rule") else ""),
        _served_by(row),
    )
    return f"<tr {attrs}>{''.join(f'<td>{cell}' for cell in cells)}</tr>"


def _group_row(group: Mapping[str, Any]) -> str:
    return (
        f'<tr data-sharing-key="{_text(group["sharing_key_hash"])}" data-tasks="{_text(group["tasks"])}">'
        f"<td><code>{_text(group['condition'])}</code></td><td class=num>{_text(group['tasks'])}</td>"
        f"<td class=num>{_rate(group['checks_per_hour_unshared'])}</td>"
        f"<td class=num>{_rate(group['checks_per_hour_shared'])}</td></tr>"
    )


def _connection_row(connection: Mapping[str, Any]) -> str:
    limit = connection["rate_limit"]
    over = limit is not None and connection["checks_per_second"] > limit
    return (
        f'<tr data-conn-id="{_text(connection["conn_id"])}"><td>{_text(connection["conn_id"])}</td>'
        f'<td class="num{" over" if over else ""}">{_rate(connection["checks_per_second"], 3)}</td>'
        f"<td class=num>{_text('none' if limit is None else limit)}</td></tr>"
    )


FORM_FIELDS = ("dag_id", "conn_id", "sensor_class", "due_within", "sort", "limit", "late")


def _filter_form(asked: Mapping[str, Any]) -> str:
    """The filters as asked (a refused value too, so that it can be corrected); the limit rides along."""

    def field(name: str, label: str) -> str:
        return f'<label>{label} <input name="{name}" value="{_text(asked.get(name))}" size="18"></label>'

    options = "".join(
        f'<option value="{sort}"{" selected" if sort == asked.get("sort") else ""}>'
        f"{sort.replace('_', ' ')}</option>"
        for sort in SORTS
    )
    limit = asked.get("limit")
    return (
        '<form method="get" id="filters">'
        + field("dag_id", "DAG")
        + field("conn_id", "Connection")
        + field("sensor_class", "Sensor class")
        + field("due_within", "Due within (s)")
        + f'<label>Sort by <select name="sort">{options}</select></label>'
        + '<label>Late <select name="late">'
        + "".join(
            f'<option value="{value}"{" selected" if str(asked.get("late")).lower() == value else ""}>{label}'
            "</option>"
            for value, label in (("false", "any"), ("true", "late only"))
        )
        + "</select></label>"
        + (f'<input type="hidden" name="limit" value="{_text(limit)}">' if limit is not None else "")
        + '<button type="submit">Filter</button> <a href="?">clear</a></form>'
    )


def json_link(query: WaitsQuery) -> str:
    """The JSON of what the page shows (its filters, sort and limit), opened in a new tab: inside Airflow 3's
    frame, raw JSON would replace the page (``FRAME_LINKS_SCRIPT`` opens it from the top page)."""
    asked = {
        name: str(value).lower() if isinstance(value, bool) else value
        for name, value in dataclasses.asdict(query).items()
        if value is not None and value is not False
    }
    return f"api/waits?{urlencode(asked)}"


def _page(body: str, default_timezone: str | None, layout: airflow_style.Layout) -> str:
    scripts = FRAME_LINKS_SCRIPT + airflow_style.LOOK_SCRIPT
    return layout(airflow_style.Page("Waits", STYLE, f"<h1>Waits</h1>{body}", scripts, default_timezone))


def render_waits_error(
    message: str,
    params: Mapping[str, str],
    default_timezone: str | None = None,
    layout: airflow_style.Layout = airflow_style.standalone,
) -> str:
    """The page for a refused filter: what was wrong, above the form that still holds what was typed."""
    form = _filter_form(airflow_style.asked_values(params, FORM_FIELDS))
    return _page(airflow_style.filter_error(message) + form, default_timezone, layout)


def render_waits(
    report: Mapping[str, Any],
    query: WaitsQuery,
    links: TaskLink,
    default_timezone: str | None = None,
    layout: airflow_style.Layout = airflow_style.standalone,
) -> str:
    """The full page: summary, filters, the waits, the groups of shared checks and the connections' rates.
    ``default_timezone``: the UI's timezone when the browser has none selected (2.11's setting); ``layout``
    puts the page together (its own document, or inside 2.11's webserver layout)."""
    summary = report["summary"]
    shown = len(report["waits"])
    more = f" (first {shown} shown; raise the limit)" if shown < report["total"] else ""
    waits = [_wait_row(row, links) for row in report["waits"]]
    groups = [_group_row(group) for group in report["groups"]]
    connections = [_connection_row(connection) for connection in report["connections"]]
    unserved, unserved_watchers = summary["unserved"], summary.get("unserved_watchers", 0)
    counted = [
        f"{count} {noun}{'s' if count != 1 else ''}"
        for count, noun in ((unserved, "wait"), (unserved_watchers, "watcher"))
        if count
    ]
    alert = (
        f'<p id="unserved-alert" class="alert" role="alert">{_text(" and ".join(counted))} '
        "no live triggerer serves"
        + (" (no triggerer is alive)" if summary["live_triggerers"] == 0 else "")
        + ": nothing checks them until a triggerer takes them (see Served by).</p>"
        if counted
        else ""
    )
    late, late_watchers = summary.get("late", 0), summary.get("late_watchers", 0)
    if late or late_watchers:
        said = [
            f"{_text(count)} {noun if count == 1 else noun + 's'}"
            for count, noun in ((late, "wait"), (late_watchers, "watcher"))
            if count
        ]
        verb = "is" if late + late_watchers == 1 else "are"
        alert += (
            f'<p id="late-alert" class="alert" role="alert">{" and ".join(said)} {verb} past the due time and '
            "still waiting (see Due; filter: Late).</p>"
        )
    watchers = [_watcher_row(row) for row in report.get("watchers", ())]
    asked = dataclasses.asdict(query)
    if asked["limit"] == DEFAULT_LIMIT:
        del asked["limit"]
    return _page(
        f'<p id="summary">{_text(summary["waits"])} live waits{_text(more)} in {_text(summary["groups"])} '
        f"groups; checks per hour: {_rate(summary['checks_per_hour_unshared'])} without sharing, "
        f"{_rate(summary['checks_per_hour_shared'])} with sharing "
        f"({_rate(summary['checks_saved_per_hour'])} saved). Generated at "
        f"{airflow_style.ui_time(report['generated_at'])}. "
        f'<a class="json" href="{_text(json_link(query))}" target="_blank" rel="noopener">JSON</a></p>'
        + alert
        + _filter_form(asked)
        + _table("waits", WAIT_HEADERS, waits, "No live waits match.")
        + '<p class="muted">Checks made: the scheduled checks due so far (an estimate, not a count).</p>'
        + "<h2>Watchers</h2>"
        + _table("watchers", WATCHER_HEADERS, watchers, "No condition watcher (or you may not read assets).")
        + "<h2>Shared checks</h2>"
        + _table("groups", ("Condition", "Tasks", "Checks/h unshared", "Checks/h shared"), groups, "None.")
        + "<h2>Connections</h2>"
        + _table("connections", ("Connection", "Checks/s", "Rate limit (checks/s)"), connections, "None."),
        default_timezone,
        layout,
    )
