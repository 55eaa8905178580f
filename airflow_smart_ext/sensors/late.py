"""Late data: a sensor with ``due=`` says once, at the first check scheduled at or after its due time that
finds the condition not met, that its wait is late — a WARNING line, the ``smart_ext.sensor.late`` metric and
its ``on_late`` callbacks (functions or Airflow notifiers, given the task's context plus ``late``) — and goes
on waiting to its own timeout. The due time is computed from the run (``DueTime``); which check says it is the
wait model's rule (``Timeline.tells_late``), so nothing is stored between reschedules; that a retry's
earlier try said it is kept in Airflow 3.3's task state store (``late_record``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_smart_ext import compat, units
from airflow_smart_ext.sensors import late_record
from airflow_smart_ext.ui.pages import waits_link
from airflow_smart_ext.wait_model import timeline
from airflow_smart_ext.wait_model.late_told import CUT_SHORT, TOLD
from airflow_smart_ext.wait_model.parameters import PARAMETERS, check_arguments, late_callbacks

if TYPE_CHECKING:
    from airflow_smart_ext.sensors.protocol import BackoffSensorLike as BackoffSensor
    from airflow_smart_ext.timetables.due import DueTime


def due_time(due: Any) -> DueTime | None:
    """``due=`` as the sensor keeps it (a ``DueTime`` or None). The timetables' engine is imported only for a
    sensor that has a due time: every task process imports the sensors."""
    if due is None:
        return None
    from airflow_smart_ext.timetables.due import due_time_arg

    return due_time_arg(due)


def dag_wide_on_late(on_late: Any, due: Any, defaults: Mapping[str, Any]) -> bool:
    """Whether ``on_late`` is the DAG's (its ``default_args``) on a sensor without a due time: it serves the
    DAG's sensors that have one, so the rule "on_late needs due=" is not this sensor's to break."""
    inherited = defaults.get("on_late")
    return due is None and on_late is not None and (inherited is on_late or inherited == on_late)


def on_late_for_the_rule(on_late: Any, due: Any, defaults: Mapping[str, Any]) -> Any:
    """``on_late`` as the rule "on_late needs due=" judges it: None for the DAG's callback on a sensor without a
    due time (:func:`dag_wide_on_late`; still checked to be callables here), else as given."""
    if not dag_wide_on_late(on_late, due, defaults):
        return on_late
    check_arguments(PARAMETERS, {"on_late": on_late}, rules=())
    return None


def serialized(due: DueTime | None) -> str | None:
    """The sensor's due time as its serialized DAG keeps it (``DueTime`` is imported only for one)."""
    if due is None:  # the timetables' engine is imported only for a sensor with a due time
        return None
    from airflow_smart_ext.timetables.due import serialized_due

    return serialized_due(due)


def storable_due(due: Any) -> Any:
    """A due time as a mapped sensor's serialized arguments keep it readable: a ``DueTime`` in its dict form
    (Airflow stores an unknown object as its repr), which the constructor takes alike; any other value as is."""
    if due is None:
        return None
    from airflow_smart_ext.timetables.due import DueTime  # only for a due time given

    return due.to_dict() if isinstance(due, DueTime) else due


def partial_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A mapped sensor's ``.partial()`` arguments with its due time readable (:func:`storable_due`)."""
    due = storable_due(kwargs.get("due"))
    return dict(kwargs) if due is None else {**kwargs, "due": due}


def deferrable_problem(due: Any, deferrable: bool, own_deferral: str | None) -> str | None:
    """Why a sensor with these arguments cannot have a due time (None: it can): a deferral of the subclass's
    own (its trigger is not ours, so nothing would say the wait is late)."""
    if due is None or not deferrable or own_deferral is None:
        return None
    return (
        f"due= needs BackoffSensor's own deferral, and this sensor defers on its own ({own_deferral}): use "
        "mode='reschedule' (or 'poke') with deferrable=False for a wait with a due time, or drop due="
    )


def due_epoch(due: DueTime, context: Any, try_started_at: float) -> float:
    """The wait's due time (epoch seconds) in this run: the context's instants, and the DAG run's
    ``run_after`` (a 3.x manual run has no logical date)."""
    instants: dict[str, Any] = {}
    if isinstance(context, Mapping):
        instants = {due.reference: context.get(due.reference)}
        instants["run_after"] = getattr(context.get("dag_run"), "run_after", None)
    return due.due_epoch(instants, try_started_at)


