"""The Waits page and the web glue (issue 26), without a browser.

The page is pure HTML from a report. The Airflow 3 app is exercised as the api-server serves it: the plugin's
registered app mounted at its ``url_prefix`` in a parent app, Airflow's own auth dependencies, a real auth
manager (the simple one, with one user restricted to some DAGs) and real JWTs; DAGs in a migrated SQLite DB.
On Airflow 2.11 the same through the webserver's Flask app: FAB users and roles, a login by the login form.
"""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Collection, Iterator
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.plugin import SmartExtPlugin
from airflow_smart_ext.ui import airflow_style, waits_source
from airflow_smart_ext.ui.airflow_style import LOOK_SCRIPT
from airflow_smart_ext.ui.query_params import InvalidQuery
from airflow_smart_ext.ui.serving import Triggerer, Triggerers
from airflow_smart_ext.ui.trigger_rows import LiveWait
from airflow_smart_ext.ui.waits_page import render_waits
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from airflow_smart_ext.ui.web_common import FRAME_LINKS_SCRIPT, airflow_root, calendars_query
from tests.unit.ui.helpers import NOW, sensor_check, sql_check, worker_first

needs_airflow_3 = pytest.mark.skipif(
    not compat.versions.AIRFLOW_V_3_0_PLUS, reason="the FastAPI app serves Airflow 3"
)


def _link(row: Any) -> str:
    return f"/task/{row['dag_id']}?run={row['run_id']}"


def _refusal(answer: Any, path: str) -> str:
    """What a 400 says: the JSON's detail, or on a page the inline error above its form."""
    if "/api/" in path:
        detail = answer.json() if hasattr(answer, "json") and callable(answer.json) else answer.get_json()
        return str(detail["detail"])
    text = answer.text if isinstance(answer.text, str) else answer.get_data(as_text=True)
    assert "text/html" in answer.headers["content-type"], text[:300]
    start = text.index('<p id="query-error" class="alert" role="alert">')
    message = text[start:].split(">", 1)[1].split("</p>", 1)[0]
    assert '<form method="get"' in text[start:], text  # the form follows, to correct the value
    return html.unescape(message)


def test_the_page_has_one_escaped_row_per_wait_and_the_tables() -> None:
    hostile = "<script>alert(1)</script>"
    waits = [
        worker_first(sql_check(), dag_id="d1", task_id="a"),
        worker_first(sql_check(), dag_id="d1", task_id="b"),
        worker_first(sensor_check(filepath=hostile), dag_id=f"d{hostile}", task_id="c"),
    ]
    report = build_report(waits, WaitsQuery(), NOW)
    page = render_waits(report, WaitsQuery(dag_id=hostile, sort="deadline"), _link)

    assert hostile not in page and html.escape(hostile) in page
    assert page.count("<tr data-dag-id=") == 3 and page.count('" target="_top">') == 3
    for row in report["waits"]:
        assert f'data-next-check="{row["next_check"]}"' in page
        assert f'href="{html.escape(_link(row))}"' in page
    assert 'data-sharing-key="' in page and 'data-tasks="2"' in page  # the two identical SQL checks
    assert '<table id="groups">' in page and '<table id="connections">' in page
    assert 'data-conn-id="warehouse"' in page
    assert f'name="dag_id" value="{html.escape(hostile)}"' in page
    assert '<option value="deadline" selected>' in page
    assert "http://" not in page and "https://" not in page  # no external assets
    # only our helpers: the frame's links and the look (theme, UI timezone)
    assert page.count("<script") == 2 and FRAME_LINKS_SCRIPT in page and LOOK_SCRIPT in page
    # the JSON link asks what the page shows, in a new tab (raw JSON would replace the page inside 3.x's frame)
    asked = urllib.parse.urlencode({"dag_id": hostile, "sort": "deadline", "limit": 1000})
    assert (
        f'<a class="json" href="{html.escape("api/waits?" + asked)}" target="_blank" rel="noopener">' in page
    )


