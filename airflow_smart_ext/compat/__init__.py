"""Every difference between Airflow 2.11 and Airflow 3.x lives in this package, one module per difference.

No other module of this package looks at ``airflow.__version__`` or picks an import location by version: they
import the names below (``from airflow_smart_ext import compat; compat.X``). Keep each branch small and say
which versions it serves. Compat imports nothing of ``airflow_smart_ext`` outside this package.

This face hands on every submodule's ``__all__``; the names of ``compat.locations`` stay unresolved until
first use (the plugin imports compat in every scheduler / dag-processor parse loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_smart_ext.compat import (
    asset_events,
    asset_watchers,
    connections,
    consumers,
    dag_access,
    dag_parsing,
    deferral,
    locations,
    metadata_db,
    partitions,
    rescheduling,
    retry_policies,
    secret_masking,
    sensor_timeouts,
    serialization,
    start_in_triggerer,
    task_xcoms,
    timetables,
    trigger_placement,
    versions,
    web_urls,
)
from airflow_smart_ext.compat.asset_events import *  # noqa: F403
from airflow_smart_ext.compat.asset_watchers import *  # noqa: F403
from airflow_smart_ext.compat.connections import *  # noqa: F403
from airflow_smart_ext.compat.consumers import *  # noqa: F403
from airflow_smart_ext.compat.dag_access import *  # noqa: F403
from airflow_smart_ext.compat.dag_parsing import *  # noqa: F403
from airflow_smart_ext.compat.deferral import *  # noqa: F403
from airflow_smart_ext.compat.metadata_db import *  # noqa: F403
from airflow_smart_ext.compat.partitions import *  # noqa: F403
from airflow_smart_ext.compat.rescheduling import *  # noqa: F403
from airflow_smart_ext.compat.retry_policies import *  # noqa: F403
from airflow_smart_ext.compat.secret_masking import *  # noqa: F403
from airflow_smart_ext.compat.sensor_timeouts import *  # noqa: F403
from airflow_smart_ext.compat.serialization import *  # noqa: F403
from airflow_smart_ext.compat.start_in_triggerer import *  # noqa: F403
from airflow_smart_ext.compat.task_xcoms import *  # noqa: F403
from airflow_smart_ext.compat.timetables import *  # noqa: F403
from airflow_smart_ext.compat.trigger_placement import *  # noqa: F403
from airflow_smart_ext.compat.versions import *  # noqa: F403
from airflow_smart_ext.compat.web_urls import *  # noqa: F403

if TYPE_CHECKING:  # at run time ``__getattr__`` below resolves them on first use
    from airflow_smart_ext.compat.locations import *  # noqa: F403

__all__ = [
    *asset_events.__all__,
    *asset_watchers.__all__,
    *connections.__all__,
    *consumers.__all__,
    *dag_access.__all__,
    *dag_parsing.__all__,
    *deferral.__all__,
    *locations.__all__,
    *metadata_db.__all__,
    *partitions.__all__,
    *rescheduling.__all__,
    *retry_policies.__all__,
    *secret_masking.__all__,
    *sensor_timeouts.__all__,
    *serialization.__all__,
    *start_in_triggerer.__all__,
    *task_xcoms.__all__,
    *timetables.__all__,
    *trigger_placement.__all__,
    *versions.__all__,
    *web_urls.__all__,
]


def __getattr__(name: str) -> Any:
    if name not in locations.LAZY_NAMES:  # also a helpful error for typos in internal imports
        raise AttributeError(f"airflow_smart_ext.compat has no attribute {name!r}")
    value = getattr(locations, name)
    globals()[name] = value  # resolved once
    return value
