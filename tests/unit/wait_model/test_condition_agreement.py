"""The Waits view groups a zero-worker wait on the condition its trigger checks: the rendered one.

Generated from a table of template fields: for each, the trigger renders its fields with a task's template
context (built here by hand as Airflow's task runner builds it, with a param the server cannot see and
Variables) and takes the sharing key of the check it would run; the view, from the trigger row, the run's dates
and the server's Variables (read as the api-server reads them: here from ``AIRFLOW_VAR_*``), must come to the
same key, or say its group is not exact when the field needs more (a param, a Variable the server lacks).
"""

from __future__ import annotations

import datetime
from typing import Any

import pendulum
import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import sharing_key
from airflow_smart_ext.conditions.sensor_poke import run_dates
from airflow_smart_ext.triggers.zero_worker import CLASSPATH as ZERO_WORKER
from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger
from airflow_smart_ext.ui.trigger_rows import Conditions, LiveWait
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from airflow_smart_ext.wait_model.deferral_paths import BACKOFF_TRIGGER
from tests.unit.helpers import sql_check

pytestmark = pytest.mark.skipif(
    not compat.start_in_triggerer.START_FROM_TRIGGER_SUPPORTED
    or compat.start_in_triggerer.trigger_template_env(False) is None,
    reason="templated zero-worker waits are rendered in the triggerer on Airflow 3.3+ only (2.11 starts them "
    "on a worker)",
)

LOGICAL = pendulum.datetime(2026, 11, 26, tz="UTC")
RUN_ID = "scheduled__2026-11-26T00:00:00+00:00"
NOW = LOGICAL.timestamp() + 86400 + 120
POLICY = {"initial": 60.0, "factor": 2.0, "cap": 600.0, "jitter": "full", "splay": 0.0}

#: (case, the sql field, whether the server can render it from the run's dates)
SQL_FIELDS = [
    ("literal", "SELECT ok FROM t WHERE day = '2026-11-26'", True),
    ("ds", "SELECT ok FROM t WHERE day = '{{ ds }}'", True),
    ("logical_date | ds", "SELECT ok FROM t WHERE day = '{{ logical_date | ds }}'", True),
    ("strftime", "SELECT ok FROM t WHERE day = '{{ data_interval_start.strftime('%Y-%m-%d') }}'", True),
    ("ds_nodash", "SELECT ok FROM t WHERE day = '{{ ds_nodash }}'", True),
    ("run_id", "SELECT ok FROM t WHERE run = '{{ run_id }}'", True),
    ("a param", "SELECT ok FROM t WHERE day = '{{ params.day }}'", False),
    ("a Variable", "SELECT ok FROM {{ var.value.table }}", True),
    ("a JSON Variable", "SELECT ok FROM {{ var.json.cfg.table }}", True),
    ("a Variable the server lacks", "SELECT ok FROM {{ var.value.only_in_the_task }}", False),
]
#: the server's Variables (the api-server reads the environment's AIRFLOW_VAR_* first, as every Airflow does)
SERVER_VARIABLES = {"AIRFLOW_VAR_TABLE": "t_from_a_variable", "AIRFLOW_VAR_CFG": '{"table": "t_from_json"}'}


@pytest.fixture(autouse=True)
def _server_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SERVER_VARIABLES.items():
        monkeypatch.setenv(name, value)


#: renders to the literal's condition: the view must put these in one group
SAME_AS_LITERAL = ("literal", "ds", "logical_date | ds", "strftime", "a param")


def _context() -> dict[str, Any]:
    """A task's template context as Airflow's task runner builds it (the run-date part), plus what a server
    cannot see: the DAG's params and its Variables."""
    ds = LOGICAL.strftime("%Y-%m-%d")
    ts = LOGICAL.isoformat()
    return {
        "ds": ds,
        "ds_nodash": ds.replace("-", ""),
        "ts": ts,
        "ts_nodash": LOGICAL.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": ts.replace("-", "").replace(":", ""),
        "logical_date": LOGICAL,
        "data_interval_start": LOGICAL,
        "data_interval_end": LOGICAL.add(days=1),
        "run_id": RUN_ID,
        "params": {"day": "2026-11-26"},
        "var": {
            "value": {"table": "t_from_a_variable", "only_in_the_task": "t_task"},
            "json": {"cfg": {"table": "t_from_json"}},
        },
    }


def _start(sql: str) -> tuple[dict[str, Any], dict[str, Any]]:
    check = sql_check()
    check["sql"] = None  # a template field: its value travels as the trigger's own kwarg
    start = {
        "check": check,
        "fields": {"sql": ["sql"]},
        "policy": POLICY,
        "timeout": 3600.0,
        "execution_timeout": None,
        "backstop_seconds": 3660.0,
        "share": True,
    }
    return start, {"sql": sql}


def _triggers_key(sql: str) -> str:
    """The sharing key of the check the trigger runs, after Airflow renders its template fields."""
    start, fields = _start(sql)
    trigger = BackoffStartTrigger(start, **fields)
    trigger.template_fields = tuple(fields)  # what Airflow's task_instance setter leaves on the trigger
    trigger.render_template_fields(_context())
    run_facts = {"dag_id": "d", "task_id": "t", "run_id": RUN_ID, **run_dates(LOGICAL, LOGICAL, None)}
    return sharing_key(trigger._check_spec(run_facts))


def _wait(sql: str, task_id: str) -> LiveWait:
    start, fields = _start(sql)
    dates = run_dates(LOGICAL, LOGICAL, LOGICAL.add(days=1))
    kwargs = {"start": start, **fields}
    return LiveWait("d", RUN_ID, task_id, -1, 1, ZERO_WORKER, kwargs, NOW - 60, NOW - 60, run_dates=dates)


