"""The zero-worker start plan: whether the scheduler starts a deferrable sensor in the triggerer.

Decided at DAG parse (``start_from_trigger`` / ``start_trigger_args`` are static and serialized with the
DAG); when the task starts on a worker instead, the reason is kept and logged when it runs.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat, units
from airflow_smart_ext.errors import error_type_paths
from airflow_smart_ext.sensors import poke_mode, to_triggerer
from airflow_smart_ext.wait_model.parameters import has_template

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor


class _ParseTimeTaskInstance:
    """The task identity a check spec needs at DAG parse; the triggerer replaces it with the real run's."""

    def __init__(self, task_id: str) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number = "", task_id, "", -1, 1


def plan_start(sensor: BackoffSensor) -> None:
    """Decide at DAG parse whether the scheduler starts this task in the triggerer (the zero-worker path).

    Sets Airflow's ``start_from_trigger`` / ``start_trigger_args`` (static, serialized with the DAG) or
    records in ``worker_first_reason`` why the task starts on a worker (logged when it runs).
    """
    sensor.start_from_trigger = False
    sensor.start_trigger_args = None
    reason, fields, check = start_problem(sensor)
    sensor.worker_first_reason = reason
    if reason is not None:
        return
    from airflow_smart_ext.triggers.zero_worker import (  # lazy: keep DAG parsing cheap
        CLASSPATH,
        RESUME_KWARGS,
    )

    backstop = poke_mode.deadlines(sensor, 0.0).backstop(
        0.0, capped_by_execution=True
    )  # from the try's start
    start = {
        "check": check,
        "fields": {name: path for name, (path, _value) in fields.items()},
        "policy": sensor.backoff_policy.to_dict(),
        "timeout": sensor.timeout,
        "execution_timeout": units.seconds(sensor.execution_timeout) if sensor.execution_timeout else None,
        "backstop_seconds": backstop,
        "transient_errors": error_type_paths(sensor.transient_error_types),
        "silent_fail": bool(getattr(sensor, "silent_fail", False)),
        "check_timeout": sensor.check_timeout,
        "rate_limit": sensor.rate_limit,
        "do_xcom_push": bool(sensor.do_xcom_push),
        "multiple_outputs": bool(getattr(sensor, "multiple_outputs", False)),
        "success_callbacks": bool(sensor.on_success_callback),
        # the due time (``due=``) is computed in the triggerer from the run's instants, as a worker would
        **({"due": sensor.due.to_dict()} if sensor.due is not None else {}),
        "sensor": type(sensor).__name__,
    }
    sensor.start_from_trigger = True
    sensor.start_trigger_args = compat.locations.StartTriggerArgs(
        trigger_cls=CLASSPATH,
        next_method="execute_complete",
        trigger_kwargs={"start": start, **{name: value for name, (_path, value) in fields.items()}},
        next_kwargs=dict(RESUME_KWARGS),
        timeout=datetime.timedelta(seconds=backstop),
    )


def start_problem(
    sensor: BackoffSensor,
) -> tuple[str | None, dict[str, tuple[list[str], Any]], dict[str, Any]]:
    """(why not, template field -> (its path in the check spec, raw value), the check spec).

    The check spec is built from the unrendered attributes; the triggerer renders the template fields
    (3.3+) and puts them back at their paths.
    """
    from airflow_smart_ext.triggers.zero_worker import reserved_field_names

    if sensor.start_from_trigger_requested is False:
        return "start_from_trigger=False: worker-first deferral as asked", {}, {}
    for name, value in to_triggerer.constructor_kwargs(sensor).items():
        if to_triggerer.holds_runtime_value(
            value
        ):  # before building the spec: an XComArg is no JSON value yet
            return f"argument {name!r} comes from an upstream task's XCom (resolved on a worker)", {}, {}
    check = sensor.deferrable_check({"ti": _ParseTimeTaskInstance(sensor.task_id)})
    in_spec = check["kwargs"] if check["type"] == "sensor" else check
    prefix = ["kwargs"] if check["type"] == "sensor" else []
    fields = {
        name: ([*prefix, name], in_spec[name]) for name in sensor.template_fields or () if name in in_spec
    }
    templated = False
    for name, (_path, value) in fields.items():
        if isinstance(value, str) and value.endswith(tuple(sensor.template_ext or ())):
            return f"argument {name!r} is a template file ({value!r}), rendered on a worker", {}, {}
        templated = templated or has_template(value)
    dag = getattr(sensor, "dag", None) if sensor.has_dag() else None
    if templated and dag is not None and (dag.user_defined_macros or dag.user_defined_filters):
        return "its DAG's user_defined_macros/filters exist only where the DAG file is parsed", {}, {}
    clashing = reserved_field_names(fields)
    if clashing:
        return f"template field(s) {clashing} clash with the start trigger's own attributes", {}, {}
    return compat.start_in_triggerer.start_from_trigger_problem(templated=templated), fields, check


def log_worker_first(sensor: BackoffSensor, context: Any) -> None:
    """Say why a deferrable task runs on a worker (never silently): the task log shows it."""
    reason = sensor.worker_first_reason
    if reason is None and sensor.start_from_trigger:
        map_index = getattr(poke_mode.task_instance(context), "map_index", -1)
        reason = (
            compat.start_in_triggerer.mapped_start_problem()
            if map_index is not None and map_index >= 0
            else "Airflow's scheduler started this try on a worker"
        )
    if reason is None:
        return
    log = sensor.log.info if sensor.start_from_trigger_requested is False else sensor.log.warning
    log(
        "Deferrable wait starts on a worker (check #0 here, then the triggerer), not in the triggerer: %s",
        reason,
    )