def test_the_page_says_who_serves_each_wait_and_flags_the_unserved() -> None:
    live = Triggerer(7, "host-<a>", NOW - 4.0)
    waits = [
        worker_first(sql_check(), task_id="held", triggerer_id=7, holder=live, trigger_queue="default"),
        worker_first(sql_check("SELECT 2"), task_id="free"),
        worker_first(
            sql_check("SELECT 3"), task_id="dead", triggerer_id=5, holder=Triggerer(5, "h", NOW - 99)
        ),
    ]
    report = build_report(waits, WaitsQuery(), NOW, None, Triggerers(30.0, (live,)))
    page = render_waits(report, WaitsQuery(), _link)
    rows = {row["task_id"]: row for row in report["waits"]}

    assert '<p id="unserved-alert" class="alert" role="alert">2 waits no live triggerer serves:' in page
    assert "<th>Served by</th>" in page
    held = page[page.index('data-task-id="held"') :].split("</tr>")[0]
    assert 'data-served-by="7"' in held and 'class="unserved"' not in held
    assert (
        "triggerer job 7 on host-&lt;a&gt;" in held and "heartbeat 4s ago" in held and "queue default" in held
    )
    assert airflow_style.ui_time(rows["held"]["next_check"]) in held
    assert "when a triggerer picks it up" not in held
    for task_id in ("free", "dead"):
        row = page[page.index(f'data-task-id="{task_id}"') :].split("</tr>")[0]
        assert 'class="unserved"' in row and 'data-served-by=""' in row
        assert html.escape(rows[task_id]["unserved_reason"], quote=True) in row
        assert '<span class="over">when a triggerer picks it up</span>' in row  # not a healthy "in 53s"
    assert "last heartbeat 99s ago" in page
    alone = build_report(waits[:1], WaitsQuery(), NOW, None, Triggerers(30.0, (live,)))
    assert 'id="unserved-alert"' not in render_waits(alone, WaitsQuery(), _link)
    nobody = build_report(waits[1:2], WaitsQuery(), NOW, None, Triggerers(30.0, ()))
    assert "1 wait no live triggerer serves (no triggerer is alive)" in render_waits(
        nobody, WaitsQuery(), _link
    )


def test_an_empty_report_says_so() -> None:
    page = render_waits(build_report([], WaitsQuery(), NOW), WaitsQuery(), _link)
    assert "No live waits match." in page and "<tr data-dag-id=" not in page


def test_task_links_are_airflows_own_task_pages() -> None:
    url = compat.web_urls.task_page_url("/af", "d/1", "manual__2026-01-01T00:00:00+00:00", "t", 3)
    if compat.versions.AIRFLOW_V_3_0_PLUS:
        assert url == "/af/dags/d%2F1/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/t/mapped/3"
        assert compat.web_urls.task_page_url("", "d", "r", "t", -1) == "/dags/d/runs/r/tasks/t"
    else:
        assert url == (
            "/af/dags/d%2F1/grid?dag_run_id=manual__2026-01-01T00%3A00%3A00%2B00%3A00&task_id=t&map_index=3"
        )
    assert airflow_root("/base/smart-ext") == "/base" and airflow_root("/smart-ext") == ""


def test_calendars_parameters() -> None:
    assert calendars_query({}) == (None, 10, 5)
    assert calendars_query({"dag_id": "d", "runs": "3", "past": "0"}) == ("d", 3, 0)
    for bad, name in (({"runs": "0"}, "runs"), ({"runs": "x"}, "runs"), ({"month": "1"}, "month")):
        with pytest.raises(ValueError, match=name):
            calendars_query(bad)


