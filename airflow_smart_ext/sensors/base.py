"""``BackoffSensor``: a drop-in ``BaseSensorOperator`` whose pokes follow a seeded backoff schedule.

An existing sensor changes only its base class. Poke mode, reschedule mode and deferrable mode all ask
the same pure :class:`~airflow_smart_ext.backoff.BackoffPolicy` "when is the next check?", so the poke
times are identical in every mode and survive reschedules (and triggerer restarts).

This class is the one public face; the parts live in modules named after them: ``arguments`` (its arguments
checked against the wait model's table, shared with ``.partial()``), ``poke_mode`` (poke mode and what every mode shares),
``reschedule``, ``deferral`` (defer and resume), ``to_triggerer`` (what travels to the triggerer) and
``start_plan`` (the zero-worker start).
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.errors import resolve_error_types
from airflow_smart_ext.sensors import deferral, late, poke_mode, reschedule, start_plan, to_triggerer
from airflow_smart_ext.sensors.arguments import (
    CheckedPartial,
    backoff_policy_for,
    check_static_arguments,
    deferrable_value,
    partial_arguments,
    rule_parameters,
)
from airflow_smart_ext.sensors.own_deferral import own_deferral_reason
from airflow_smart_ext.wait_model.parameters import (
    DEFAULT_SPLAY,
    PARAMETERS,
    Parameter,
    check_arguments,
    check_timeout_seconds,
    growth,
    rate_limit_value,
)

if TYPE_CHECKING:
    from airflow_smart_ext.timetables.due import DueTime


class _BackoffSensorMeta(type(compat.locations.BaseSensorOperator)):  # type: ignore[misc]
    """Runs ``_validate_after_init`` once the whole ``__init__`` chain (and Airflow's wrappers) finished."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__call__(*args, **kwargs)
        instance._validate_after_init()
        return instance


# Type checkers see the plain base class (a dynamic metaclass would make every user subclass a mypy error).
_METACLASS: dict[str, Any] = {} if TYPE_CHECKING else {"metaclass": _BackoffSensorMeta}


class BackoffSensor(compat.locations.BaseSensorOperator, **_METACLASS):
    """Drop-in replacement for ``BaseSensorOperator`` with a seeded, deadline-aware backoff schedule.

    Every ``BaseSensorOperator`` parameter keeps its meaning: ``poke_interval`` is the *initial*
    interval, ``max_wait`` the cap on any interval, ``timeout`` the deadline measured from the start of
    the try (the first reschedule in reschedule mode), ``soft_fail``/``silent_fail``/``never_fail`` and
    ``mode`` behave as in Airflow. Airflow's own ``exponential_backoff`` series never runs: this class
    always follows its own policy (the attribute keeps the value given; ``_get_next_poke_interval`` tells the
    schedule's base interval, and a subclass overriding it is named in a warning at DAG parse). An explicit
    ``exponential_backoff=False`` keeps its Airflow meaning, a fixed interval: ``backoff_factor`` then defaults
    to 1 and ``jitter`` to ``none`` (splay still applies). ``poke_interval=0`` is accepted as in Airflow: the
    schedule then starts at 1 s, with no splay. ``execute()`` takes any context Airflow's base takes
    (``{}``, ``None``). A subclass that defers on its own (``TimeSensor`` / ``*Async``: its own
    ``self.defer(...)`` or ``start_trigger_args``) keeps its own deferral and Airflow's resume wrapper; see
    docs/sensors.md "Swapping the base class".

    :param backoff_factor: growth of the interval per check, >= 1 (1 = fixed interval). Default 2 (1 with
        an explicit ``exponential_backoff=False``).
    :param jitter: one of ``none``, ``full``, ``equal``, ``decorrelated`` (AWS "Exponential Backoff and
        Jitter"). Default ``full`` (``none`` with an explicit ``exponential_backoff=False``).
    :param splay: seconds or timedelta; the whole schedule of a task is shifted by a seeded U(0, splay),
        so sensors started together do not poke together. None (default) = ``poke_interval``.
    :param deferrable: wait in the triggerer (``BackoffTrigger``) between checks instead of a worker.
        Default: ``[operators] default_deferrable``.
    :param deferrable_fallback: ``None`` (default): a sensor that cannot be shipped to the triggerer fails
        at DAG parse. ``"reschedule"``: it runs in reschedule mode instead and logs a warning.
    :param transient_errors: extra exception classes (or dotted paths) to treat as transient, on top of
        :func:`airflow_smart_ext.errors.classify` (connection refused/reset, timeouts, DB-API
        ``OperationalError`` such as "database is locked", HTTP 429/5xx, ...). A transient error is "not
        yet" in every mode: the schedule goes on to the deadline; no try is spent, no worker resumed.
    :param check_timeout: seconds (or timedelta) one check may run in the triggerer; a check over it is a
        failed (transient) check. Default ``[smart_ext] check_time_limit``, else ``poke_interval`` within
        [60 s, 600 s].
    :param rate_limit: checks per second allowed on this sensor's connection in the triggerer (a token
        bucket shared by every check on the connection; the lowest rate asked wins). Default
        ``[smart_ext] max_checks_per_second_per_connection`` (0: no limit). Checks over budget are delayed,
        never dropped, never past the deadline.
    :param due: when the wait's data is due (:class:`~airflow_smart_ext.timetables.DueTime`, or its dict form):
        the first check scheduled at or after it that finds the condition not met says once that the wait is
        late (a WARNING line, the ``smart_ext.sensor.late`` metric, ``on_late``) and the wait goes on to its
        timeout. Poke, reschedule and deferrable mode; a deferred wait's trigger hands the alert to a short worker run, which re-defers
        (docs/late-data.md).
    :param on_late: a callable or a list of them (functions, Airflow notifiers such as ``SlackNotifier``),
        called once with the task's context plus ``late`` (the wait, its due time, how late, its last outcome).
    :param start_from_trigger: with ``deferrable=True``, start the task in the triggerer (the zero-worker
        path: no worker runs check #0, a success ends the task in the triggerer). ``None`` (default): wherever
        this Airflow and this task allow it, else worker-first with the reason in the task log (see
        docs/deferrable.md, "Zero-worker waits"). ``False``: always worker-first (check #0 on a worker).
    """

    def __init__(
        self,
        *,
        backoff_factor: float | None = None,
        jitter: str | None = None,
        splay: float | datetime.timedelta | None = DEFAULT_SPLAY,
        deferrable: bool | None = None,
        deferrable_fallback: str | None = None,
        transient_errors: Any = None,
        check_timeout: float | datetime.timedelta | None = None,
        rate_limit: float | None = None,
        start_from_trigger: bool | None = None,
        due: DueTime | Mapping[str, Any] | None = None,
        on_late: Any = None,
        **kwargs: Any,
    ) -> None:
        # The table first (before Airflow's own checks): the same checks and messages as .partial()/.expand().
        check_arguments(
            PARAMETERS,
            {
                **kwargs,
                "backoff_factor": backoff_factor,
                "jitter": jitter,
                "splay": splay,
                "deferrable": deferrable,
                "deferrable_fallback": deferrable_fallback,
                "transient_errors": transient_errors,
                "check_timeout": check_timeout,
                "rate_limit": rate_limit,
                "start_from_trigger": start_from_trigger,
                "due": due,
                "on_late": late.on_late_for_the_rule(on_late, due, kwargs.get("default_args") or {}),
            },
        )
        # Airflow's own exponential series never runs: our policy governs every interval, and the attribute
        # keeps the value given (a subclass may read it). An explicit exponential_backoff=False asks for
        # Airflow's fixed interval: it changes our defaults accordingly; True keeps them (a growing interval).
        exponential = kwargs.get("exponential_backoff")
        defaults = growth(
            {"exponential_backoff": exponential, "backoff_factor": backoff_factor, "jitter": jitter}
        )
        super().__init__(**kwargs)
        deferrable = deferrable_value(deferrable)
        self.backoff_factor = defaults["backoff_factor"]
        self.jitter = defaults["jitter"]
        self.splay = splay
        self.deferrable = deferrable
        self.deferrable_fallback = deferrable_fallback
        self.transient_errors = transient_errors
        self.transient_error_types = resolve_error_types(transient_errors, "transient_errors")
        self.check_timeout = check_timeout_seconds(check_timeout)
        self.rate_limit = rate_limit_value(rate_limit)
        #: Failed checks in a row ridden out as "not yet" (logged with each one).
        self.consecutive_errors = 0
        self.backoff_policy = self._build_policy()
        self.deferrable_fallback_reason: str | None = None
        self.start_from_trigger_requested = start_from_trigger
        self.due = late.due_time(due)
        self.on_late = on_late
        #: Why this deferrable task starts on a worker (None: it starts in the triggerer, or not deferrable).
        self.worker_first_reason: str | None = None
        #: Why the subclass defers on its own (TimeSensor / *Async pattern; None: BackoffSensor defers it).
        self.own_deferral_reason: str | None = own_deferral_reason(type(self), BackoffSensor)

    def _validate_after_init(self) -> None:
        """Checks that need the *complete* constructor arguments (run by the metaclass after __init__).

        Airflow records a subclass's own arguments only after its ``__init__`` returns, so the
        shippability of a custom sensor cannot be judged inside ``BackoffSensor.__init__``.
        """
        self._warn_about_airflow_backoff()
        self.own_deferral_reason = own_deferral_reason(type(self), BackoffSensor)
        problem = late.deferrable_problem(self.due, self.deferrable, self.own_deferral_reason)
        if problem is not None:
            raise ValueError(f"Task {self.task_id!r}: {problem}")
        if self.own_deferral_reason is not None:
            # The TimeSensor / *Async pattern: the subclass's own trigger, start_trigger_args and resume stay
            # as they are; our schedule governs the waits BackoffSensor.execute runs (poke, reschedule).
            if self.deferrable or getattr(self, "start_from_trigger", False):
                self.log.info(
                    "Task %r defers on its own (%s): BackoffSensor leaves its deferral, its trigger and its "
                    "resume to it (Airflow's own semantics); the backoff schedule applies to its poke and "
                    "reschedule waits.",
                    self.task_id,
                    self.own_deferral_reason,
                )
            return
        if not self.deferrable:
            return
        problem = self.shippability_problem()
        if problem is None:
            start_plan.plan_start(self)
            return
        if self.deferrable_fallback != "reschedule":
            raise ValueError(to_triggerer.unshippable_message(self.task_id, problem))
        self.deferrable = False
        self.mode = "reschedule"
        self.deferrable_fallback_reason = problem
        self.log.warning(
            "Task %r cannot run deferrably (%s); deferrable_fallback='reschedule': using reschedule mode.",
            self.task_id,
            problem,
        )

    def _warn_about_airflow_backoff(self) -> None:
        """Say at DAG parse when Airflow's own backoff knobs do not mean what they meant on Airflow's base."""
        if type(self)._get_next_poke_interval is not BackoffSensor._get_next_poke_interval:
            self.log.warning(
                "Task %r: %s overrides _get_next_poke_interval, which BackoffSensor never calls: every "
                "interval follows the backoff schedule (%s). Express the intervals with poke_interval, "
                "backoff_factor, jitter and max_wait instead, or keep Airflow's BaseSensorOperator as the base.",
                self.task_id,
                type(self).__qualname__,
                self.backoff_policy.describe(),
            )
        if self.exponential_backoff is True and self.backoff_factor == 1:
            self.log.warning(
                "Task %r: exponential_backoff=True with backoff_factor=1: the interval stays fixed "
                "(backoff_factor decides; Airflow's own exponential series never runs).",
                self.task_id,
            )

    def _get_next_poke_interval(self, started_at: Any, run_duration: Any, poke_count: int) -> float:
        """The schedule's base interval after poke ``poke_count`` (1-based; before jitter and splay), at most
        the time left to the timeout. Airflow's own exponential series never runs; this keeps the method
        truthful for code that calls it (``BackoffSensor`` itself never does)."""
        interval = self.backoff_policy.base_interval(max(int(poke_count), 1) - 1)
        return max(0.0, min(interval, self.timeout - float(run_duration())))

    # ------------------------------------------------------------------ parameters
    def _build_policy(self) -> BackoffPolicy:
        """Validate the backoff parameters in the sensor's own terms, then build the policy."""
        return backoff_policy_for(
            task_id=self.task_id,
            poke_interval=self.poke_interval,
            max_wait=self.max_wait,
            timeout=self.timeout,
            backoff_factor=self.backoff_factor,
            jitter=self.jitter,
            splay=self.splay,
        )

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:  # type: ignore[override]
        """``.partial()`` of a mapped sensor: its constructor runs only at task run time, so every check the
        constructor makes on the arguments known now runs here, at DAG parse, with the same messages; the
        literal values of ``.expand()`` / ``.expand_kwargs()`` are checked when it is called (values from an
        upstream task's XCom when the task runs).
        """
        known = partial_arguments(cls, kwargs)
        cls._check_static_arguments(known, unknown=rule_parameters() - set(known))
        inherited = compat.dag_parsing.partial_default_args(kwargs.get("dag"), kwargs.get("task_group"))
        partial = super().partial(**late.partial_kwargs(kwargs))
        return CheckedPartial(partial, cls, known, inherited_due=inherited.get("due"))

    @property
    def smart_ext_due(self) -> str | None:
        """The due time in the serialized DAG (``timetables.due.SERIALIZED_KEY``): the Calendars view reads it."""
        return late.serialized(self.due)

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:  # Airflow's way to keep an operator's own field
        from airflow_smart_ext.timetables.due import SERIALIZED_KEY

        return frozenset(super().get_serialized_fields()) | {SERIALIZED_KEY}

    @classmethod
    def parameter_table(cls) -> tuple[Parameter, ...]:
        """The rows of every parameter this class accepts (a subclass adds its own rows)."""
        return PARAMETERS

    @classmethod
    def _check_own_arguments(cls, arguments: Mapping[str, Any]) -> None:
        """A subclass's checks of its own constructor arguments (those given), shared by ``__init__`` and
        ``partial``: mapped and unmapped sensors get identical validation."""

    @classmethod
    def _check_static_arguments(cls, known: Mapping[str, Any], unknown: Collection[str] = ()) -> None:
        """Every constructor check on the arguments known at DAG parse (XComArg values are skipped)."""
        check_static_arguments(cls, known, unknown)

    # ------------------------------------------------------------------ execute (the modes)
    def execute(self, context: Any) -> Any:
        if self.deferrable_fallback_reason:
            self.log.warning(
                "Running in reschedule mode instead of deferrable (deferrable_fallback='reschedule'): %s",
                self.deferrable_fallback_reason,
            )
        if self.deferrable and self.own_deferral_reason is None:
            start_plan.log_worker_first(self, context)
            return deferral.execute_deferrable(self, context)
        # A subclass that defers on its own calls this for its waits on a worker: Airflow's base ignores
        # ``deferrable`` here too.
        seed = poke_mode.task_schedule_seed(context, self)
        if self.reschedule:
            return reschedule.execute_reschedule(self, context, seed)
        return poke_mode.execute_poke(self, context, seed)

    def execute_complete(
        self,
        context: Any,
        event: Mapping[str, Any] | None = None,
        started_at: float | None = None,
        deadline: float | None = None,
        seed: str | None = None,
        worker_pokes: int = 1,
        after: int | None = None,
        late_told: bool = False,
    ) -> Any:
        """Resume after ``BackoffTrigger`` fired; outcomes map exactly as in poke mode."""
        return deferral.resume(
            self, context, event, started_at, deadline, seed, worker_pokes, after, late_told=late_told
        )

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        if self.own_deferral_reason is not None:
            # The subclass deferred on its own: Airflow's own resume, exactly (its timeout mapping and its
            # soft_fail / never_fail wrapper around the subclass's method, as this Airflow version does).
            return super().resume_execution(next_method, next_kwargs, context)
        if compat.sensor_timeouts.is_trigger_timeout(next_method, next_kwargs):
            deferral.deferral_timed_out(self)  # Airflow's backstop fired
        if next_method == "execute_complete" and (
            type(self).execute_complete is BackoffSensor.execute_complete
            or deferral.is_our_resume(next_kwargs)
        ):
            # Our own resume: execute_complete already maps every outcome exactly as poke mode does.
            # Airflow's sensor wrapper would turn any AirflowException (a failing check) into a skip when
            # soft_fail is set, where poke mode fails (and retries) the task.
            return self.execute_complete(context, **(next_kwargs or {}))
        # Any other method (a subclass's own execute_complete, not resuming a deferral of ours): Airflow's
        # wrapper, so soft_fail / never_fail skip what it raises exactly as on Airflow's base.
        return super().resume_execution(next_method, next_kwargs, context)

    # ------------------------------------------------------------------ shipping to the triggerer
    def shippability_problem(self) -> str | None:
        """Why this sensor cannot run in the triggerer (checked at DAG parse), or None when it can."""
        return to_triggerer.shippability_problem(self)

    @classmethod
    def _shipping_problem(cls, own_kwargs: Mapping[str, Any]) -> str | None:
        """Why ``cls(**own_kwargs)`` cannot be re-created in the triggerer (mapped and unmapped alike)."""
        return to_triggerer.class_shipping_problem(cls, own_kwargs)

    def deferrable_check(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """The ``"sensor"`` check spec (``conditions/spec.py``): re-create this sensor in the triggerer and poke it."""
        return to_triggerer.sensor_check_spec(self, context)
