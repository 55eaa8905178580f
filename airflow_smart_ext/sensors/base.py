"""``BackoffSensor``: a drop-in ``BaseSensorOperator`` whose pokes follow a seeded backoff schedule.

An existing sensor changes only its base class. Poke mode, reschedule mode and deferrable mode all ask
the same pure :class:`~airflow_smart_ext.backoff.BackoffPolicy` "when is the next check?", so the poke
times are identical in every mode and survive reschedules (and triggerer restarts).
"""

from __future__ import annotations

import datetime
import inspect
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import (
    JITTER_STRATEGIES,
    BackoffPolicy,
    ScheduledCheck,
    aligned_start,
    condition_seed,
    task_seed,
)
from airflow_smart_ext.conditions import Ending, outcome_from_exception, sensor, sharing_key, task_ending
from airflow_smart_ext.conditions.outcomes import STATS_XCOM_KEY
from airflow_smart_ext.conditions.runtime import callable_path, config_non_negative_float, json_problem
from airflow_smart_ext.errors import classify, error_type_paths, resolve_error_types

if TYPE_CHECKING:
    from airflow_smart_ext.compat import PokeReturnValue

# Defaults (see docs/sensors.md "Defaults and why"). Change them here, in one place.
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_JITTER = "full"
#: ``splay=None`` means "one poke_interval": enough to spread a herd over the first interval.
DEFAULT_SPLAY: float | None = None
DEFAULT_POKE_INTERVAL = 60.0  # BaseSensorOperator's own default
#: Seconds added to a deferral's Airflow timeout so the trigger's own final check and "timeout" event
#: always win over Airflow's trigger timeout (2.11 would turn that into a retryable TaskDeferralError).
DEFERRAL_GRACE_SECONDS = 60.0
DEFERRABLE_FALLBACKS = (None, "reschedule")
#: Largest accepted ``backoff_factor``: beyond it the second interval already jumps to the cap.
MAX_BACKOFF_FACTOR = 10.0
#: ``jitter="decorrelated"`` is replayed check by check (a cold replay is O(n) and runs under a lock):
#: accepted when ``timeout / poke_interval`` stays below this (the default 7-day timeout at 60 s fits).
MAX_DECORRELATED_SENSOR_CHECKS = 20_000
#: Without ``max_wait``, no interval exceeds ``DEFAULT_MAX_WAIT_FACTOR * poke_interval`` and never one hour
#: (docs/backoff.md "The default cap"): a swapped-in base class keeps detection latency bounded.
DEFAULT_MAX_WAIT_FACTOR = 10.0
DEFAULT_MAX_WAIT_CEILING = 3600.0
# Reschedule mode waits for a splayed first poke only when the splay offset is at least this long: a
# shorter wait is not worth a trip through the scheduler (poke mode always sleeps it).
SPLAY_RESCHEDULE_MIN_SECONDS = 1.0
_METRIC_PREFIX = "smart_ext.sensor"


