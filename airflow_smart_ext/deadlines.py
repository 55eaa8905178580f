"""``DueTimeDeadline``: a DAG run's deadline on a business calendar, in Airflow's own deadline machinery.

Airflow's ``DeadlineAlert`` (3.1+) sets a DAG run's deadline at a reference instant plus a fixed interval; its
references know no business day. On Airflow >= 3.3 a plugin may provide its own reference: this one is a
:class:`~airflow_smart_ext.timetables.DueTime`, so "09:30 New York on the first NYSE session on or after the
data interval ends" is a DAG run's deadline. The scheduler computes it when it creates the run (from the run's
row, never remembered) and Airflow runs the alert's callback once if the run is not done by then::

    DAG(
        ...,
        deadline=DeadlineAlert(
            reference=DueTimeDeadline(DueTime("09:30", market="NYSE", timezone="America/New_York")),
            interval=timedelta(0),  # or a grace period after the due time
            callback=AsyncCallback(SlackWebhookNotifier, kwargs={"text": "trades are late"}),
        ),
    )

Before 3.3 building one fails the DAG file at parse, naming the version and the task-level alternative
(``BackoffSensor(due=..., on_late=...)``). The plugin registers the class (``deadline_references``): every
component that evaluates deadlines imports it from there.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Mapping
from typing import Any

from airflow_smart_ext.compat.deadlines import (
    BaseDeadlineReference,
    dag_run_instants,
    require_custom_deadline_references,
)
from airflow_smart_ext.timetables.due import DueTime, InvalidDueTime, due_time_arg

__all__ = ["DueTimeDeadline"]

log = logging.getLogger(__name__)


class DueTimeDeadline(BaseDeadlineReference):
    """A DAG run's due time on a business calendar as a ``DeadlineAlert`` reference (Airflow >= 3.3).

    :param due: a :class:`~airflow_smart_ext.timetables.DueTime` or its dict form (``DueTime.to_dict()``); its
        ``reference`` names the run instant it counts from (``data_interval_end`` by default; a run without
        it counts from its ``run_after``).
    """

    # What the scheduler passes to _evaluate_with: the run being created.
    required_kwargs = frozenset({"dag_id", "run_id"})

    def __init__(self, due: DueTime | Mapping[str, Any]) -> None:
        require_custom_deadline_references("DueTimeDeadline")
        checked = due_time_arg(due)
        if checked is None:
            raise InvalidDueTime(
                "due: DueTimeDeadline needs a due time: airflow_smart_ext.timetables.DueTime or its dict form "
                "(DueTime.to_dict()), got None."
            )
        self.due = checked

    def serialize_reference(self) -> dict[str, Any]:
        return {"reference_type": self.reference_name, "due": self.due.to_dict()}

    @classmethod
    def deserialize_reference(cls, reference_data: dict[str, Any]) -> DueTimeDeadline:
        return cls(reference_data["due"])

    def _evaluate_with(self, *, session: Any, dag_id: str, run_id: str, **_: Any) -> datetime.datetime | None:
        """The run's due time (the scheduler adds the alert's interval); None, and no deadline, for a run
        the scheduler cannot find or a due time that cannot be computed (logged as an error: the scheduler
        creates the run inside this call, and an exception here would stop it creating runs)."""
        try:
            instants = dag_run_instants(session=session, dag_id=dag_id, run_id=run_id)
            reference = self.due.reference_in(instants)
            return self.due.due_at(reference) if reference is not None else None
        except Exception:
            log.exception("No deadline for DAG run %s of %s: its due time (%r) failed", run_id, dag_id, self)
            return None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DueTimeDeadline) and self.due == other.due

    def __hash__(self) -> int:
        return hash(json.dumps(self.serialize_reference(), sort_keys=True))

    def __repr__(self) -> str:
        return f"DueTimeDeadline({self.due.describe()})"
