"""The condition a zero-worker wait checks, as its trigger checks it: the start spec's check with the sensor's
template fields rendered and put back in place; its sharing key (``conditions.sharing_key``) then says which
waits share one check.

The trigger renders with the template context Airflow gives it (3.3+). The Waits view has the trigger row, the
run's dates and the server's Variables, so :func:`render_from_run` renders with that part of the context —
``ds``, ``ds_nodash``, ``ts``, ``ts_nodash``, ``ts_nodash_with_tz``, ``logical_date``, ``data_interval_start``
/ ``data_interval_end`` (built as Airflow's task runner builds them), ``run_id``, ``dag_id``, ``task_id``, and
``var.value.<key>`` / ``var.json.<key>`` — in Airflow's own environment (StrictUndefined). A field that needs
anything else (a param, a macro, a missing Variable) is not rendered here: the view then says its group is not
exact.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

import pendulum

from airflow_smart_ext import compat
from airflow_smart_ext.conditions.spec import place_template_fields
from airflow_smart_ext.wait_model.parameters import has_template


def zero_worker_check(
    start: Mapping[str, Any], values: Mapping[str, Any], run_facts: Mapping[str, Any]
) -> dict[str, Any]:
    """The check of a zero-worker start spec with the template fields' ``values`` in place; a ``"sensor"``
    check carries the run's facts as its poke context."""
    check = place_template_fields(copy.deepcopy(start["check"]), start["fields"], values)
    if check["type"] == "sensor":
        check["context"] = dict(run_facts)
    return check


def run_template_context(run_facts: Mapping[str, Any]) -> dict[str, Any]:
    """The run-date part of a task's template context, from the facts a trigger row and its run give."""
    context: dict[str, Any] = {name: run_facts.get(name) for name in ("run_id", "dag_id", "task_id")}
    logical = _moment(run_facts.get("logical_date"))
    if logical is not None:
        ds = logical.strftime("%Y-%m-%d")
        ts = logical.isoformat()
        context.update(
            logical_date=logical,
            ds=ds,
            ds_nodash=ds.replace("-", ""),
            ts=ts,
            ts_nodash=logical.strftime("%Y%m%dT%H%M%S"),
            ts_nodash_with_tz=ts.replace("-", "").replace(":", ""),
            data_interval_start=_moment(run_facts.get("data_interval_start")),
            data_interval_end=_moment(run_facts.get("data_interval_end")),
        )
    return {name: value for name, value in context.items() if value is not None}


class _VariableValues:
    """``var.value`` / ``var.json`` of a template context, read through ``read`` (the server's Variables). A
    Variable ``read`` does not find is undefined: the template is then not rendered here."""

    def __init__(self, read: Callable[[str], str | None], as_json: bool) -> None:
        self._read, self._as_json = read, as_json

    def __getattr__(self, key: str) -> Any:
        raw = None if key.startswith("_") else self._read(key)
        if raw is None:
            raise AttributeError(key)
        return json.loads(raw) if self._as_json else raw


class TemplateVariables:
    """The ``var`` of a template context (``var.value.<key>``, ``var.json.<key>``) over ``read``."""

    def __init__(self, read: Callable[[str], str | None]) -> None:
        self.value = _VariableValues(read, False)
        self.json = _VariableValues(read, True)


def render_from_run(
    values: Mapping[str, Any], run_facts: Mapping[str, Any], variables: TemplateVariables | None = None
) -> dict[str, Any] | None:
    """``values`` with every Jinja string rendered from the run's dates and ``variables`` (see the module's
    docstring); None when one needs more than they give, when rendering as native objects (a DAG's
    ``render_template_as_native_obj``, which the row does not record) would give another value, or when
    nothing renders here (2.11: its triggerer renders nothing)."""
    if not any(has_template(value) for value in values.values()):
        return dict(values)
    if _environment(False) is None:
        return None
    context: dict[str, Any] = run_template_context(run_facts)
    if variables is not None:
        context["var"] = variables
    if not all(_renders_safely(text, set(context)) for text in _strings(values)):
        return None
    try:
        rendered = {name: _render(value, context, False) for name, value in values.items()}
        native = {name: _render(value, context, True) for name, value in values.items()}
    except Exception:  # UndefinedError, a filter the server lacks, a syntax error: the triggerer's to say
        return None
    return rendered if native == rendered else None


#: What a template the server renders may contain: the run's dates and Variables, a filter or a date method on
#: them, text.
#: Anything else (arithmetic, loops, calls of other things) is the triggerer's to render: a DAG author's template
#: must not cost the api-server more than a few string operations per page.
_SAFE_NODES = ("Template", "Output", "TemplateData", "Name", "Getattr", "Filter", "Call", "Const")
_SAFE_FILTERS = frozenset(
    {"ds", "ds_nodash", "ts", "ts_nodash", "ts_nodash_with_tz", "string", "lower", "upper"}
)
_SAFE_METHODS = frozenset({"strftime", "isoformat", "date", "int_timestamp", "timestamp"})


def _renders_safely(text: str, names: set[str]) -> bool:
    """Whether ``text`` only reads the run's dates (names of ``names``) through known filters and methods."""
    import jinja2
    from jinja2 import nodes

    if not has_template(text) or len(text) > 10_000:
        return not has_template(text)
    try:
        tree = jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError:
        return False
    for node in tree.find_all(nodes.Node):
        kind = type(node).__name__
        if kind not in _SAFE_NODES:
            return False
        if isinstance(node, nodes.Name) and node.name not in names:
            return False
        if isinstance(node, nodes.Filter) and node.name not in _SAFE_FILTERS:
            return False
        if isinstance(node, nodes.Call) and not (
            isinstance(node.node, nodes.Getattr) and node.node.attr in _SAFE_METHODS and not node.kwargs
        ):
            return False
        if isinstance(node, nodes.Const) and not isinstance(node.value, str):
            return False
    return True


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _strings(item)]
    return []


def _moment(value: Any) -> Any:
    return pendulum.parse(value) if isinstance(value, str) else value


@functools.cache
def _environment(native: bool) -> Any:
    return compat.start_in_triggerer.trigger_template_env(native)


@functools.lru_cache(maxsize=4096)
def _template(text: str, native: bool) -> Any:
    return _environment(native).from_string(text)


def _render(value: Any, context: Mapping[str, Any], native: bool) -> Any:
    if isinstance(value, str):
        return _template(value, native).render(**context) if has_template(value) else value
    if isinstance(value, dict):
        return {key: _render(item, context, native) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_render(item, context, native) for item in value)
    return value
