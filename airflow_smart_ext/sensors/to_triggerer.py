"""What ships to the triggerer: whether a sensor can be re-created there, and the check spec it ships.

The triggerer re-creates a custom sensor from its class path and its own constructor arguments (JSON), so
both must travel unchanged; a SQL sensor ships the ``"sql"`` check spec instead (its class overrides
``_shipping_problem`` and ``deferrable_check``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.conditions import sensor_poke as sensor_check
from airflow_smart_ext.conditions.runtime import callable_path, json_problem
from airflow_smart_ext.sensors import poke_mode
from airflow_smart_ext.wait_model.parameters import has_template, is_runtime_value, transient_errors_problem

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor


def unshippable_message(task_id: Any, problem: str) -> str:
    return (
        f"Task {task_id!r}: deferrable=True but this sensor cannot be shipped to the "
        f"triggerer: {problem}. Fix that, set deferrable=False, or pass "
        f"deferrable_fallback='reschedule' to run in reschedule mode instead."
    )


def framework_parameters(sensor_class: type) -> frozenset[str]:
    """Constructor parameters owned by BaseOperator / BaseSensorOperator / BackoffSensor.

    ``sensor_class``: a BackoffSensor (sub)class; its MRO names BackoffSensor just before BaseSensorOperator,
    so this module needs no import of ``sensors.base`` (which imports this one).
    """
    mro = sensor_class.__mro__
    names: set[str] = {"task_id", "dag", "task_group", "params", "default_args", "kwargs", "self"}
    for klass in mro[mro.index(compat.locations.BaseSensorOperator) - 1 :]:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(inspect.signature(init).parameters)
    return frozenset(names)


def operator_init_kwargs(operator: Any) -> dict[str, Any]:
    """The keyword arguments an operator was constructed with (BaseOperator records them, 2.11 and 3.x).

    Airflow keeps them in the name-mangled private ``_BaseOperator__init_kwargs``; this is the only place
    that reads it.
    """
    return dict(getattr(operator, "_BaseOperator__init_kwargs", {}) or {})


def constructor_kwargs(sensor: BackoffSensor) -> dict[str, Any]:
    """The subclass's own constructor arguments (what ``MySensor(**kwargs)`` needs besides framework ones)."""
    init_kwargs = operator_init_kwargs(sensor)
    framework = framework_parameters(type(sensor))
    return {key: value for key, value in init_kwargs.items() if key not in framework}


def shippability_problem(sensor: BackoffSensor) -> str | None:
    """Why this sensor cannot run in the triggerer (checked at DAG parse), or None when it can."""
    own = constructor_kwargs(sensor)
    return (
        transient_errors_problem(sensor.transient_error_types)
        or type(sensor)._shipping_problem(own)
        or rendering_problem(sensor, own)
    )


def rendering_problem(sensor: BackoffSensor, own: Mapping[str, Any]) -> str | None:
    """The triggerer re-creates the sensor from its constructor arguments: a template field that is not
    one of them (``self.filepath = path``) would reach it unrendered."""
    fields = tuple(sensor.template_fields or ())
    framework = framework_parameters(type(sensor))
    lost = [name for name in fields if name not in own and name not in framework]
    raw = sorted(name for name, value in own.items() if name not in fields and has_template(value))
    if not lost or not raw:
        return None
    return (
        f"template field(s) {lost} are not constructor arguments, so the sensor the triggerer re-creates "
        f"from its constructor arguments would see {raw} unrendered (Jinja left as is); name each "
        f"template field after the constructor argument it comes from"
    )


def class_shipping_problem(cls: type, own_kwargs: Mapping[str, Any]) -> str | None:
    """Why ``cls(**own_kwargs)`` cannot be re-created in the triggerer (mapped and unmapped alike)."""
    if callable_path(cls) is None:
        return (
            f"its class {cls.__module__}.{cls.__qualname__} cannot be imported by name in the triggerer "
            f"(classes defined in a DAG file or inside a function are not importable there); move it "
            f"into an installed package, the plugins folder or a separate module in the DAGs folder"
        )
    for key, value in own_kwargs.items():
        if holds_runtime_value(value):
            continue
        problem = json_problem(value)
        if problem is not None:
            return (
                f"constructor argument {key!r}={value!r} does not travel to the triggerer as JSON unchanged "
                f"({problem}); pass JSON values (str, int, float, bool, None, lists, dicts with str keys)"
            )
    return None


def sensor_check_spec(sensor: BackoffSensor, context: Mapping[str, Any]) -> dict[str, Any]:
    """The ``"sensor"`` check spec (``conditions/spec.py``): re-create this sensor in the triggerer and poke it.

    ``kwargs`` are the rendered constructor arguments of the subclass (template fields take their
    rendered attribute values), excluding every BaseOperator/BaseSensorOperator/backoff argument.
    """
    classpath = callable_path(type(sensor))
    if classpath is None:  # validated at parse; a class can still be redefined dynamically
        raise compat.locations.AirflowException(
            f"Cannot ship {type(sensor).__qualname__} to the triggerer: {sensor.shippability_problem()}"
        )
    template_fields = set(sensor.template_fields or ())
    kwargs: dict[str, Any] = {}
    for key, value in constructor_kwargs(sensor).items():
        rendered = getattr(sensor, key) if key in template_fields and hasattr(sensor, key) else value
        problem = json_problem(rendered)
        if problem is not None:
            raise compat.locations.AirflowException(
                f"Cannot defer task {sensor.task_id!r}: rendered argument {key!r} is not JSON-serializable "
                f"({problem})."
            )
        kwargs[key] = rendered
    return sensor_check.build_spec(classpath, kwargs, poke_mode.with_task_instance(sensor, context))


def holds_runtime_value(value: Any) -> bool:
    """Whether a (nested: dicts, lists) argument holds an XComArg-like value, resolved on a worker."""
    if is_runtime_value(value):
        return True
    if isinstance(value, dict):
        return any(holds_runtime_value(item) for item in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(holds_runtime_value(item) for item in value)
    return False
