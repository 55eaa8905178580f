"""The sensor's arguments checked at DAG parse (``BackoffSensor`` and a mapped sensor's ``.partial()``) against the
wait model's parameter table, and whether a deferrable sensor can travel to the triggerer.

The table itself (every row, rule and message) is the wait model's: ``airflow_smart_ext/wait_model/parameters.py``,
shared with the triggers and the condition watcher. The plain constructor and a mapped sensor's
``.partial()`` / ``.expand()`` / ``.expand_kwargs()`` literals all run :func:`check_arguments` on it, so both reject
the same values at DAG parse with the same message. A mapped sensor's constructor runs only when the task runs;
values from an upstream task's XCom are checked then.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.errors import resolve_error_types
from airflow_smart_ext.sensors import late, to_triggerer
from airflow_smart_ext.sensors.own_deferral import own_deferral_reason
from airflow_smart_ext.wait_model.parameters import (
    DEFAULT_SPLAY,
    PARAMETERS,
    RULES,
    backoff_policy,
    check_arguments,
    effective_values,
    is_runtime_value,
)

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor


def deferrable_value(deferrable: Any) -> bool:
    """``deferrable`` (None: ``[operators] default_deferrable``)."""
    if deferrable is None:
        deferrable = compat.locations.airflow_conf.getboolean(
            "operators", "default_deferrable", fallback=False
        )
    return bool(deferrable)


def backoff_policy_for(
    *,
    task_id: str,
    poke_interval: Any,
    max_wait: Any = None,
    timeout: Any,
    backoff_factor: Any = None,
    jitter: Any = None,
    splay: Any = DEFAULT_SPLAY,
) -> BackoffPolicy:
    """The policy of a sensor with these arguments; ``ValueError`` naming the parameter when one is invalid
    (the table's rows and rules). Accepts the forms a DAG file passes (seconds or ``timedelta``)."""
    arguments = {
        "poke_interval": poke_interval,
        "max_wait": max_wait,
        "timeout": timeout,
        "backoff_factor": backoff_factor,
        "jitter": jitter,
        "splay": splay,
    }
    check_arguments(PARAMETERS, arguments)
    try:
        return backoff_policy(effective_values(arguments))
    except ValueError as err:  # backstop: the policy names the invariant it breaks
        raise ValueError(f"Task {task_id!r}: invalid backoff settings: {err}") from err


def check_static_arguments(
    cls: type[BackoffSensor], known: Mapping[str, Any], unknown: Collection[str] = ()
) -> None:
    """Every constructor check on the arguments known at DAG parse: the table, then (deferrable) whether the
    sensor can travel to the triggerer. ``unknown``: arguments ``.expand()`` may still give."""
    check_arguments(cls.parameter_table(), known, unknown=unknown)
    static = {name: value for name, value in known.items() if not is_runtime_value(value)}
    cls._check_own_arguments(static)
    fallback = static.get("deferrable_fallback")
    # A subclass that defers on its own (TimeSensor / *Async) ships nothing to our triggers: no shipping check.
    own_deferral = own_deferral_reason(cls, _backoff_class(cls))
    defers_on_its_own = own_deferral is not None
    late_problem = late.deferrable_problem(
        static.get("due"), deferrable_value(static.get("deferrable")), own_deferral
    )
    if late_problem is not None:
        raise ValueError(f"Task {known.get('task_id')!r}: {late_problem}")
    if deferrable_value(static.get("deferrable")) and fallback != "reschedule" and not defers_on_its_own:
        framework = to_triggerer.framework_parameters(cls)
        own = {name: value for name, value in static.items() if name not in framework}
        problem = to_triggerer.transient_errors_problem(
            resolve_error_types(static.get("transient_errors"), "transient_errors")
        ) or cls._shipping_problem(own)
        if problem is not None:
            raise ValueError(to_triggerer.unshippable_message(known.get("task_id"), problem))


def _backoff_class(cls: type) -> type:
    """``BackoffSensor`` in ``cls``'s MRO: the class just before Airflow's ``BaseSensorOperator``."""
    mro = cls.__mro__
    return mro[mro.index(compat.locations.BaseSensorOperator) - 1]


def partial_arguments(sensor_class: type[BackoffSensor], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What a mapped sensor's ``.partial()`` knows at parse: its arguments over the ``default_args`` of its own
    and of its DAG and task group (those of this class's parameters: Airflow applies its DAG's and task group's
    when it unmaps the task). ``due`` or ``on_late`` in its own ``default_args``, which Airflow drops, is refused.
    A DAG's ``on_late`` on a sensor without a due time is only checked to be callables."""
    rows = {row.name for row in sensor_class.parameter_table()}
    dropped = sorted({"due", "on_late"} & set(kwargs.get("default_args") or {}))
    if dropped:  # a lost alert: say so at parse
        raise ValueError(
            f"Task {kwargs.get('task_id')!r}: {', '.join(dropped)} in .partial(default_args=...) would be dropped: "
            f"Airflow keeps only BaseOperator's arguments of a mapped task's own default_args. Pass "
            f"{dropped[0]}= to .partial() itself, or put it in the DAG's or task group's default_args"
        )
    inherited = compat.dag_parsing.partial_default_args(kwargs.get("dag"), kwargs.get("task_group"))
    defaults = {**{k: v for k, v in inherited.items() if k in rows}, **dict(kwargs.get("default_args") or {})}
    known = {**defaults, **kwargs}
    given = known.get("on_late")
    if "on_late" not in kwargs and late.on_late_for_the_rule(given, known.get("due"), defaults) is None:
        known.pop("on_late", None)
    return known


def rule_parameters() -> frozenset[str]:
    """The parameters some rule involves (a ``.partial()`` leaves those it lacks to ``.expand()``)."""
    return frozenset(name for rule in RULES for name in rule.names)


class CheckedPartial:
    """What ``BackoffSensor.partial()`` returns: Airflow's partial, whose ``expand`` / ``expand_kwargs`` first
    check every literal mapped value as the constructor would (each value with the partial's arguments; a
    rule across two mapped arguments of ``.expand()`` is checked when the task runs)."""

    def __init__(
        self,
        partial: Any,
        sensor_class: type[BackoffSensor],
        known: Mapping[str, Any],
        inherited_due: Any = None,
    ) -> None:
        self._partial = partial
        self._sensor_class = sensor_class
        self._known = dict(known)
        # the DAG's or task group's ``default_args`` due (not the partial's own: Airflow drops it)
        self._default_due = inherited_due

    def _check(self, where: str, arguments: Mapping[str, Any], unknown: Collection[str] = ()) -> None:
        try:
            check_static_arguments(self._sensor_class, {**self._known, **arguments}, unknown)
        except ValueError as err:
            raise ValueError(f"Task {self._known.get('task_id')!r}, {where}: {err}") from None

    def expand(self, **mapped_kwargs: Any) -> Any:
        self._check(".expand(...)", {}, unknown=set(mapped_kwargs))
        for name, values in mapped_kwargs.items():
            if isinstance(values, (list, tuple)):  # literal lists; XComArgs resolve when the task runs
                for position, value in enumerate(values):
                    others = set(mapped_kwargs) - {name}
                    self._check(f".expand({name}=...) item {position}", {name: value}, unknown=others)
        due = mapped_kwargs.get("due")
        if isinstance(due, (list, tuple)):  # each due time readable in the serialized DAG (late.storable_due)
            mapped_kwargs["due"] = [late.storable_due(value) for value in due]
        inherited = self._inherited_due()
        if inherited is not None and "due" not in mapped_kwargs:
            self._partial.kwargs["due"] = inherited
        return self._partial.expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *args: Any, **options: Any) -> Any:
        if isinstance(kwargs, (list, tuple)):
            for position, entry in enumerate(kwargs):
                if isinstance(entry, dict):
                    self._check(f".expand_kwargs(...) item {position}", entry)
            inherited = self._inherited_due()
            kwargs = [
                {**entry, "due": late.storable_due(entry.get("due", inherited))}
                if isinstance(entry, dict) and ("due" in entry or inherited is not None)
                else entry
                for entry in kwargs
            ]
        return self._partial.expand_kwargs(kwargs, *args, **options)

    def _inherited_due(self) -> Any:
        """A due time from the DAG's or task group's ``default_args`` the partial does not give itself, readable
        (``late.storable_due``): given with the mapped values, as Airflow applies it when it unmaps the task, so
        the serialized DAG keeps it readable (it keeps a ``default_args`` value as its repr). None: none. Not
        the partial's own ``default_args`` (Airflow keeps only BaseOperator's arguments of those), nor for
        mapped values known only at run time (an XComArg): one of them may give its own."""
        return None if "due" in self._partial.kwargs else late.storable_due(self._default_due)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_partial", "_sensor_class", "_known", "_default_due"):
            raise AttributeError(name)  # copy/pickle probe these before __init__ ran
        return getattr(self._partial, name)