def notice(
    sensor: BackoffSensor,
    context: Any,
    ti: Any,
    line: timeline.Timeline,
    index: int,
    previous: int | None,
    try_started_at: float,
    now: float,
) -> dict[str, Any] | None:
    """After check ``index`` of task instance ``ti`` found the condition not met: what to say if this is the
    check that says the wait is late (the wait, its due time and rule, how late, the check, its last outcome),
    else None."""
    due: DueTime | None = getattr(sensor, "due", None)
    if due is None:
        return None
    due_at = due_epoch(due, context, try_started_at)
    if not timeline.past_due(line.scheduled_at(index), now, due_at):  # (no store read before the due time)
        return None
    try_number = int(getattr(ti, "try_number", 1) or 1)
    recorded = late_record.state(context, units.iso(due_at), try_number)
    if recorded == TOLD:  # this task instance said it (this try or an earlier one)
        return None
    resent = recorded == CUT_SHORT  # an earlier try's alert cut short: said again now
    # Without a record (before 3.3) a retry that starts after the due time takes its earlier try to have said it.
    retry = recorded is None and try_number > 1
    if not resent and not line.tells_late(index, previous, due_at, now, retry=retry):
        return None
    last_outcome = (
        f"failed ({sensor.consecutive_errors} error(s) in a row, ridden out)"
        if sensor.consecutive_errors
        else "condition not met"
    )
    return _facts(ti, due, due_at, now, index, last_outcome) | {"link": _link(sensor, ti), "resent": resent}


def resumed_notice(
    sensor: BackoffSensor, ti: Any, event: Mapping[str, Any], *, resent: bool = False
) -> dict[str, Any]:
    """What to say for a trigger's ``late`` event, or its timeout after a last check that was late (the
    trigger's check ``check_index`` at ``checked_at`` was the first at or after ``due_at`` and found the
    condition not met). ``resent``: an earlier try began to say it and was cut short (``late_record``)."""
    due_at = float(event["due_at"])
    checked_at = float(event.get("checked_at") or due_at)
    message = "condition not met" if event.get("status") == "timeout" else str(event.get("message") or "")
    facts = _facts(ti, sensor.due, due_at, checked_at, int(event.get("check_index", 0) or 0), message)
    return facts | {"link": _link(sensor, ti), "resent": resent}


def _link(sensor: BackoffSensor, ti: Any) -> str:
    """Where to see the wait: its DAG's late waits in the Waits view (a deferred wait is a row there), else
    the task instance's own page in Airflow (a poke or reschedule wait is not in the triggerer's rows)."""
    try:
        if getattr(sensor, "deferrable", False):
            return waits_link(dag_id=ti.dag_id, late="true")
        map_index = getattr(ti, "map_index", -1)
        return compat.web_urls.task_page_url(
            compat.web_urls.airflow_base_url(),
            ti.dag_id,
            ti.run_id,
            ti.task_id,
            map_index if isinstance(map_index, int) else -1,
        )
    except Exception:  # a link is a convenience: never the reason an alert is not said
        return ""


def _facts(ti: Any, due: Any, due_at: float, now: float, index: int, last_outcome: str) -> dict[str, Any]:
    map_index = getattr(ti, "map_index", -1)
    mapped = f"[{map_index}]" if map_index is not None and map_index >= 0 else ""
    return {
        "wait": f"{ti.dag_id}.{ti.task_id}{mapped}",
        "run_id": getattr(ti, "run_id", ""),
        "due": units.iso(due_at),
        "due_rule": due.describe() if due is not None else "",
        "late_by_seconds": round(now - due_at, 3),
        "late_by": units.duration_text(now - due_at),
        "check": index,
        "last_outcome": last_outcome,
    }


def announce(sensor: BackoffSensor, context: Any, late: Mapping[str, Any]) -> None:
    """Say it: the WARNING line, then each ``on_late`` callback with the task's context plus ``late``."""
    sensor.log.warning(
        "Late: %s was due at %s (%s) and is %s late; check #%d: %s. Waiting on to the timeout.",
        late["wait"],
        late["due"],
        late["due_rule"],
        late["late_by"],
        late["check"],
        late["last_outcome"],
    )
    alert_context = {**(context if isinstance(context, Mapping) else {}), "late": dict(late)}
    for callback in late_callbacks(getattr(sensor, "on_late", None)):
        try:
            callback(alert_context)
        except Exception:  # an alert that fails must not fail the wait (as Airflow's own callbacks)
            sensor.log.exception("on_late callback %r failed", callback)
