"""``DueTimeDeadline``: a DAG run's deadline on a business calendar, in Airflow's own deadline machinery.

Airflow's ``DeadlineAlert`` (3.1+) sets a DAG run's deadline at a reference instant plus a fixed interval; its
references know no business day. On Airflow >= 3.3 a plugin may provide its own reference: this one is a
:class:`~airflow_smart_ext.timetables.DueTime`, so "the first NYSE session's 09:30 New York at or after the
data interval ends" is a DAG run's deadline. Whatever creates the run computes it, from the run's row, never
remembered: the scheduler for scheduled and asset-triggered runs, the api-server for a manual trigger. Airflow
runs the alert's callback once if the run has not succeeded by then::

    DAG(
        ...,
        deadline=DeadlineAlert(
            reference=DueTimeDeadline(DueTime("09:30", market="NYSE", timezone="America/New_York")),
            interval=timedelta(0),  # or a grace period after the due time
            callback=AsyncCallback(SlackWebhookNotifier, kwargs={"text": "trades are late"}),
        ),
    )

Before 3.3 building one fails the DAG file at parse, naming the version and the task-level alternative
(``BackoffSensor(due=..., on_late=...)``). The plugin registers the class (``deadline_references``): the
scheduler and the api-server find it there.
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
        self._stored: Any = checked.to_dict()
        self._due: DueTime | None = checked

    @property
    def due(self) -> DueTime:
        """The due time (built from the stored form on first use after deserialization; may raise there)."""
        if self._due is None:
            self._due = DueTime.from_dict(self._stored)
        return self._due

    def serialize_reference(self) -> dict[str, Any]:
        return {"reference_type": self.reference_name, "due": self._stored}

    @classmethod
    def deserialize_reference(cls, reference_data: dict[str, Any]) -> DueTimeDeadline:
        """The stored form as it is, checked only when evaluated: Airflow decodes the reference inside run
        creation, where an error (a form written by a newer release, a zone this host lacks) would stop the
        scheduler creating runs; :meth:`_evaluate_with` turns it into "no deadline" and an ERROR line."""
        reference = cls.__new__(cls)
        reference._stored = reference_data.get("due")
        reference._due = None
        return reference

    def _evaluate_with(self, *, session: Any, dag_id: str, run_id: str, **_: Any) -> datetime.datetime | None:
        """The run's due time (Airflow adds the alert's interval); None, and no deadline, for a run it cannot
        find or a due time that cannot be computed (logged as an error: Airflow creates the run inside this
        call, and an exception here would stop it creating runs)."""
        try:
            due = self.due
            reference = due.reference_in(dag_run_instants(session=session, dag_id=dag_id, run_id=run_id))
            return due.due_at(reference) if reference is not None else None
        except Exception:
            log.exception("No deadline for DAG run %s of %s: its due time (%r) failed", run_id, dag_id, self)
            return None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DueTimeDeadline) and self._stored == other._stored

    def __hash__(self) -> int:
        return hash(json.dumps(self._stored, sort_keys=True, default=str))

    def __repr__(self) -> str:
        try:
            return f"DueTimeDeadline({self.due.describe()})"
        except Exception:  # a stored form this release cannot read: show it as stored
            return f"DueTimeDeadline({self._stored!r})"
