"""``BackoffStartTrigger``: the zero-worker path — a deferrable sensor that starts and ends in the triggerer.

The scheduler defers the task straight from the sensor's static ``start_trigger_args`` (no worker runs check
#0); Airflow renders the sensor's template fields on this trigger (3.3+); check #0 and every later check run
here on the sensor's backoff schedule (``BackoffTrigger``, shared with identical waits). On success the task
ends here with ``TaskSuccessEvent`` (the poke's XCom as ``return_value``); every other ending resumes the task
on a worker, whose ``execute_complete`` raises exactly what poke mode raises (a timeout is never retried, a
failure criterion fails without retry, a skip skips), because Airflow routes a ``TaskFailedEvent`` to a retry.

Restart-safe: the start of the try (hence the schedule anchor and the deadline) comes from what Airflow
persisted for the try (``compat.start_in_triggerer.trigger_try_started_at``), the seed from the rendered condition, so a rebuilt
trigger continues the same schedule and deadline.

Memory per wait does not grow with the DAG: when ``run`` starts, the trigger keeps what it needs from the task
instance and the template context as plain values and lets go of the copy of the DAG Airflow built for
rendering (``compat.start_in_triggerer.release_start_context``; docs/deferrable.md "Memory per wait").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from airflow_smart_ext import clock, compat
from airflow_smart_ext.backoff import BackoffPolicy, ScheduledCheck
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.conditions import sensor_poke as sensor_check
from airflow_smart_ext.conditions.outcomes import STATS_XCOM_KEY
from airflow_smart_ext.triggers import log_lines
from airflow_smart_ext.triggers.events import iso
from airflow_smart_ext.triggers.worker_first import BackoffTrigger
from airflow_smart_ext.wait_model import deferral_paths, parameters, timeline
from airflow_smart_ext.wait_model.condition import zero_worker_check
from airflow_smart_ext.wait_model.sharing import wait_seed

CLASSPATH = deferral_paths.START_TRIGGER
#: ``next_kwargs`` of a task resumed on a worker from the zero-worker path: no check ran on a worker.
RESUME_KWARGS = {"worker_pokes": 0, "after": -1}
_METRIC_PREFIX = "smart_ext.sensor"


def reserved_field_names(names: Iterable[str]) -> list[str]:
    """Template field names that cannot become attributes of this trigger (they would shadow its own)."""
    own = set(dir(BackoffStartTrigger)) | {"start", "field_names", "task_instance", "trigger_id", "task_id"}
    own |= {"render_template_as_native_obj", "template_fields", "template_ext", "timeout_after"}
    return sorted(name for name in names if name in own or name.startswith("_"))


def _render_native(trigger: Any, context: Any) -> bool:
    """Whether a worker would render this task's templates as native objects: the operator's own
    ``render_template_as_native_obj`` when set, else the DAG's (both serialized)."""
    own = getattr(getattr(trigger, "task", None), "render_template_as_native_obj", None)
    if own is not None:
        return bool(own)
    dag = context.get("dag") if hasattr(context, "get") else None
    return bool(getattr(dag, "render_template_as_native_obj", False))


def _maps_over_output(trigger: Any) -> bool:
    """Whether a downstream task maps over this task's XCom (Airflow must then record the map length, which
    only a worker does). 3.3+: from the serialized task the triggerer loaded; 2.11: unknown -> False."""
    task = getattr(trigger, "task", None)
    iter_dependants = getattr(task, "iter_mapped_dependants", None)
    if iter_dependants is None:
        return False
    try:
        return next(iter(iter_dependants()), None) is not None
    except Exception:  # a task shape we do not know: be safe and let a worker end it
        return True


