"""The Calendars page: a self-contained HTML page (no external assets) from ``calendars_model`` reports.

Pure: one ``<section class="calendar" data-dag-id=...>`` per DAG inside ``#calendars`` with its month grid
(cells classed business / holiday / weekend / closed, run, today; the reason in ``title``), its next runs,
previous runs and skipped days; with its waits' due times (``due=``), each next run's "Data due". Every value
is HTML-escaped; links leave a frame with ``target="_top"`` (on Airflow 3.1+ the page is shown inside the UI's
iframe, where ``FRAME_LINKS_SCRIPT`` hands them to the UI).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from airflow_smart_ext.ui import airflow_style
from airflow_smart_ext.ui.pages import URL_PREFIX
from airflow_smart_ext.ui.web_common import FRAME_LINKS_SCRIPT, MAX_RUNS, CalendarsQuery

STYLE = (
    airflow_style.scoped("""
section.calendar{border-top:2px solid var(--line);padding-top:.5rem;margin-bottom:2rem}
table{border-collapse:collapse;margin:.5rem 0 1rem}
th,td{border:1px solid var(--line);padding:.25rem .5rem;text-align:left;vertical-align:top;font-size:.85rem}
th{background:var(--head)} .error{color:var(--bad);font-weight:bold} .notice{font-weight:bold}
.months{display:flex;flex-wrap:wrap;gap:1.5rem}
table.month td{width:2rem;text-align:center} table.month caption{font-weight:bold}
.business{background:var(--bg)} .weekend{background:#e2e8f0} .holiday{background:#fed7d7}
.closed{background:#fefcbf} .run{font-weight:bold;box-shadow:inset 0 -3px 0 #3182ce}
td.today{outline:2px solid var(--fg)} .legend span{display:inline-block;padding:0 .4rem;margin-right:.4rem}
""")
    + ":root.dark .smart-ext{.weekend{background:#4a5568} .holiday{background:#742a2a} .closed{background:#744210}}\n"
)


def _text(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _table(class_name: str, headers: Sequence[str], rows: list[str], empty: str) -> str:
    head = "".join(f"<th>{_text(header)}</th>" for header in headers)
    body = "".join(rows) or f'<tr class="empty"><td colspan="{len(headers)}">{_text(empty)}</td></tr>'
    return f'<table class="{class_name}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _time(iso: str | None) -> str:
    return "" if iso is None else f'<time datetime="{_text(iso)}">{_text(iso)}</time>'


def _interval(run: Mapping[str, Any]) -> str:
    if run.get("partition_key") is not None:
        return f"partition {_text(run['partition_key'])}"
    if run.get("data_interval_start") is None:
        return '<span class="muted">none</span>'
    return f"{_time(run['data_interval_start'])} &rarr; {_time(run.get('data_interval_end'))}"


def _month(month: Mapping[str, Any]) -> str:
    head = "".join(f"<th>{_text(day)}</th>" for day in month["weekdays"])
    rows = []
    for week in month["weeks"]:
        cells = (
            "<td></td>"
            if cell is None
            else f'<td class="{_text(" ".join(cell["classes"]))}" data-date="{_text(cell["date"])}" '
            f'title="{_text(cell["title"])}">{_text(cell["day"])}</td>'
            for cell in week
        )
        rows.append(f"<tr>{''.join(cells)}</tr>")
    key = f"{month['year']:04d}-{month['month']:02d}"
    return (
        f'<table class="month" data-month="{_text(key)}"><caption>{_text(month["title"])}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _task_attributes(due: Mapping[str, Any]) -> str:
    """The task (and mapped instance) a due time is for, as data attributes."""
    index = due.get("map_index")
    return f' data-task-id="{_text(due["task_id"])}"' + (
        "" if index is None else f' data-map-index="{index}"'
    )


def _due_cell(times: Sequence[Mapping[str, Any]]) -> str:
    """A run's due times: one line per wait with ``due=`` (its task id, then when, or why not)."""
    lines = []
    for due in times:
        when = (
            _time(due["due"]) if due.get("due") else f'<span class="error">{_text(due.get("error"))}</span>'
        )
        lines.append(f"<div{_task_attributes(due)}>{_text(due.get('label') or due['task_id'])}: {when}</div>")
    return f'<td class="due">{"".join(lines)}</td>'


def _next_runs(runs: Sequence[Mapping[str, Any]], with_due: bool) -> str:
    rows = [
        f'<tr data-day="{_text(run.get("day"))}"><td>{_text(run.get("weekday"))} {_text(run.get("day"))}</td>'
        f"<td>{_interval(run)}</td><td>{_time(run.get('run_after'))}</td>"
        + (_due_cell(run.get("due") or []) if with_due else "")
        + f"<td>{_text(run.get('note'))}</td></tr>"
        for run in runs
    ]
    headers = ("Day D", "Data interval", "Runs at", *(("Data due",) if with_due else ()), "Note")
    return _table("next-runs", headers, rows, "no next run")


def _due_rules(rules: Sequence[Mapping[str, Any]]) -> str:
    """Each wait's due time in words (``due=``), or why it cannot be read."""
    items = "".join(
        f"<li{_task_attributes(rule)}><strong>{_text(rule.get('label') or rule['task_id'])}</strong>: "
        + (
            _text(rule["rule"])
            if rule.get("rule")
            else f'<span class="error">{_text(rule.get("error"))}</span>'
        )
        + "</li>"
        for rule in rules
    )
    intro = '<p class="muted">Data due (<code>due=</code>), in each rule&#39;s own zone:</p>'
    return f'{intro}<ul class="due-rules">{items}</ul>'


def _previous_runs(runs: Sequence[Mapping[str, Any]], base_url: str) -> str:
    rows = []
    for run in runs:
        if run.get("run_id") is not None:  # a stored run: a link to Airflow's own page of it
            name = f'<a href="{_text(base_url + run["path"])}" target="_top">{_text(run["run_id"])}</a>'
            when = run.get("run_after") or run.get("logical_date") or run.get("start_date")
        else:  # computed from the schedule
            name, when = f"{_text(run.get('weekday'))} {_text(run.get('day'))}", run.get("run_after")
        rows.append(
            f'<tr><td>{name}</td><td class="state">{_text(run.get("state"))}</td><td>{_interval(run)}</td>'
            f"<td>{_time(when)}</td></tr>"
        )
    return _table("previous-runs", ("Run", "State", "Data interval", "Run after"), rows, "no previous run")


def _skipped(skipped: Sequence[Mapping[str, Any]]) -> str:
    if not skipped:
        return '<p class="muted">No day skipped between these runs.</p>'
    items = []
    for skip in skipped:
        when = _text(skip["date"]) + (f" &ndash; {_text(skip['last'])}" if skip.get("last") else "")
        items.append(f'<li data-date="{_text(skip["date"])}">{when}: {_text(skip["reason"])}</li>')
    return f'<ul class="skipped">{"".join(items)}</ul>'


def _section(report: Mapping[str, Any], base_url: str) -> str:
    dag_id = report["dag_id"]
    title = _text(dag_id)
    if report.get("path"):
        title = f'<a href="{_text(base_url + report["path"])}" target="_top">{title}</a>'
    parts = [f"<h2>{title}</h2>"]
    if report.get("summary"):
        parts.append(
            f'<p class="summary"><strong>{_text(report["summary"])}</strong> ({_text(report["timetable"])})</p>'
            f'<p class="muted">{_text(report["description"])} Times are local to {_text(report["timezone"])}.</p>'
        )
    if report.get("error"):
        parts.append(f'<p class="error">{_text(report["error"])}</p>')
    if report.get("notice"):
        parts.append(f'<p class="notice">{_text(report["notice"])}</p>')
    month = report.get("month") or {}
    if month.get("months"):
        tables = "".join(_month(m) for m in month["months"])
        parts.append(f'<div class="months">{tables}</div>')
    if not report.get("error"):
        rules = report.get("due_rules") or []
        parts += [
            "<h3>Next runs</h3>",
            *([_due_rules(rules)] if rules else []),
            _next_runs(report["next_runs"], with_due=bool(rules)),
            "<h3>Previous runs</h3>",
            _previous_runs(report["previous_runs"], base_url),
            "<h3>Skipped days</h3>",
            _skipped(report["skipped"]),
        ]
    return f'<section class="calendar" data-dag-id="{_text(dag_id)}">{"".join(parts)}</section>'


LEGEND = (
    '<p class="legend"><span class="business">business day</span><span class="weekend">weekend</span>'
    '<span class="holiday">holiday</span><span class="closed">closed (calendar algebra)</span>'
    '<span class="run">run (day D)</span> &mdash; hover a day for its reason.</p>'
)


FORM_FIELDS = ("dag_id", "runs", "past")


def _form(asked: Mapping[str, Any]) -> str:
    """The filter form, showing what was asked (an empty DAG id: every DAG; a refused value as typed)."""
    return (
        f'<form method="get"><label>DAG id <input name="dag_id" value="{_text(asked.get("dag_id"))}"></label> '
        f'<label>Next runs <input name="runs" type="number" min="1" max="{MAX_RUNS}" '
        f'value="{_text(asked.get("runs"))}"></label> '
        f'<label>Previous runs <input name="past" type="number" min="0" max="{MAX_RUNS}" '
        f'value="{_text(asked.get("past"))}"></label> <button type="submit">Show</button></form>'
    )


def _page(body: str, layout: airflow_style.Layout) -> str:
    main = f'<main id="calendars"><h1>Calendars</h1>{body}</main>'
    return layout(
        airflow_style.Page("Calendars", STYLE, main, FRAME_LINKS_SCRIPT + airflow_style.LOOK_SCRIPT)
    )


def render_calendars_error(
    message: str, params: Mapping[str, str], layout: airflow_style.Layout = airflow_style.standalone
) -> str:
    """The page for a refused filter: what was wrong, above the form that still holds what was typed."""
    return _page(
        airflow_style.filter_error(message) + _form(airflow_style.asked_values(params, FORM_FIELDS)), layout
    )


def render_calendars(
    reports: Sequence[Mapping[str, Any]],
    base_url: str,
    query: CalendarsQuery,
    layout: airflow_style.Layout = airflow_style.standalone,
) -> str:
    """The whole page; ``base_url`` is where Airflow is served (links to its DAG and run pages, our JSON);
    ``query`` what was asked (the form shows it, the JSON link asks the same)."""
    sections = "".join(_section(report, base_url) for report in reports) or (
        '<p class="empty">No DAG you may read uses an airflow-smart-ext timetable.</p>'
    )
    asked = urlencode({name: value for name, value in query._asdict().items() if value is not None})
    api = _text(f"{base_url}{URL_PREFIX}/api/calendars?{asked}")
    return _page(
        f'<p class="muted">{len(reports)} DAG(s) with airflow-smart-ext timetables. '
        f'<a class="json" href="{api}" target="_blank" rel="noopener">JSON</a></p>'
        f"{_form(query._asdict())}{LEGEND}{sections}",
        layout,
    )