@pytest.mark.parametrize(("case", "sql", "renderable"), SQL_FIELDS, ids=[row[0] for row in SQL_FIELDS])
def test_the_view_keys_a_wait_on_the_condition_its_trigger_checks(
    case: str, sql: str, renderable: bool
) -> None:
    condition = Conditions().of(_wait(sql, "t"), "zero-worker")
    assert condition.exact is renderable
    if renderable:
        assert condition.key == _triggers_key(sql)
    else:  # the view cannot know the rendered value: it keys on the template, and says so
        assert condition.key != _triggers_key(sql)


def test_waits_that_render_to_one_condition_are_one_group_on_the_page() -> None:
    waits = [_wait(sql, case) for case, sql, _renderable in SQL_FIELDS]
    rows = {row["task_id"]: row for row in build_report(waits, WaitsQuery(), NOW)["waits"]}
    literal = rows["literal"]["sharing_key_hash"]
    same = {case for case, row in rows.items() if row["sharing_key_hash"] == literal}
    triggers_same = {
        case for case, sql, _r in SQL_FIELDS if _triggers_key(sql) == _triggers_key(SQL_FIELDS[0][1])
    }
    assert triggers_same == set(SAME_AS_LITERAL)
    # every wait the server can render is grouped as its trigger groups it; "a param" is not exact
    assert same == triggers_same - {"a param"}
    assert rows["literal"]["shared_with"] == len(same)
    assert rows["a param"]["next_check_exact"] is False


def test_a_templated_zero_worker_wait_and_a_worker_first_twin_are_one_group() -> None:
    """Issue 44's case: a zero-worker wait on ``SELECT ... {{ var.value.table }}`` (rendered in the triggerer)
    and a worker-first wait on the literal it renders to share one check there: the view keys them alike."""
    templated = Conditions().of(_wait("SELECT ok FROM {{ var.value.table }}", "templated"), "zero-worker")
    literal_check = {**_start("x")[0]["check"], "sql": "SELECT ok FROM t_from_a_variable"}
    twin = LiveWait("d", RUN_ID, "twin", -1, 1, BACKOFF_TRIGGER, {"check": literal_check}, NOW - 60, NOW - 60)
    assert templated.exact and templated.key == Conditions().of(twin, "worker-first").key
    assert templated.key == _triggers_key("SELECT ok FROM {{ var.value.table }}")


def test_a_variable_is_read_once_per_report_whatever_the_number_of_waits() -> None:
    reads: list[str] = []

    def read(key: str) -> str | None:
        reads.append(key)
        return "t_from_a_variable" if key == "table" else None

    conditions = Conditions(read)
    keys = {
        conditions.of(_wait("SELECT ok FROM {{ var.value.table }}", f"t{n}"), "zero-worker").key
        for n in range(20)
    }
    assert len(keys) == 1 and reads == ["table"]


def test_the_run_date_context_matches_airflows_for_a_naive_free_date() -> None:
    """The dates the view renders with are the run's, in UTC, as Airflow's context gives them."""
    from airflow_smart_ext.wait_model.condition import run_template_context

    context = run_template_context({"run_id": RUN_ID, **run_dates(LOGICAL, LOGICAL, LOGICAL.add(days=1))})
    expected = _context()
    for name in ("ds", "ds_nodash", "ts", "ts_nodash", "ts_nodash_with_tz", "run_id"):
        assert context[name] == expected[name], name
    assert context["logical_date"] == expected["logical_date"]
    assert context["data_interval_end"] - context["data_interval_start"] == datetime.timedelta(days=1)


def test_a_field_whose_native_rendering_differs_is_not_exact() -> None:
    """The row does not say whether the DAG renders as native objects: ``["{{ ds_nodash }}"]`` is
    ``["20261126"]`` one way and ``[20261126]`` the other, so the view cannot know the key."""
    from airflow_smart_ext.wait_model.condition import render_from_run

    facts = {"run_id": RUN_ID, **run_dates(LOGICAL, LOGICAL, LOGICAL.add(days=1))}
    assert render_from_run({"parameters": ["{{ ds_nodash }}"]}, facts) is None
    assert render_from_run({"sql": "SELECT {{ ds_nodash }}"}, facts) == {"sql": "SELECT 20261126"}


@pytest.mark.parametrize(
    "template",
    [
        "SELECT '{{ 'x' * 10**9 }}'",  # a gigabyte in the api-server
        "{% for day in range(100000) %}{{ day }}{% endfor %}",
        "{{ params.day }}",  # a name the server does not have
        "{{ ds | custom_filter }}",
        "{{ logical_date.add(days=1) }}",  # a call the server does not vouch for
        "{{ var.value.get('table') }}",  # nor through a Variable
        "{{ ds",  # not even a template
    ],
)
def test_the_view_renders_only_the_runs_dates_through_known_filters_and_methods(template: str) -> None:
    """A DAG author's template is rendered on the api-server only when it reads the run's dates through known
    filters and methods; anything else is the triggerer's to render (the view says "not exact")."""
    from airflow_smart_ext.wait_model.condition import TemplateVariables, render_from_run

    facts = {"run_id": RUN_ID, **run_dates(LOGICAL, LOGICAL, LOGICAL.add(days=1))}
    variables = TemplateVariables(lambda key: "t")  # every Variable exists: refused for what it does
    assert render_from_run({"sql": template}, facts, variables) is None
    assert render_from_run({"sql": "{{ var.value.table }}"}, facts, variables) == {"sql": "t"}