class _ScheduleFromStart(BackoffTrigger):
    """The sensor's schedule with check #0 still to do (``after=-1``); ``started_at`` is the aligned anchor.

    A trigger built within one ``poke_interval`` of the start of the try runs check #0 at once (the grid slot
    of check #0, and maybe #1, can lie before the start of the try); a trigger rebuilt later continues the
    schedule (missed checks are skipped, as for any rebuilt trigger). A trigger that starts only after the
    deadline (a busy or restarted triggerer) still makes one final check, as poke mode's final check does.
    Check #0 (unless it is that final check) is served by any check of the group that started at or after
    the start of the try: it is as fresh as poke mode's check #0 at the start of the try, and a triggerer
    that takes a minute to start 1,000 such triggers queries each condition once, not once per late start.
    Built in-process by ``BackoffStartTrigger`` only, never serialized on its own.
    """

    try_started_at: float = 0.0

    async def _sharing_window(self, scheduled: ScheduledCheck, config: tuple[float, float]) -> float:
        window = await super()._sharing_window(scheduled, config)
        if scheduled.index == 0 and not scheduled.final:
            window = max(window, scheduled.at - self.try_started_at)
        return window


class BackoffStartTrigger(compat.locations.BaseTrigger):
    """Start a deferrable ``BackoffSensor`` in the triggerer and end it there on success.

    :param start: what the sensor fixed at DAG parse (``sensors/start_plan.plan_start``): the check spec
        with its templated values left out, where each template field goes in it (``fields``), the backoff
        policy, ``timeout``, the backstop applied by the scheduler, ``do_xcom_push`` and the sensor's name.
    :param fields: the sensor's template fields (raw; Airflow renders them on this trigger before ``run``).
    """

    def __init__(self, start: dict[str, Any], **fields: Any) -> None:
        super().__init__()
        if not isinstance(start, dict) or not {"policy", "timeout", "fields"} <= set(start):
            raise parameters.WaitArgumentError(
                "start must be the sensor's start plan (a dict with policy, timeout and fields); got "
                f"{type(start).__name__}"
            )
        parameters.check_trigger_arguments(
            {"check_timeout": start.get("check_timeout"), "rate_limit": start.get("rate_limit")},
            policy=start["policy"],
            timeout=start["timeout"],
        )
        self.start = start
        self.field_names = tuple(fields)
        for name, value in fields.items():
            setattr(self, name, value)
        self._render_context: Any = None
        # What the ending needs from the task instance, as plain values (taken when run() starts).
        self._try_number = 1
        self._maps_over_output = False
        self._metric_tags: dict[str, str] = {}
        self._run_instants: dict[str, Any] = {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {"start": self.start, **{name: getattr(self, name) for name in self.field_names}}

    def __repr__(self) -> str:  # field names only: Airflow's default prints them rendered (secrets too)
        return f"<{CLASSPATH} {self.start.get('sensor', '')} fields={list(self.field_names)}>"

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Called by the 3.3+ triggerer before ``run``: render with the DAG's own Jinja environment (native
        types when the DAG asks for them) and keep the context until ``run`` has taken the run's dates."""
        self._render_context = context
        # Airflow's Templater picks native rendering from this attribute (else from a DAG it lacks here).
        self.render_template_as_native_obj = _render_native(self, context)
        if jinja_env is None:
            jinja_env = compat.start_in_triggerer.trigger_template_env(self.render_template_as_native_obj)
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]  # 3.3+ only (never called on 2.11)

    def _check_spec(self, run_facts: dict[str, Any]) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in self.start["fields"]}
        return zero_worker_check(self.start, values, run_facts)

    async def _take_run_facts(self) -> dict[str, Any]:
        """The run facts and what the ending needs from the task instance, kept as plain values; then let go
        of the context and the DAG Airflow built for rendering, which would otherwise stay alive for the
        whole wait (memory per wait independent of the DAG's size: ``compat.start_in_triggerer.release_start_context``)."""
        ti: Any = self.task_instance  # 2.11: the ORM row; 3.3+: the runtime task instance
        facts: dict[str, Any] = {  # what a worker ships (sensor_check.build_spec), from the task instance
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": -1 if getattr(ti, "map_index", None) is None else int(ti.map_index),
            "try_number": int(getattr(ti, "try_number", 1) or 1),
        }
        instants = await compat.start_in_triggerer.trigger_run_dates(self, self._render_context)
        self._run_instants = instants
        facts.update(
            sensor_check.run_dates(
                instants["logical_date"], instants["data_interval_start"], instants["data_interval_end"]
            )
        )
        self._try_number = int(facts["try_number"])
        self._metric_tags = {
            "dag_id": facts["dag_id"],
            "task_id": facts["task_id"],
            "sensor": self.start.get("sensor", ""),
        }
        self._maps_over_output = (
            bool(self.start.get("do_xcom_push", True))
            and not self.start.get("multiple_outputs")
            and _maps_over_output(self)
        )
        compat.start_in_triggerer.release_start_context(self, self._render_context)
        self._render_context = None
        return facts

    def _incr(self, what: str, count: int = 1) -> None:
        try:
            compat.locations.Stats.incr(f"{_METRIC_PREFIX}.{what}", count=count, tags=self._metric_tags)
        except Exception as exc:  # metrics must never fail a sensor
            log_lines.emit(self.log, "debug", "Could not emit metric %s: %r", what, exc)

    def _retry_took_late_as_told(self, started_at: float, due_at: float | None) -> bool:
        """Whether this try starts with its late alert taken as said. Where the task state store keeps what the
        task instance said (3.3+), never: the late event resumes the task on a worker, which reads the record
        (a trigger cannot) and says it only if no earlier try did. Before 3.3: a retry that started after the
        due time says nothing again (``Timeline.tells_late``)."""
        if due_at is None or compat.task_state.TASK_STATE_STORE_SUPPORTED:
            return False
        return timeline.retried_after_due(self._try_number > 1, started_at, due_at)

    async def run(self) -> AsyncIterator[Any]:
        start = self.start
        started_at = compat.start_in_triggerer.trigger_try_started_at(self, float(start["backstop_seconds"]))
        if started_at is None:  # not expected on 2.11 / 3.3+; a wait must not be lost over it
            started_at = clock.now()
            log_lines.emit(
                self.log,
                "warning",
                "The start of the try is unknown; anchoring the schedule at the current time.",
            )
        check = self._check_spec(await self._take_run_facts())
        seed = wait_seed(check)
        # execution_timeout ends the wait as in poke mode: the schedule stops at the earlier deadline and the
        # event says which one it was (the worker raises AirflowTaskTimeout for the execution deadline).
        ends = timeline.deadlines(started_at, float(start["timeout"]), start.get("execution_timeout"))
        deadline, execution_deadline = ends.timeout, ends.execution
        anchor = timeline.anchor(started_at, BackoffPolicy.from_dict(start["policy"]))
        # Off the event loop: building a business calendar may import ``holidays`` and compute its years.
        due_at = await runtime.run_blocking(self._due_at, started_at) if start.get("due") else None
        schedule = _ScheduleFromStart(
            check=check,
            policy=start["policy"],
            seed=seed,
            started_at=anchor,
            deadline=ends.schedule,
            after=-1,
            share=bool(start.get("share", True)),
            transient_errors=start.get("transient_errors"),
            silent_fail=bool(start.get("silent_fail", False)),
            check_timeout=start.get("check_timeout"),
            rate_limit=start.get("rate_limit"),
            due_at=due_at,
            late_told=self._retry_took_late_as_told(started_at, due_at),
        )
        schedule.try_started_at = started_at
        schedule.task_instance = self.task_instance  # its last-check record is this task's XCom
        log_lines.emit(
            self.log,
            "info",
            "Zero-worker wait: started in the triggerer, no worker ran this try; try started %s (as Airflow "
            "recorded it), deadline %s (timeout %gs); check #0 and every later check run here.",
            iso(started_at),
            iso(deadline),
            float(start["timeout"]),
        )
        try:
            async for event in schedule.run():
                payload = dict(event.payload)
                checks = int(payload.get("checks", 0))  # checks made, not the schedule index
                self._incr("pokes", checks)
                if payload.get("status") == "success" and not self._needs_worker_for_success(payload):
                    success = self._success(payload, started_at, checks)
                    await log_lines.flushed()
                    yield success
                    return
                log_lines.emit(
                    self.log,
                    "info",
                    "Outcome: %s after %d check(s) in the triggerer; resuming the task on a worker to end it "
                    "exactly as poke mode does (%s).",
                    payload.get("status"),
                    checks,
                    payload.get("message") or "",
                )
                await log_lines.flushed()
                yield compat.locations.TriggerEvent(
                    {
                        **payload,
                        "started_at": started_at,
                        "deadline": deadline,
                        "execution_deadline": execution_deadline,
                        "seed": seed,
                    }
                )
                return
        finally:
            await schedule.cleanup()

    def _due_at(self, started_at: float) -> float | None:
        """The wait's due time in this run (``due=``; as the worker computes it, ``sensors/late.py``), or None.
        A due time that cannot be computed here (e.g. a time zone this host lacks) is logged, not fatal."""
        due = self.start.get("due")
        if not due:
            return None
        from airflow_smart_ext.timetables.due import DueTime  # only for a wait with a due time

        try:
            return DueTime.from_dict(due).due_epoch(self._run_instants, started_at)
        except Exception as exc:
            log_lines.emit(self.log, "error", "No due time for this wait (%s): %r", due, exc)
            return None

    def _needs_worker_for_success(self, payload: dict[str, Any]) -> bool:
        """A success only a worker can end correctly: success callbacks Airflow would not run after a
        ``TaskSuccessEvent`` (3.x), a later try (its task instance still holds the previous try's
        ``end_date``), or an XCom that needs a worker (split outputs, a mapped downstream task)."""
        reason = None
        if (
            self.start.get("success_callbacks")
            and not compat.start_in_triggerer.trigger_end_runs_success_callbacks()
        ):
            reason = "on_success_callback: this Airflow runs it only when a worker ends the task"
        elif self._try_number > 1:
            # A clear or a retry stamped end_date; the scheduler's start in the triggerer keeps it and a
            # trigger's end would too (end_date before start_date); a worker's end stamps a new one.
            reason = "a later try: only a worker's end replaces the previous try's end_date"
        elif (
            payload.get("xcom_value") is not None
            and self.start.get("do_xcom_push", True)
            and (self.start.get("multiple_outputs") or self._maps_over_output)
        ):
            reason = "the XCom must be pushed by a worker (multiple_outputs or a mapped downstream task)"
        if reason is not None:
            log_lines.emit(self.log, "info", "Condition met; the task ends on a worker: %s.", reason)
        return reason is not None

    def _success(self, payload: dict[str, Any], started_at: float, checks: int) -> Any:
        waited = max(0.0, clock.now() - started_at)
        log_lines.emit(
            self.log,
            "info",
            "Success criteria met after %d check(s), %.3fs after the start of the try; the task ends here in "
            "the triggerer (zero worker phases).",
            checks,
            waited,
        )
        self._incr("successes")
        xcoms: dict[str, Any] = {}
        if self.start.get("do_xcom_push", True):
            if payload.get("xcom_value") is not None:
                xcoms["return_value"] = payload["xcom_value"]
            xcoms[STATS_XCOM_KEY] = {
                "pokes": checks,
                "waited_seconds": round(waited, 3),
                "mode": "deferrable",
            }
        return compat.locations.TaskSuccessEvent(xcoms=xcoms or None)

    async def cleanup(self) -> None:
        """Group membership is released by the schedule's own cleanup when ``run`` ends."""

    async def on_kill(self) -> None:
        """Nothing external to cancel: a check is a read."""
