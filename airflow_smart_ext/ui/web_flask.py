"""The Waits and Calendars views on Airflow 2.11's webserver, added to our blueprint (``ui.web_blueprint``).

Access is checked the way the webserver's own DAG list does: ``airflow.www.auth.has_access_view()`` (the
FAB session cookie ``session``; anonymous -> redirect to the login page (the JSON: 401), a user without
website access -> 403), then the auth manager's ``get_permitted_dag_ids`` limits the rows to the DAGs the user may read.
Imported when the webserver registers the blueprint; the webserver's modules are imported per request, where
they are already loaded.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from airflow_smart_ext import clock, compat
from airflow_smart_ext.conditions.runtime import connection_rate_limit
from airflow_smart_ext.ui import (
    airflow_style,
    filter_errors,
    waits_page,
    waits_report,
    waits_source,
    watchers_report,
)
from airflow_smart_ext.ui.web_common import CalendarsQuery, calendars_query, single_params


def _readable_dag_ids() -> set[str]:
    from airflow.www.extensions.init_auth_manager import get_auth_manager

    return get_auth_manager().get_permitted_dag_ids(methods=["GET"])


def _root() -> str:
    return request.script_root.rstrip("/")


def _waits_report() -> tuple[dict[str, Any], waits_report.WaitsQuery]:
    from airflow.utils.session import create_session

    # A refused filter is answered before any session: a rollback would expire the logged-in user, whom the
    # page's navbar reads.
    query = waits_report.WaitsQuery.from_params(single_params(request.args.items(multi=True)))
    readable = _readable_dag_ids()
    with create_session() as session:
        waits, now = waits_source.load_live_waits(session, readable), clock.now()
        triggerers = waits_source.load_triggerers(session, now)
        workers = waits_source.load_worker_waits(session, readable)
    report = waits_report.build_report(waits, query, now, connection_rate_limit(None), triggerers, workers)
    return watchers_report.add_watchers(report, [], triggerers, now), query  # 2.11 has no asset watchers


def _calendars() -> tuple[list[dict[str, Any]], CalendarsQuery]:
    from airflow.utils.session import create_session

    from airflow_smart_ext.ui import calendars_model

    query = calendars_query(single_params(request.args.items(multi=True)))  # before any session (above)
    dag_ids = _readable_dag_ids()
    if query.dag_id is not None:
        dag_ids &= {query.dag_id}
    with create_session() as session:
        return calendars_model.load_calendars(session, dag_ids, clock.now(), query.runs, query.past), query


def _require_login() -> Any:
    """Before every request: None when the user may use the website, else the webserver's own answer (the
    JSON answers an anonymous script with a 401, not with the login page's redirect)."""
    from airflow.www.auth import has_access_view
    from airflow.www.extensions.init_auth_manager import get_auth_manager

    if (
        request.endpoint in {f"{request.blueprint}.{view.__name__}" for view in _JSON_VIEWS}
        and not get_auth_manager().is_logged_in()
    ):
        return jsonify(detail="Not authenticated: log in to Airflow first"), 401
    return has_access_view()(lambda: None)()


#: Our page inside the webserver's own layout (its navbar, theme and footer), as its views render theirs.
_LAYOUT = """{% extends base_template %}
{% block page_title %}{{ page.title }} - {{ appbuilder.app_name }}{% endblock %}
{% block head_css %}{{ super() }}<style>{{ page.style | safe }}</style>{% endblock %}
{% block content %}<div class="smart-ext" data-default-timezone="{{ page.default_timezone or '' }}">
{{ page.body | safe }}</div>{% endblock %}
{% block tail_js %}{{ super() }}{{ page.scripts | safe }}{% endblock %}"""


def _in_airflow_layout(page: airflow_style.Page) -> str:
    """What ``AirflowBaseView.render_template`` passes a template: the app builder, its base template and
    Airflow's extra arguments (macros, the docs' URL, warnings)."""
    from airflow.www.views import AirflowBaseView
    from flask import current_app, render_template_string

    appbuilder = current_app.appbuilder  # type: ignore[attr-defined]
    return render_template_string(
        _LAYOUT,
        page=page,
        appbuilder=appbuilder,
        base_template=appbuilder.base_template,
        **AirflowBaseView.extra_args,
    )


def _default_timezone() -> str:
    """What 2.11's pages show times in when the browser has no timezone selected."""
    from airflow.configuration import conf

    return conf.get("webserver", "default_ui_timezone", fallback="UTC")


def _bad_query(error: waits_report.InvalidQuery) -> tuple[Response, int]:
    page = filter_errors.error_page(
        request.path, str(error), request.args.to_dict(), _default_timezone(), _in_airflow_layout
    )
    if page is not None:
        return Response(page, mimetype="text/html"), 400
    return jsonify(detail=str(error)), 400


def api_waits() -> Response:
    return jsonify(_waits_report()[0])


def waits() -> Response:
    report, query = _waits_report()
    root = _root()

    def link(row: Any) -> str:
        return compat.web_urls.task_page_url(
            root, row["dag_id"], row["run_id"], row["task_id"], row["map_index"]
        )

    page = waits_page.render_waits(report, query, link, _default_timezone(), _in_airflow_layout)
    return Response(page, mimetype="text/html")


def api_calendars() -> Response:
    return jsonify(_calendars()[0])


def calendars() -> Response:
    from airflow_smart_ext.ui import calendars_page

    reports, query = _calendars()
    page = calendars_page.render_calendars(reports, _root(), query, _in_airflow_layout)
    return Response(page, mimetype="text/html")


_JSON_VIEWS = (api_waits, api_calendars)


def add_views(blueprint: Blueprint) -> None:
    """The pages and their JSON, below the blueprint's ``/smart-ext``; every request needs a login."""
    blueprint.before_request(_require_login)
    blueprint.register_error_handler(waits_report.InvalidQuery, _bad_query)
    for path, view in (
        ("/waits", waits),
        ("/api/waits", api_waits),
        ("/calendars", calendars),
        ("/api/calendars", api_calendars),
    ):
        blueprint.add_url_rule(path, view_func=view, methods=["GET"])
