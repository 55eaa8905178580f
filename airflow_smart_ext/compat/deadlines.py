"""DAG-level deadline alerts with a custom reference (``DeadlineAlert(reference=...)``): Airflow >= 3.3 only.

3.3 lets a plugin register a ``BaseDeadlineReference`` subclass (``AirflowPlugin.deadline_references``) that
the scheduler evaluates when it creates a DAG run. Older versions get an inert stand-in base so
``airflow_smart_ext.deadlines`` imports everywhere; building a reference there calls
:func:`require_custom_deadline_references`, which fails the DAG file at parse time with the alternative.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS, AIRFLOW_VERSION_STRING

__all__ = [
    "CUSTOM_DEADLINE_REFERENCES",
    "DEADLINE_REFERENCES_MIN_AIRFLOW",
    "BaseDeadlineReference",
    "CustomDeadlineReferencesUnsupported",
    "dag_run_instants",
    "require_custom_deadline_references",
]

DEADLINE_REFERENCES_MIN_AIRFLOW = "3.3.0"
CUSTOM_DEADLINE_REFERENCES = AIRFLOW_V_3_3_PLUS

if TYPE_CHECKING or CUSTOM_DEADLINE_REFERENCES:
    from airflow.sdk.definitions.deadline import BaseDeadlineReference
else:

    class BaseDeadlineReference:  # type: ignore[no-redef]  # Airflow < 3.3: never instantiated
        """The Airflow >= 3.3 base; see :func:`require_custom_deadline_references`."""


class CustomDeadlineReferencesUnsupported(RuntimeError):
    """A custom deadline reference was built on an Airflow without them (before 3.3)."""


def require_custom_deadline_references(what: str) -> None:
    """Raise :class:`CustomDeadlineReferencesUnsupported` (at DAG parse) unless this Airflow has them."""
    if CUSTOM_DEADLINE_REFERENCES:
        return
    raise CustomDeadlineReferencesUnsupported(
        f"{what} needs Airflow >= {DEADLINE_REFERENCES_MIN_AIRFLOW} (custom deadline references for a DAG's "
        f"DeadlineAlert); this is Airflow {AIRFLOW_VERSION_STRING}. On this version give the waiting task the "
        "due time instead: BackoffSensor(due=DueTime(...), on_late=...) alerts once when it is late "
        "(docs/late-data.md)."
    )


def dag_run_instants(*, session: Any, dag_id: str, run_id: str) -> dict[str, datetime.datetime | None]:
    """A DAG run's instants a due time may count from, read by the scheduler as it creates the run (3.3):
    ``data_interval_start``, ``data_interval_end``, ``logical_date`` and ``run_after``; {} if no such run."""
    from airflow.models import DagRun
    from sqlalchemy import select

    columns = ("data_interval_start", "data_interval_end", "logical_date", "run_after")
    row = session.execute(
        select(*(getattr(DagRun, name) for name in columns)).where(
            DagRun.dag_id == dag_id, DagRun.run_id == run_id
        )
    ).one_or_none()
    return dict(zip(columns, row, strict=True)) if row is not None else {}