def _wall_clock() -> float:
    """Epoch seconds; one indirection so tests can drive the clock."""
    return time.time()


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _to_seconds(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    """Seconds from a number or a ``timedelta``; a clear ValueError naming ``name`` otherwise."""
    if value is None and allow_none:
        return None
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    accepted = "a number of seconds or a datetime.timedelta" + (" or None" if allow_none else "")
    raise ValueError(f"{name} must be {accepted}; got {value!r}")


def _epoch(value: datetime.datetime) -> float:
    if value.tzinfo is None:  # Airflow stores UTC; a naive value here is UTC by convention
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.timestamp()


def _utc(epoch_seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch_seconds, tz=datetime.timezone.utc)


def check_timeout_seconds(value: Any) -> float | None:
    """``check_timeout`` in seconds (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    seconds = _to_seconds(value, "check_timeout", allow_none=True)
    if seconds is not None and seconds <= 0:
        raise ValueError(f"check_timeout must be > 0 seconds (or None for the default); got {value!r}")
    return seconds


def rate_limit_value(value: Any) -> float | None:
    """``rate_limit`` in checks per second (> 0) or None; ``ValueError`` naming the parameter otherwise."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"rate_limit must be a number of checks per second > 0, or None; got {value!r}")
    return float(value)


def _deferrable_value(deferrable: Any) -> bool:
    """``deferrable`` (None: ``[operators] default_deferrable``); ``ValueError`` unless a bool."""
    if deferrable is None:
        deferrable = compat.airflow_conf.getboolean("operators", "default_deferrable", fallback=False)
    if not isinstance(deferrable, bool):
        raise ValueError(f"deferrable must be True or False; got {deferrable!r}")
    return deferrable


def _check_deferrable_fallback(deferrable_fallback: Any) -> None:
    if deferrable_fallback not in DEFERRABLE_FALLBACKS:
        raise ValueError(
            f"deferrable_fallback must be one of {DEFERRABLE_FALLBACKS}; got {deferrable_fallback!r}"
        )


def _check_start_from_trigger(start_from_trigger: Any) -> None:
    if start_from_trigger not in (None, True, False):
        raise ValueError(f"start_from_trigger must be None, True or False; got {start_from_trigger!r}")


def _transient_errors_problem(types: tuple[type[BaseException], ...]) -> str | None:
    """The triggerer imports ``transient_errors`` by name: a class defined in a DAG file cannot travel."""
    for cls in types:
        if callable_path(cls) is None:
            return (
                f"transient_errors: {cls.__module__}.{cls.__qualname__} cannot be imported by name in the "
                f"triggerer; define it in an installed package or a module of the plugins/DAGs folder"
            )
    return None


def _unshippable_message(task_id: Any, problem: str) -> str:
    return (
        f"Task {task_id!r}: deferrable=True but this sensor cannot be shipped to the "
        f"triggerer: {problem}. Fix that, set deferrable=False, or pass "
        f"deferrable_fallback='reschedule' to run in reschedule mode instead."
    )


def default_max_wait(poke_interval: float) -> float:
    """The cap on intervals when ``max_wait`` is not given: 10x ``poke_interval``, at most one hour (and
    never below ``poke_interval`` itself)."""
    return max(poke_interval, min(DEFAULT_MAX_WAIT_FACTOR * poke_interval, DEFAULT_MAX_WAIT_CEILING))


def backoff_policy_for(
    *,
    task_id: str,
    poke_interval: Any,
    max_wait: Any = None,
    timeout: Any,
    backoff_factor: Any = DEFAULT_BACKOFF_FACTOR,
    jitter: Any = DEFAULT_JITTER,
    splay: Any = DEFAULT_SPLAY,
) -> BackoffPolicy:
    """The policy of a sensor with these arguments; ``ValueError`` naming the parameter when one is invalid.

    Accepts the forms a DAG file passes (seconds or ``timedelta``), so ``.partial()`` can check a mapped
    sensor at parse time before any instance exists.
    """
    initial = _to_seconds(poke_interval, "poke_interval")
    assert initial is not None
    if initial <= 0:
        raise ValueError(
            f"poke_interval must be > 0 seconds (the first backoff interval); got {poke_interval!r}"
        )
    factor = backoff_factor
    if (
        isinstance(factor, bool)
        or not isinstance(factor, (int, float))
        or not math.isfinite(factor)
        or factor < 1
        or factor > MAX_BACKOFF_FACTOR
    ):
        raise ValueError(
            f"backoff_factor must be a finite number >= 1 and <= {MAX_BACKOFF_FACTOR:g} "
            f"(1 = fixed interval); got {factor!r}"
        )
    if jitter not in JITTER_STRATEGIES:
        raise ValueError(f"jitter must be one of {', '.join(JITTER_STRATEGIES)}; got {jitter!r}")
    cap = _to_seconds(max_wait, "max_wait", allow_none=True)
    if cap is not None and cap < initial:
        raise ValueError(
            f"max_wait ({cap:g}s) must be >= poke_interval ({initial:g}s): it caps the interval that "
            f"starts at poke_interval"
        )
    deadline = _to_seconds(timeout, "timeout")
    assert deadline is not None
    seconds = _to_seconds(splay, "splay", allow_none=True)
    if seconds is None:
        seconds = initial  # the default; the first check never comes after the deadline anyway
    elif seconds < 0:
        raise ValueError(f"splay must be >= 0 seconds; got {splay!r}")
    elif seconds > deadline:
        raise ValueError(
            f"splay ({seconds:g}s) must be <= timeout ({deadline:g}s): a larger splay would leave only the "
            f"final check at the deadline"
        )
    if cap is None:
        cap = default_max_wait(initial)
    if jitter == "decorrelated" and deadline / initial >= MAX_DECORRELATED_SENSOR_CHECKS:
        raise ValueError(
            f"jitter='decorrelated' is replayed check by check and supports at most "
            f"{MAX_DECORRELATED_SENSOR_CHECKS:,} checks, but timeout ({deadline:g}s) / poke_interval "
            f"({initial:g}s) allows more; raise poke_interval, lower timeout, or use jitter 'full', "
            f"'equal' or 'none' (computed in O(1))"
        )
    try:
        return BackoffPolicy(initial=initial, factor=float(factor), cap=cap, jitter=jitter, splay=seconds)
    except ValueError as err:  # backstop: the policy's own message names its parameter
        raise ValueError(f"Task {task_id!r}: invalid backoff settings: {err}") from err


class _BackoffSensorMeta(type(compat.BaseSensorOperator)):  # type: ignore[misc]
    """Runs ``_validate_after_init`` once the whole ``__init__`` chain (and Airflow's wrappers) finished."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__call__(*args, **kwargs)
        instance._validate_after_init()
        return instance


# Type checkers see the plain base class (a dynamic metaclass would make every user subclass a mypy error).
_METACLASS: dict[str, Any] = {} if TYPE_CHECKING else {"metaclass": _BackoffSensorMeta}


class BackoffSensor(compat.BaseSensorOperator, **_METACLASS):
    """Drop-in replacement for ``BaseSensorOperator`` with a seeded, deadline-aware backoff schedule.

    Every ``BaseSensorOperator`` parameter keeps its meaning: ``poke_interval`` is the *initial*
    interval, ``max_wait`` the cap on any interval, ``timeout`` the deadline measured from the start of
    the try (the first reschedule in reschedule mode), ``soft_fail``/``silent_fail``/``never_fail`` and
    ``mode`` behave as in Airflow. Airflow's own ``exponential_backoff`` series never runs: this class
    always follows its own policy. An explicit ``exponential_backoff=False`` keeps its Airflow meaning, a
    fixed interval: ``backoff_factor`` then defaults to 1 and ``jitter`` to ``none`` (splay still applies).

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
        **kwargs: Any,
    ) -> None:
        # Airflow's own exponential backoff never runs: our policy governs every interval. An explicit
        # exponential_backoff=False asks for Airflow's fixed interval: it changes our defaults accordingly.
        fixed_interval = kwargs.get("exponential_backoff") is False
        kwargs["exponential_backoff"] = False
        if backoff_factor is None:
            backoff_factor = 1.0 if fixed_interval else DEFAULT_BACKOFF_FACTOR
        if jitter is None:
            jitter = "none" if fixed_interval else DEFAULT_JITTER
        super().__init__(**kwargs)
        deferrable = _deferrable_value(deferrable)
        _check_deferrable_fallback(deferrable_fallback)
        self.backoff_factor = backoff_factor
        self.jitter = jitter
        self.splay = splay
        self.deferrable = deferrable
        self.deferrable_fallback = deferrable_fallback
        self.transient_errors = transient_errors
        self.transient_error_types = resolve_error_types(transient_errors, "transient_errors")
        self.check_timeout = check_timeout_seconds(check_timeout)
        self.rate_limit = rate_limit_value(rate_limit)
        self._consecutive_errors = 0
        self.backoff_policy = self._build_policy()
        self.deferrable_fallback_reason: str | None = None
        _check_start_from_trigger(start_from_trigger)
        self.start_from_trigger_requested = start_from_trigger
        #: Why this deferrable task starts on a worker (None: it starts in the triggerer, or not deferrable).
        self.worker_first_reason: str | None = None

    def _validate_after_init(self) -> None:
        """Checks that need the *complete* constructor arguments (run by the metaclass after __init__).

        Airflow records a subclass's own arguments only after its ``__init__`` returns, so the
        shippability of a custom sensor cannot be judged inside ``BackoffSensor.__init__``.
        """
        if not self.deferrable:
            return
        problem = self.shippability_problem()
        if problem is None:
            self._plan_start()
            return
        if self.deferrable_fallback != "reschedule":
            raise ValueError(_unshippable_message(self.task_id, problem))
        self.deferrable = False
        self.mode = "reschedule"
        self.deferrable_fallback_reason = problem
        self.log.warning(
            "Task %r cannot run deferrably (%s); deferrable_fallback='reschedule': using reschedule mode.",
            self.task_id,
            problem,
        )

    # ------------------------------------------------------------------ policy
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
        known = {**dict(kwargs.get("default_args") or {}), **kwargs}
        cls._check_static_arguments(known)
        return _CheckedPartial(super().partial(**kwargs), cls, known)

    @classmethod
    def _check_own_arguments(cls, arguments: Mapping[str, Any]) -> None:
        """A subclass's checks of its own constructor arguments (those given), shared by ``__init__`` and
        ``partial``: mapped and unmapped sensors get identical validation."""

    @classmethod
    def _check_static_arguments(cls, known: Mapping[str, Any]) -> None:
        """Every constructor check on the arguments known at DAG parse (XComArg values are skipped)."""
        static = {name: value for name, value in known.items() if not compat.is_runtime_value(value)}
        task_id = known.get("task_id")
        deferrable = _deferrable_value(static.get("deferrable"))
        fallback = static.get("deferrable_fallback")
        _check_deferrable_fallback(fallback)
        _check_start_from_trigger(static.get("start_from_trigger"))
        cls._check_own_arguments(static)
        resolve_error_types(static.get("transient_errors"), "transient_errors")
        check_timeout_seconds(static.get("check_timeout"))
        rate_limit_value(static.get("rate_limit"))
        arguments = {
            name: known[name]
            for name in ("poke_interval", "max_wait", "timeout", "backoff_factor", "jitter", "splay")
            if known.get(name) is not None  # None means "the default", as in the constructor
        }
        if not any(compat.is_runtime_value(value) for value in arguments.values()):
            fixed = known.get("exponential_backoff") is False
            arguments.setdefault("backoff_factor", 1.0 if fixed else DEFAULT_BACKOFF_FACTOR)
            arguments.setdefault("jitter", "none" if fixed else DEFAULT_JITTER)
            arguments.setdefault("poke_interval", DEFAULT_POKE_INTERVAL)
            arguments.setdefault(
                "timeout", compat.airflow_conf.getfloat("sensors", "default_timeout", fallback=7 * 86400)
            )
            backoff_policy_for(task_id=str(task_id), **arguments)
        if deferrable and fallback != "reschedule":
            framework = cls._framework_parameters()
            own = {name: value for name, value in static.items() if name not in framework}
            problem = _transient_errors_problem(
                resolve_error_types(static.get("transient_errors"), "transient_errors")
            ) or cls._shipping_problem(own)
            if problem is not None:
                raise ValueError(_unshippable_message(task_id, problem))

    def _seed(self, context: Mapping[str, Any]) -> str:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return task_seed(
            ti.dag_id,
            ti.task_id,
            ti.run_id,
            -1 if map_index is None else int(map_index),
            int(getattr(ti, "try_number", 1) or 1),
        )

    def _first_check_at(self, seed: str, started_at: float, deadline: float) -> float:
        """When check #0 is due: the splayed start of the schedule (never after the deadline).

        Not ``_next_check(after=None)``: that is the first check due *from now*, i.e. check #1 once check
        #0's small (or zero) splay offset has passed, which delayed the first poke by a whole interval.
        """
        return min(started_at + self.backoff_policy.offset(seed, 0), deadline)

    def _next_check(
        self, seed: str, started_at: float, deadline: float, after: int | None
    ) -> ScheduledCheck | None:
        return self.backoff_policy.next_check(seed, started_at, _wall_clock(), deadline, after=after)

    # ------------------------------------------------------------------ poking
    def _poke_once(self, context: Any, seed: str, index: int, pokes: int) -> tuple[bool, Any]:
        """One poke with Airflow's exception semantics (soft_fail / silent_fail / never_fail)."""
        self._incr("pokes", context)
        try:
            result: bool | PokeReturnValue = self.poke(context)
        except compat.AirflowSkipException:
            raise
        except compat.CHECK_ERRORS as err:
            outcome = outcome_from_exception(err)
            error_class = classify(err, self.transient_error_types) if outcome.status == "error" else None
            transient = error_class is not None and error_class.transient
            ending = task_ending(
                outcome.status,
                soft_fail=self.soft_fail,
                never_fail=getattr(self, "never_fail", False),
                silent_fail=getattr(self, "silent_fail", False),
                transient=transient,
            )
            if ending is Ending.NOT_YET:
                self._consecutive_errors += 1
                if transient and error_class is not None:
                    self.log.warning(
                        "Poke #%d (check #%d) failed with a transient error (%s, %d in a row): %s; "
                        "treating it as 'not yet'",
                        pokes,
                        index,
                        error_class.reason,
                        self._consecutive_errors,
                        outcome.message,
                    )
                    self._incr("transient_errors", context)
                else:
                    self.log.exception(
                        "Poke #%d (check #%d) failed (%d in a row); silent_fail=True: treating it as 'not yet'",
                        pokes,
                        index,
                        self._consecutive_errors,
                    )
                self._incr("poke_errors", context)
                return False, None
            if ending is Ending.SKIP:
                flag = "soft_fail" if self.soft_fail and outcome.status != "error" else "never_fail"
                raise compat.AirflowSkipException(f"Skipping due to {flag} is set to True.") from err
            raise  # the poke's own exception decides retries, as in Airflow
        self._consecutive_errors = 0
        if isinstance(result, compat.PokeReturnValue):
            return bool(result.is_done), result.xcom_value
        return bool(result), None

    def _log_not_yet(self, pokes: int, index: int, nxt: ScheduledCheck, now: float) -> None:
        self.log.info(
            "Poke #%d (check #%d): condition not met; next check #%d in %.3fs at %s%s",
            pokes,
            index,
            nxt.index,
            max(0.0, nxt.at - now),
            _utc(nxt.at).isoformat(),
            " (final check, at the timeout)" if nxt.final else "",
        )

    def _timed_out(self, context: Any, started_at: float, pokes: int) -> None:
        waited = _wall_clock() - started_at
        self._incr("timeouts", context)
        message = (
            f"Sensor has timed out after {pokes} poke(s) and {waited:.1f}s; the final check was at the "
            f"timeout of {self.timeout:g}s."
        )
        if self.soft_fail:
            raise compat.AirflowSkipException(message + " Skipping (soft_fail=True).")
        raise compat.AirflowSensorTimeout(message)

    def _succeeded(self, context: Any, started_at: float, pokes: int, xcom_value: Any, mode: str) -> Any:
        waited = max(0.0, _wall_clock() - started_at)
        self.log.info(
            "Success criteria met after %d poke(s), %.3fs after the start (%s mode, %s).",
            pokes,
            waited,
            mode,
            self.backoff_policy.describe(),
        )
        self._incr("successes", context)
        if self.do_xcom_push:
            context["ti"].xcom_push(
                key=STATS_XCOM_KEY, value={"pokes": pokes, "waited_seconds": round(waited, 3), "mode": mode}
            )
        return xcom_value

    def _incr(self, what: str, context: Any) -> None:
        ti = context["ti"]
        try:
            compat.Stats.incr(
                f"{_METRIC_PREFIX}.{what}",
                tags={"dag_id": ti.dag_id, "task_id": ti.task_id, "sensor": type(self).__name__},
            )
        except Exception:  # metrics must never fail a sensor
            self.log.debug("Could not emit metric %s", what, exc_info=True)

    # ------------------------------------------------------------------ execute
    def execute(self, context: Any) -> Any:
        if self.deferrable_fallback_reason:
            self.log.warning(
                "Running in reschedule mode instead of deferrable (deferrable_fallback='reschedule'): %s",
                self.deferrable_fallback_reason,
            )
        if self.deferrable:
            self._log_worker_first(context)
            return self._execute_deferrable(context)
        seed = self._seed(context)
        if self.reschedule:
            return self._execute_reschedule(context, seed)
        return self._execute_poke(context, seed)

    def _execute_poke(self, context: Any, seed: str) -> Any:
        started_at = _wall_clock()
        deadline = started_at + self.timeout
        index, pokes = 0, 1
        self.log.info(
            "Backoff schedule: %s; timeout %gs (poke mode)", self.backoff_policy.describe(), self.timeout
        )
        first_at = self._first_check_at(seed, started_at, deadline)
        if first_at > _wall_clock():
            # The splay: sensors created together spread their first poke over [0, splay).
            self.log.info(
                "First poke splayed by %.3fs to %s", first_at - started_at, _utc(first_at).isoformat()
            )
            _sleep(first_at - _wall_clock())
        while True:
            done, xcom_value = self._poke_once(context, seed, index, pokes)
            if done:
                return self._succeeded(context, started_at, pokes, xcom_value, "poke")
            nxt = self._next_check(seed, started_at, deadline, index)
            if nxt is None:
                self._timed_out(context, started_at, pokes)
                return None  # unreachable: _timed_out raises
            now = _wall_clock()
            self._log_not_yet(pokes, index, nxt, now)
            if nxt.at > now:
                _sleep(nxt.at - now)
            index, pokes = nxt.index, pokes + 1

    def _execute_reschedule(self, context: Any, seed: str) -> Any:
        # The exact number of earlier pokes of this try and the try's anchor, from Airflow's records
        # (not re-estimated by replaying intervals as Airflow's own sensor does).
        count, first_date = compat.sensor_reschedule_state(context)
        started_at = _epoch(first_date) if first_date is not None else _wall_clock()
        deadline = started_at + self.timeout
        # Earlier pokes of this try were checks 0..count-1 in order; a late reschedule skips checks whose
        # time has passed, which next_check(now=...) skips anyway, so `after=count` gives the same answer.
        # A splay of at least SPLAY_RESCHEDULE_MIN_SECONDS costs the first run a reschedule without a poke;
        # whether it did is a pure function of the seed, so later runs know which index they are at.
        # Airflow 3 needs a reschedule at least RESCHEDULE_MIN_GAP_SECONDS ahead (executor race): a shorter
        # splay is slept on the worker instead.
        splay_wait = self.backoff_policy.offset(seed, 0) >= max(
            SPLAY_RESCHEDULE_MIN_SECONDS, compat.RESCHEDULE_MIN_GAP_SECONDS
        )
        if count == 0:
            self.log.info(
                "Backoff schedule: %s; timeout %gs (reschedule mode)",
                self.backoff_policy.describe(),
                self.timeout,
            )
            first_at = self._first_check_at(seed, started_at, deadline)
            if first_at > _wall_clock():
                self.log.info(
                    "First poke splayed by %.3fs to %s", first_at - started_at, _utc(first_at).isoformat()
                )
                if splay_wait:
                    run_at = max(first_at, _wall_clock() + compat.RESCHEDULE_MIN_GAP_SECONDS)
                    raise compat.AirflowRescheduleException(_utc(run_at))
                _sleep(first_at - _wall_clock())  # too short for a reschedule: as poke mode does
        index = count - 1 if splay_wait and count > 0 else count
        pokes = index + 1
        done, xcom_value = self._poke_once(context, seed, index, pokes)
        if done:
            return self._succeeded(context, started_at, pokes, xcom_value, "reschedule")
        if count == 0:
            # Later runs anchor on the first reschedule's recorded start date: predict it now, so a slow
            # first poke does not shift the schedule (and the deadline) between this run and the next.
            started_at = compat.first_reschedule_anchor(context, _wall_clock())
            deadline = started_at + self.timeout
        nxt = self._next_check(seed, started_at, deadline, index)
        if nxt is None:
            self._timed_out(context, started_at, pokes)
            return None
        now = _wall_clock()
        self._log_not_yet(pokes, index, nxt, now)
        run_at = max(nxt.at, now + compat.RESCHEDULE_MIN_GAP_SECONDS)
        if run_at > nxt.at:
            self.log.info(
                "Check #%d runs %.3fs late: Airflow reschedules no sooner than %gs (executor race)",
                nxt.index,
                run_at - nxt.at,
                compat.RESCHEDULE_MIN_GAP_SECONDS,
            )
        raise compat.AirflowRescheduleException(_utc(run_at))

    # ------------------------------------------------------------------ deferrable (Contract C)
    def _execute_deferrable(self, context: Any) -> Any:
        started_at = _wall_clock()
        deadline = started_at + self.timeout
        # Identical waits get one schedule (seed of the condition, not of the task), so the triggerer's
        # shared check serves all of them on the same cycle instead of one check per task.
        seed = condition_seed(sharing_key(self.deferrable_check(context)))
        if self._rate_limited():
            # The connection has a check budget, which only the triggerer can keep (it sees every pending
            # check): check #0 runs there too, paced with the others, instead of on every worker at once.
            return self._defer(context, seed, started_at, deadline, after=-1, worker_pokes=0)
        # A cheap positive needs no deferral: check #0 runs on the worker.
        done, xcom_value = self._poke_once(context, seed, 0, 1)
        if done:
            return self._succeeded(context, started_at, 1, xcom_value, "deferrable")
        return self._defer(context, seed, started_at, deadline, after=0, worker_pokes=1)

    def _rate_limited(self) -> bool:

        return bool(self.rate_limit or config_non_negative_float("max_checks_per_second_per_connection", 0.0))

    def _schedule_anchor(self, started_at: float) -> float:
        """Deferrable schedules start on the ``poke_interval`` grid: waits started seconds apart align."""
        return aligned_start(started_at, self.backoff_policy.initial)

    def _defer(
        self, context: Any, seed: str, started_at: float, deadline: float, *, after: int, worker_pokes: int
    ) -> Any:
        anchor = self._schedule_anchor(started_at)
        nxt = self._next_check(seed, anchor, deadline, after)
        if nxt is None:
            self._timed_out(context, started_at, worker_pokes)
            return None
        now = _wall_clock()
        if worker_pokes:
            self._log_not_yet(worker_pokes, after, nxt, now)
        # Slots of the schedule that passed before this deferral were no checks: the trigger starts after them.
        after = max(after, nxt.index - 1)
        from airflow_smart_ext.triggers import BackoffTrigger  # lazy: keep DAG parsing cheap

        trigger = BackoffTrigger(
            check=self.deferrable_check(context),
            policy=self.backoff_policy.to_dict(),
            seed=seed,
            started_at=anchor,
            deadline=deadline,
            after=after,
            transient_errors=error_type_paths(self.transient_error_types),
            silent_fail=bool(getattr(self, "silent_fail", False)),
            check_timeout=self.check_timeout,
            rate_limit=self.rate_limit,
        )
        # The deadline never moves: every (re)defer gets only the time left, plus a grace period so the
        # trigger's own final check and "timeout" event arrive before Airflow's trigger timeout.
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            kwargs={
                "started_at": started_at,
                "deadline": deadline,
                "seed": seed,
                "worker_pokes": worker_pokes,
                "after": after,
            },
            timeout=datetime.timedelta(seconds=max(0.0, deadline - now) + DEFERRAL_GRACE_SECONDS),
        )

    def execute_complete(
        self,
        context: Any,
        event: Mapping[str, Any] | None = None,
        started_at: float | None = None,
        deadline: float | None = None,
        seed: str | None = None,
        worker_pokes: int = 1,
        after: int | None = None,
    ) -> Any:
        """Resume after ``BackoffTrigger`` fired; outcomes map exactly as in poke mode."""
        event = dict(event or {})
        status = event.get("status")
        # Resumed from the zero-worker path: the try's start, deadline and seed travel in the event.
        started_at = event.get("started_at", started_at)
        deadline = event.get("deadline", deadline)
        seed = event.get("seed", seed)
        if after is not None and event.get("check_index") is not None:
            # Checks #after+1..#check_index ran in the triggerer (slots passed while down count too).
            pokes = int(worker_pokes) + max(0, int(event["check_index"]) - int(after))
        else:  # deferred by an older version: the event counts checks #0..#index of the schedule
            pokes = max(int(worker_pokes), int(event.get("pokes", 0) or 0))
        started = float(started_at) if started_at is not None else _wall_clock()
        message = str(event.get("message") or "")
        self.log.info(
            "Trigger finished: status=%s after %d check(s) in the triggerer (last check #%s): %s",
            status,
            pokes - int(worker_pokes),
            event.get("check_index"),
            message,
        )
        if status == "timeout":  # the deadline (or a check that said time is up): soft_fail decides
            self._timed_out(context, started, pokes)
            return None
        if status not in ("success", "skip", "failure", "error"):
            raise compat.AirflowException(f"Unexpected event from BackoffTrigger: {event!r}")
        if status == "failure":
            self._incr("failures", context)
        ending = task_ending(
            status,
            soft_fail=self.soft_fail,
            never_fail=getattr(self, "never_fail", False),
            silent_fail=getattr(self, "silent_fail", False),
        )
        if ending is Ending.SUCCEED:
            return self._succeeded(context, started, pokes, event.get("xcom_value"), "deferrable")
        if ending is Ending.NOT_YET and deadline is not None and seed is not None:
            # silent_fail: a failing check is "not yet"; continue the same schedule and deadline.
            self.log.error("Check failed in the triggerer; silent_fail=True: continuing. %s", message)
            after = int(event.get("check_index", 0) or 0)
            return self._defer(context, seed, started, float(deadline), after=after, worker_pokes=pokes)
        if status == "skip":  # the poke raised AirflowSkipException in the triggerer, as in poke mode
            raise compat.AirflowSkipException(message)
        if status == "failure":
            if ending is Ending.SKIP:
                raise compat.AirflowSkipException(
                    f"Failure criteria met; skipping (soft_fail/never_fail): {message}"
                )
            raise compat.AirflowFailException(f"Failure criteria met: {message}")
        if ending is Ending.SKIP:
            raise compat.AirflowSkipException(f"Check failed; skipping (never_fail=True): {message}")
        raise compat.AirflowException(f"Check failed in the triggerer: {message}")

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        if compat.is_deferral_timeout(next_method, next_kwargs):
            # 2.11 would raise a retryable TaskDeferralError; a sensor timeout is never retried.
            message = "Sensor has timed out: the deferral reached its timeout before the trigger reported."
            if self.soft_fail:
                raise compat.AirflowSkipException(message + " Skipping (soft_fail=True).")
            raise compat.AirflowSensorTimeout(message)
        if next_method == "execute_complete":
            # Our own resume: execute_complete already maps every outcome exactly as poke mode does.
            # Airflow's sensor wrapper would turn any AirflowException (a failing check) into a skip when
            # soft_fail is set, where poke mode fails (and retries) the task.
            return self.execute_complete(context, **(next_kwargs or {}))
        return super().resume_execution(next_method, next_kwargs, context)

    # ------------------------------------------------------------------ shipping to the triggerer
    @classmethod
    def _framework_parameters(cls) -> frozenset[str]:
        """Constructor parameters owned by BaseOperator / BaseSensorOperator / BackoffSensor."""
        names: set[str] = {"task_id", "dag", "task_group", "params", "default_args", "kwargs", "self"}
        for klass in compat.BaseSensorOperator.__mro__:
            init = klass.__dict__.get("__init__")
            if init is not None:
                names.update(inspect.signature(init).parameters)
        names.update(inspect.signature(BackoffSensor.__init__).parameters)
        return frozenset(names)

    def _constructor_kwargs(self) -> dict[str, Any]:
        """The subclass's own constructor arguments (what ``MySensor(**kwargs)`` needs besides framework ones)."""
        init_kwargs = compat.operator_init_kwargs(self)
        framework = self._framework_parameters()
        return {key: value for key, value in init_kwargs.items() if key not in framework}

    def shippability_problem(self) -> str | None:
        """Why this sensor cannot run in the triggerer (checked at DAG parse), or None when it can."""
        own = self._constructor_kwargs()
        return (
            _transient_errors_problem(self.transient_error_types)
            or type(self)._shipping_problem(own)
            or self._rendering_problem(own)
        )

    def _rendering_problem(self, own: Mapping[str, Any]) -> str | None:
        """The triggerer re-creates the sensor from its constructor arguments: a template field that is not
        one of them (``self.filepath = path``) would reach it unrendered."""
        fields = tuple(self.template_fields or ())
        framework = self._framework_parameters()
        lost = [name for name in fields if name not in own and name not in framework]
        raw = sorted(name for name, value in own.items() if name not in fields and _has_template(value))
        if not lost or not raw:
            return None
        return (
            f"template field(s) {lost} are not constructor arguments, so the sensor the triggerer re-creates "
            f"from its constructor arguments would see {raw} unrendered (Jinja left as is); name each "
            f"template field after the constructor argument it comes from"
        )

    @classmethod
    def _shipping_problem(cls, own_kwargs: Mapping[str, Any]) -> str | None:
        """Why ``cls(**own_kwargs)`` cannot be re-created in the triggerer (mapped and unmapped alike)."""
        if callable_path(cls) is None:
            return (
                f"its class {cls.__module__}.{cls.__qualname__} cannot be imported by name in the triggerer "
                f"(classes defined in a DAG file or inside a function are not importable there); move it "
                f"into an installed package, the plugins folder or a separate module in the DAGs folder"
            )
        for key, value in own_kwargs.items():
            if compat.holds_runtime_value(value):
                continue
            problem = json_problem(value)
            if problem is not None:
                return (
                    f"constructor argument {key!r}={value!r} does not travel to the triggerer as JSON unchanged "
                    f"({problem}); pass JSON values (str, int, float, bool, None, lists, dicts with str keys)"
                )
        return None

    def deferrable_check(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """The Contract C ``"sensor"`` check spec: re-create this sensor in the triggerer and poke it.

        ``kwargs`` are the rendered constructor arguments of the subclass (template fields take their
        rendered attribute values), excluding every BaseOperator/BaseSensorOperator/backoff argument.
        """
        classpath = callable_path(type(self))
        if classpath is None:  # validated at parse; a class can still be redefined dynamically
            raise compat.AirflowException(
                f"Cannot ship {type(self).__qualname__} to the triggerer: {self.shippability_problem()}"
            )
        template_fields = set(self.template_fields or ())
        kwargs: dict[str, Any] = {}
        for key, value in self._constructor_kwargs().items():
            rendered = getattr(self, key) if key in template_fields and hasattr(self, key) else value
            problem = json_problem(rendered)
            if problem is not None:
                raise compat.AirflowException(
                    f"Cannot defer task {self.task_id!r}: rendered argument {key!r} is not JSON-serializable "
                    f"({problem})."
                )
            kwargs[key] = rendered
        return sensor.build_spec(classpath, kwargs, context)

    # ------------------------------------------------------------------ starting in the triggerer
    def _plan_start(self) -> None:
        """Decide at DAG parse whether the scheduler starts this task in the triggerer (the zero-worker path).

        Sets Airflow's ``start_from_trigger`` / ``start_trigger_args`` (static, serialized with the DAG) or
        records in ``worker_first_reason`` why the task starts on a worker (logged when it runs).
        """
        self.start_from_trigger = False
        self.start_trigger_args = None
        reason, fields, check = self._start_problem()
        self.worker_first_reason = reason
        if reason is not None:
            return
        from airflow_smart_ext.triggers.start import CLASSPATH, RESUME_KWARGS  # lazy: keep DAG parsing cheap

        backstop = self.timeout + DEFERRAL_GRACE_SECONDS
        if self.execution_timeout:  # defer_task caps the trigger timeout by execution_timeout
            backstop = min(backstop, self.execution_timeout.total_seconds())
        start = {
            "check": check,
            "fields": {name: path for name, (path, _value) in fields.items()},
            "policy": self.backoff_policy.to_dict(),
            "timeout": self.timeout,
            "backstop_seconds": backstop,
            "transient_errors": error_type_paths(self.transient_error_types),
            "silent_fail": bool(getattr(self, "silent_fail", False)),
            "check_timeout": self.check_timeout,
            "rate_limit": self.rate_limit,
            "do_xcom_push": bool(self.do_xcom_push),
            "multiple_outputs": bool(getattr(self, "multiple_outputs", False)),
            "success_callbacks": bool(self.on_success_callback),
            "sensor": type(self).__name__,
        }
        self.start_from_trigger = True
        self.start_trigger_args = compat.StartTriggerArgs(
            trigger_cls=CLASSPATH,
            next_method="execute_complete",
            trigger_kwargs={"start": start, **{name: value for name, (_path, value) in fields.items()}},
            next_kwargs=dict(RESUME_KWARGS),
            timeout=datetime.timedelta(seconds=backstop),
        )

    def _start_problem(self) -> tuple[str | None, dict[str, tuple[list[str], Any]], dict[str, Any]]:
        """(why not, template field -> (its path in the check spec, raw value), the check spec).

        The check spec is built from the unrendered attributes; the triggerer renders the template fields
        (3.3+) and puts them back at their paths.
        """
        from airflow_smart_ext.triggers.start import reserved_field_names

        if self.start_from_trigger_requested is False:
            return "start_from_trigger=False: worker-first deferral as asked", {}, {}
        for name, value in self._constructor_kwargs().items():
            if compat.holds_runtime_value(value):  # before building the spec: an XComArg is no JSON value yet
                return f"argument {name!r} comes from an upstream task's XCom (resolved on a worker)", {}, {}
        check = self.deferrable_check({"ti": _ParseTimeTaskInstance(self.task_id)})
        in_spec = check["kwargs"] if check["type"] == "sensor" else check
        prefix = ["kwargs"] if check["type"] == "sensor" else []
        fields = {
            name: ([*prefix, name], in_spec[name]) for name in self.template_fields or () if name in in_spec
        }
        templated = False
        for name, (_path, value) in fields.items():
            if isinstance(value, str) and value.endswith(tuple(self.template_ext or ())):
                return f"argument {name!r} is a template file ({value!r}), rendered on a worker", {}, {}
            templated = templated or _has_template(value)
        dag = getattr(self, "dag", None) if self.has_dag() else None
        if templated and dag is not None and (dag.user_defined_macros or dag.user_defined_filters):
            return "its DAG's user_defined_macros/filters exist only where the DAG file is parsed", {}, {}
        clashing = reserved_field_names(fields)
        if clashing:
            return f"template field(s) {clashing} clash with the start trigger's own attributes", {}, {}
        return compat.start_from_trigger_problem(templated=templated), fields, check

    def _log_worker_first(self, context: Any) -> None:
        """Say why a deferrable task runs on a worker (never silently): the task log shows it."""
        reason = self.worker_first_reason
        if reason is None and self.start_from_trigger:
            map_index = getattr(context["ti"], "map_index", -1)
            reason = (
                compat.mapped_start_problem()
                if map_index is not None and map_index >= 0
                else "Airflow's scheduler started this try on a worker"
            )
        if reason is None:
            return
        log = self.log.info if self.start_from_trigger_requested is False else self.log.warning
        log(
            "Deferrable wait starts on a worker (check #0 here, then the triggerer), not in the triggerer: %s",
            reason,
        )


class _CheckedPartial:
    """What ``BackoffSensor.partial()`` returns: Airflow's partial, whose ``expand`` / ``expand_kwargs`` first
    check every literal mapped value as the constructor would (each value with the partial's arguments)."""

    def __init__(self, partial: Any, sensor_class: type[BackoffSensor], known: Mapping[str, Any]) -> None:
        self._partial = partial
        self._sensor_class = sensor_class
        self._known = dict(known)

    def _check(self, where: str, arguments: Mapping[str, Any]) -> None:
        try:
            self._sensor_class._check_static_arguments({**self._known, **arguments})
        except ValueError as err:
            raise ValueError(f"Task {self._known.get('task_id')!r}, {where}: {err}") from None

    def expand(self, **mapped_kwargs: Any) -> Any:
        for name, values in mapped_kwargs.items():
            if isinstance(values, (list, tuple)):  # literal lists; XComArgs resolve when the task runs
                for position, value in enumerate(values):
                    self._check(f".expand({name}=...) item {position}", {name: value})
        return self._partial.expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *args: Any, **options: Any) -> Any:
        if isinstance(kwargs, (list, tuple)):
            for position, entry in enumerate(kwargs):
                if isinstance(entry, dict):
                    self._check(f".expand_kwargs(...) item {position}", entry)
        return self._partial.expand_kwargs(kwargs, *args, **options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_partial", "_sensor_class", "_known"):
            raise AttributeError(name)  # copy/pickle probe these before __init__ ran
        return getattr(self._partial, name)


class _ParseTimeTaskInstance:
    """The task identity a check spec needs at DAG parse; the triggerer replaces it with the real run's."""

    def __init__(self, task_id: str) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index, self.try_number = "", task_id, "", -1, 1


def _has_template(value: Any) -> bool:
    """Whether a (nested) argument holds Jinja markup that must be rendered before the first check."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value or "{#" in value
    if isinstance(value, dict):
        return any(_has_template(item) for item in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(_has_template(item) for item in value)
    return False