def test_the_plugin_registers_the_views_this_airflow_can_show() -> None:
    if compat.versions.AIRFLOW_V_3_1_PLUS:
        assert [app["url_prefix"] for app in SmartExtPlugin.fastapi_apps] == ["/smart-ext"]
        views = {view["name"]: view for view in SmartExtPlugin.external_views}
        assert {name: view["href"] for name, view in views.items()} == {
            "Waits": "/smart-ext/waits",
            "Calendars": "/smart-ext/calendars",
        }
        assert all(view["category"] == "browse" and view["url_route"] for view in views.values())
        assert not SmartExtPlugin.flask_blueprints
    elif not compat.versions.AIRFLOW_V_3_0_PLUS:
        (blueprint,) = SmartExtPlugin.flask_blueprints
        assert blueprint.url_prefix == "/smart-ext" and not SmartExtPlugin.fastapi_apps
        items = {item["name"]: item for item in SmartExtPlugin.appbuilder_menu_items}
        assert {name: item["href"] for name, item in items.items()} == {
            "Waits": "/smart-ext/waits",
            "Calendars": "/smart-ext/calendars",
        }
        assert {item["category"] for item in items.values()} == {"Browse"}


# --- Airflow 3: the api-server app with Airflow's auth ----------------------------------------------------

DAGS = ("sales_daily", "sales_hourly", "hr_daily")


def fake_waits_source(monkeypatch: pytest.MonkeyPatch) -> list[Collection[str] | None]:
    """One wait per DAG in ``DAGS`` from a stand-in ``load_live_waits``; returns the DAG ids it was asked for
    (what the glue passed: the user's readable DAGs)."""
    asked: list[Collection[str] | None] = []

    def load_live_waits(session: Any, dag_ids: Collection[str] | None) -> list[LiveWait]:
        asked.append(dag_ids)
        waits = [worker_first(sql_check(), dag_id=dag_id, task_id="wait") for dag_id in DAGS]
        return [wait for wait in waits if dag_ids is None or wait.dag_id in dag_ids]

    monkeypatch.setattr(waits_source, "load_live_waits", load_live_waits)
    return asked


@pytest.fixture
def web(airflow_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A client of the plugin's app mounted as the api-server mounts it, tokens of two users, the DAG ids the
    waits source was asked for."""
    if not compat.versions.AIRFLOW_V_3_0_PLUS:
        pytest.skip("Airflow 2.11 has no api-server")
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sqlalchemy import delete

    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", f"{__name__}.SalesOnlyAuthManager")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "unit-test-secret-" + "x" * 64)
    # a fresh auth-manager singleton, undone after: 3.2+ hold it in ``_AuthManagerState``, 3.0/3.1 in a global
    if compat.versions.AIRFLOW_V_3_2_PLUS:
        monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)
    else:
        monkeypatch.setattr(airflow_app, "auth_manager", None)
    auth_manager = airflow_app.create_auth_manager()
    with create_session() as session:
        session.merge(DagBundleModel(name="ui-test"))
        session.flush()
        for dag_id in DAGS:
            session.merge(DagModel(dag_id=dag_id, bundle_name="ui-test", is_stale=False))

    asked = fake_waits_source(monkeypatch)
    parent = FastAPI()
    for registered in SmartExtPlugin.fastapi_apps:
        parent.mount(registered["url_prefix"], registered["app"])
    tokens = {
        name: auth_manager.generate_jwt(SimpleAuthManagerUser(username=name, role="VIEWER"))
        for name in ("admin_viewer", SalesOnlyAuthManager.RESTRICTED)
    }
    yield {"client": TestClient(parent), "tokens": tokens, "asked": asked}
    with create_session() as session:
        session.execute(delete(DagModel).where(DagModel.dag_id.in_(DAGS)))
        session.execute(delete(DagBundleModel).where(DagBundleModel.name == "ui-test"))


if compat.versions.AIRFLOW_V_3_0_PLUS:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class SalesOnlyAuthManager(SimpleAuthManager):
        """The simple auth manager, except that one user may read only the ``sales_*`` DAGs."""

        RESTRICTED = "sales_viewer"

        def is_authorized_dag(
            self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
        ) -> bool:
            restricted = user.get_name() == self.RESTRICTED and details is not None and details.id
            if restricted and not details.id.startswith("sales_"):
                return False
            return super().is_authorized_dag(
                method=method, user=user, access_entity=access_entity, details=details
            )


def _bearer(web: dict[str, Any], user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {web['tokens'][user]}"}


@needs_airflow_3
@pytest.mark.parametrize("path", ["/smart-ext/waits", "/smart-ext/api/waits", "/smart-ext/api/calendars"])
def test_no_login_no_data(web: dict[str, Any], path: str) -> None:
    client = web["client"]
    anonymous = client.get(path)
    assert anonymous.status_code == 401 and anonymous.json() == {"detail": "Not authenticated"}
    forged = client.get(path, headers={"Authorization": "Bearer not-a-jwt"})
    assert forged.status_code == 403
    assert web["asked"] == [] and "sales_daily" not in anonymous.text + forged.text


@needs_airflow_3
def test_a_logged_in_user_gets_the_json_by_header_or_the_ui_cookie(web: dict[str, Any]) -> None:
    client = web["client"]
    by_header = client.get("/smart-ext/api/waits", headers=_bearer(web, "admin_viewer"))
    assert by_header.status_code == 200, by_header.text
    assert sorted(row["dag_id"] for row in by_header.json()["waits"]) == sorted(DAGS)
    if not compat.versions.AIRFLOW_V_3_1_PLUS:
        return  # 3.0 reads the header only (its UI moves the ``_token`` cookie to localStorage, no iframes)
    # The UI's login sets the ``_token`` cookie; the UI shows our page in a same-origin iframe: it is sent.
    client.cookies.set("_token", web["tokens"]["admin_viewer"])
    by_cookie = client.get("/smart-ext/api/waits")
    assert by_cookie.status_code == 200 and by_cookie.json()["total"] == len(DAGS)


@needs_airflow_3
def test_a_restricted_user_sees_only_the_dags_it_may_read(web: dict[str, Any]) -> None:
    client, headers = web["client"], _bearer(web, SalesOnlyAuthManager.RESTRICTED)
    data = client.get("/smart-ext/api/waits", headers=headers).json()
    assert {row["dag_id"] for row in data["waits"]} == {"sales_daily", "sales_hourly"}
    assert set(web["asked"][-1]) == {"sales_daily", "sales_hourly"}  # filtered in the query, not after
    page = client.get("/smart-ext/waits", headers=headers)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text.count("<tr data-dag-id=") == 2 and "hr_daily" not in page.text
    assert 'href="/dags/sales_daily/runs/run/tasks/wait"' in page.text  # Airflow's own task page
    # Asking for a DAG the user may not read is refused, as Airflow's own DAG routes refuse it.
    assert client.get("/smart-ext/api/waits?dag_id=hr_daily", headers=headers).status_code == 403


@needs_airflow_3
@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("due_within=-1", "due_within"),
        ("sort=name", "sort"),
        ("limit=0", "limit"),
        ("limit=%C2%B2", "limit"),  # "²": a digit to str.isdigit, not to int()
        ("colour=red", "colour"),
        ("limit=1&limit=2", "'limit'"),
        ("dag_id=a%00b", "'dag_id'"),  # checked before Airflow's access check reads it
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(web: dict[str, Any], query: str, name: str) -> None:
    for path in ("/smart-ext/api/waits", "/smart-ext/waits"):
        answer = web["client"].get(f"{path}?{query}", headers=_bearer(web, "admin_viewer"))
        assert answer.status_code == 400, answer.text
        assert name in _refusal(answer, path)
    bad_runs = web["client"].get("/smart-ext/api/calendars?runs=many", headers=_bearer(web, "admin_viewer"))
    assert bad_runs.status_code == 400 and "runs" in bad_runs.json()["detail"]


@needs_airflow_3
def test_the_json_is_the_report(web: dict[str, Any]) -> None:
    data = web["client"].get(
        "/smart-ext/api/waits?sort=deadline&limit=2", headers=_bearer(web, "admin_viewer")
    )
    body = data.json()
    assert body["total"] == 3 and len(body["waits"]) == 2
    assert set(body) == {"generated_at", "total", "waits", "groups", "connections", "summary", "watchers"}
    assert body["groups"][0]["tasks"] == 3  # one SQL condition shared by the three waits
    # no triggerer runs in this DB: the api-server says so of every wait (and of those the limit cut)
    assert body["summary"]["unserved"] == 3 and body["summary"]["live_triggerers"] == 0
    assert all("none is alive" in wait["unserved_reason"] for wait in body["waits"])
    json.dumps(body)


# --- Airflow 2.11: the webserver's Flask app with FAB ------------------------------------------------------


@pytest.fixture
def webserver(airflow_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The 2.11 webserver app (our blueprint registered by the plugin), a viewer and a sales-only user."""
    if compat.versions.AIRFLOW_V_3_0_PLUS:
        pytest.skip("Airflow 3 has no Flask webserver")
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from airflow.www.app import create_app
    from sqlalchemy import delete

    with create_session() as session:
        for dag_id in DAGS:
            session.merge(DagModel(dag_id=dag_id, is_active=True))
    asked = fake_waits_source(monkeypatch)
    monkeypatch.setenv("AIRFLOW__FAB__UPDATE_FAB_PERMS", "False")  # no sync of every role: ours are below
    app = create_app(config={"WTF_CSRF_ENABLED": False}, testing=True)
    security = app.appbuilder.sm
    roles = {
        "Public": [],  # the anonymous user's role (AUTH_ROLE_PUBLIC)
        "AllDagsReader": [("can_read", "Website"), ("can_read", "DAGs")],
        "SalesOnly": [("can_read", "Website"), *(("can_read", f"DAG:{dag_id}") for dag_id in DAGS[:2])],
    }
    for role_name, permissions in roles.items():
        role = security.add_role(role_name)
        for action, resource in permissions:
            security.add_permission_to_role(role, security.create_permission(action, resource))
    for name, role_name in (("viewer", "AllDagsReader"), ("sales_viewer", "SalesOnly")):
        role = security.find_role(role_name)
        if security.find_user(username=name) is None:
            security.add_user(name, name, name, f"{name}@example.com", role, "pw")
    yield {"app": app, "asked": asked}
    with create_session() as session:
        session.execute(delete(DagModel).where(DagModel.dag_id.in_(DAGS)))


def _logged_in(webserver: dict[str, Any], user: str) -> Any:
    client = webserver["app"].test_client()
    answer = client.post("/login/", data={"username": user, "password": "pw"})
    assert answer.status_code == 302, answer.text
    return client


@pytest.mark.skipif(compat.versions.AIRFLOW_V_3_0_PLUS, reason="the Flask blueprint serves Airflow 2.11")
def test_flask_views_need_a_login_and_filter_by_readable_dags(webserver: dict[str, Any]) -> None:
    anonymous = webserver["app"].test_client()
    for path in ("/smart-ext/waits", "/smart-ext/calendars"):  # a page: the login page, as Airflow's own
        answer = anonymous.get(path)
        assert answer.status_code == 302 and "/login/" in answer.headers["Location"], path
    for path in ("/smart-ext/api/waits", "/smart-ext/api/calendars"):  # the JSON: a 401 for scripts
        answer = anonymous.get(path)
        assert answer.status_code == 401 and "Not authenticated" in answer.get_json()["detail"], path
    assert webserver["asked"] == []

    viewer = _logged_in(webserver, "viewer")
    assert {row["dag_id"] for row in viewer.get("/smart-ext/api/waits").get_json()["waits"]} == set(DAGS)

    sales = _logged_in(webserver, "sales_viewer")
    data = sales.get("/smart-ext/api/waits").get_json()
    assert {row["dag_id"] for row in data["waits"]} == {"sales_daily", "sales_hourly"}
    assert set(webserver["asked"][-1]) == {"sales_daily", "sales_hourly"}
    assert data["summary"]["unserved"] == 2 and data["summary"]["live_triggerers"] == 0  # no triggerer runs
    page = sales.get("/smart-ext/waits")
    assert page.status_code == 200 and page.mimetype == "text/html"
    text = page.get_data(as_text=True)
    assert text.count("<tr data-dag-id=") == 2 and "hr_daily" not in text
    # inside the webserver's own layout: its navbar, our page in a scoped block
    assert 'class="navbar navbar-fixed-top"' in text and '<div class="smart-ext"' in text
    assert "2 waits no live triggerer serves" in text
    assert 'href="/dags/sales_daily/grid?dag_run_id=run&amp;task_id=wait"' in text

    for query, name in (("due_within=soon", "due_within"), ("colour=red", "colour")):
        answer = sales.get(f"/smart-ext/api/waits?{query}")
        assert answer.status_code == 400 and name in answer.get_json()["detail"]
    assert sales.get("/smart-ext/api/calendars?runs=0").status_code == 400


@needs_airflow_3
def test_calendars_are_limited_to_readable_dags(web: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_smart_ext.ui import calendars_model

    asked: list[tuple[Collection[str] | None, int, int]] = []

    def load_calendars(
        session: Any, dag_ids: Collection[str] | None, now: float, runs: int, past: int
    ) -> list[Any]:
        asked.append((dag_ids, runs, past))
        return []

    monkeypatch.setattr(calendars_model, "load_calendars", load_calendars)
    headers = _bearer(web, SalesOnlyAuthManager.RESTRICTED)
    assert web["client"].get("/smart-ext/api/calendars?runs=3", headers=headers).json() == []
    assert asked == [({"sales_daily", "sales_hourly"}, 3, 5)]
    page = web["client"].get("/smart-ext/calendars?dag_id=sales_daily&past=2", headers=headers)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert asked[-1] == ({"sales_daily"}, 10, 2)


@pytest.mark.parametrize(
    ("pairs", "word"),
    [
        ([("limit", "1"), ("limit", "2")], "more than once"),
        ([("dag_id", "a\x00b")], "control character"),
        ([("dag\x7f", "a")], "control character"),
    ],
)
def test_repeated_parameters_and_control_characters_are_a_bad_query(
    pairs: list[tuple[str, str]], word: str
) -> None:
    from airflow_smart_ext.ui.web_common import single_params

    with pytest.raises(InvalidQuery, match=word):
        single_params(pairs)
    assert single_params([("dag_id", "a"), ("sort", "deadline")]) == {"dag_id": "a", "sort": "deadline"}


def _refusals() -> list[tuple[str, str]]:
    from urllib.parse import quote

    from tests.unit.ui.helpers import NUMERIC_PARAMETERS, REFUSED_NUMBERS

    return [
        (f"/smart-ext/api/{view}?{name}={quote(text)}", name)
        for view, name in NUMERIC_PARAMETERS
        for text in REFUSED_NUMBERS
    ]


@needs_airflow_3
def test_every_refused_number_is_a_400_naming_its_parameter_on_both_views(web: dict[str, Any]) -> None:
    for url, name in _refusals():
        for path in (url, url.replace("/api/", "/")):  # the JSON and the page
            answer = web["client"].get(path, headers=_bearer(web, "admin_viewer"))
            assert answer.status_code == 400 and _refusal(answer, path).startswith(name), (path, answer.text)


@pytest.mark.skipif(compat.versions.AIRFLOW_V_3_0_PLUS, reason="the Flask blueprint serves Airflow 2.11")
def test_every_refused_number_is_a_400_naming_its_parameter_on_the_flask_views(
    webserver: dict[str, Any],
) -> None:
    viewer = _logged_in(webserver, "viewer")
    for url, name in _refusals():
        for path in (url, url.replace("/api/", "/")):
            answer = viewer.get(path)
            assert answer.status_code == 400 and _refusal(answer, path).startswith(name), (path, answer.text)
