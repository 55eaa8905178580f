"""Where Airflow keeps the classes and functions we use: the Task SDK (3.x) or core (2.11), per line.

Resolved on first use (PEP 562): the plugin imports compat in every scheduler / dag-processor parse loop,
which needs none of these; importing the sensor SDK, the ``@task`` decorator and the trigger base eagerly
added ~100 ms there. Each entry: name -> (module, attribute) for the running Airflow line.

* 3.x: the Task SDK owns sensors and task exceptions (``airflow.exceptions`` re-exports the very same classes,
  so the task runner treats ours as a sensor timeout: no retry); ``airflow.sdk.task`` is the decorator
  (``airflow.decorators`` is a deprecated shim). 3.0/3.1: the SDK lacks the hook, the config, Stats and the
  exceptions yet; their task runner catches the core ones.
* 2.11: core locations.
* ``airflow.triggers.base`` is the trigger location on 2.11 and every 3.x (the Task SDK does not export it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_2_PLUS

__all__ = [
    "CHECK_ERRORS",
    "SENSOR_TIMEOUT_ERRORS",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowRescheduleException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "Asset",
    "BaseSensorOperator",
    "BaseTrigger",
    "EventTriggerBase",
    "PokeReturnValue",
    "SensorBaseHook",
    "StartTriggerArgs",
    "Stats",
    "TaskSuccessEvent",
    "TriggerEvent",
    "airflow_conf",
    "get_fernet",
    "mask_secret",
    "redact_secrets",
    "task",
]

_EXCEPTIONS = tuple(name for name in __all__ if name.startswith("Airflow"))  # the exception classes
_LAZY: dict[str, tuple[str, str]] = {
    "BaseTrigger": ("airflow.triggers.base", "BaseTrigger"),
    "TriggerEvent": ("airflow.triggers.base", "TriggerEvent"),
    # starting and ending in the triggerer (compat.start_in_triggerer)
    "StartTriggerArgs": ("airflow.triggers.base", "StartTriggerArgs"),
    "TaskSuccessEvent": ("airflow.triggers.base", "TaskSuccessEvent"),
    # 2.11: the plain trigger base stands in (a watcher is never built there: require_asset_watchers fails first)
    "EventTriggerBase": (
        ("airflow.triggers.base", "BaseEventTrigger")
        if AIRFLOW_V_3_0_PLUS
        else ("airflow.triggers.base", "BaseTrigger")
    ),
    # Assets (3.x) are Datasets on 2.11: DAG files that schedule on one import this name (the partition example).
    "Asset": ("airflow.sdk", "Asset") if AIRFLOW_V_3_0_PLUS else ("airflow.datasets", "Dataset"),
}
# Airflow core's homes of the names the Task SDK took over in 3.2 (2.11, and 3.0/3.1 where the SDK lacks them).
_CORE = {
    "SensorBaseHook": ("airflow.hooks.base", "BaseHook"),
    "airflow_conf": ("airflow.configuration", "conf"),
    "Stats": ("airflow.stats", "Stats"),
    **{name: ("airflow.exceptions", name) for name in _EXCEPTIONS},
}
if AIRFLOW_V_3_0_PLUS:
    _LAZY.update(
        {
            "task": ("airflow.sdk", "task"),
            "SensorBaseHook": ("airflow.sdk", "BaseHook"),
            "BaseSensorOperator": ("airflow.sdk", "BaseSensorOperator"),
            "PokeReturnValue": ("airflow.sdk", "PokeReturnValue"),
            "airflow_conf": ("airflow.sdk.configuration", "conf"),
            "Stats": ("airflow.sdk.observability.stats", "Stats"),
            **{name: ("airflow.sdk.exceptions", name) for name in _EXCEPTIONS},
        }
    )
    if not AIRFLOW_V_3_2_PLUS:  # 3.0/3.1: the SDK lacks these yet; their task runner catches the core ones
        _LAZY.update(_CORE)
else:
    _LAZY.update(
        {
            "task": ("airflow.decorators", "task"),
            "BaseSensorOperator": ("airflow.sensors.base", "BaseSensorOperator"),
            "PokeReturnValue": ("airflow.sensors.base", "PokeReturnValue"),
            **_CORE,
        }
    )

# Sealing rendered secrets (issue 23): the secrets masker and Airflow's Fernet. The worker's masker knows every
# connection password / extra / masked Variable the task rendered; the triggerer holds the same [core]
# fernet_key. 3.x: the Task SDK's masker (the one the task runner and the triggerer's log processors use) and
# crypto; 2.11: core's.
if AIRFLOW_V_3_0_PLUS:
    _LAZY.update(
        {
            # 3.1+: the SDK's shared masker; 3.0 has only execution_time's (a deprecated shim from 3.1 on)
            "redact_secrets": (
                "airflow.sdk._shared.secrets_masker"
                if AIRFLOW_V_3_1_PLUS
                else "airflow.sdk.execution_time.secrets_masker",
                "redact",
            ),
            "mask_secret": ("airflow.sdk.log", "mask_secret"),
            # the SDK's crypto exists from 3.2; 3.0/3.1 keep core's (same [core] fernet_key)
            "get_fernet": (
                "airflow.sdk.crypto" if AIRFLOW_V_3_2_PLUS else "airflow.models.crypto",
                "get_fernet",
            ),
        }
    )
else:
    _LAZY.update(
        {
            "redact_secrets": ("airflow.utils.log.secrets_masker", "redact"),
            "mask_secret": ("airflow.utils.log.secrets_masker", "mask_secret"),
            "get_fernet": ("airflow.models.crypto", "get_fernet"),
        }
    )

# Error tuples (resolved on first use, like the names above). ``AirflowTaskTimeout`` is a BaseException on
# 3.x (not an ``Exception``): a check that raises it must still be caught and mapped like poke mode does.
_ERROR_TUPLES: dict[str, tuple[str, ...]] = {
    "CHECK_ERRORS": ("Exception", "AirflowTaskTimeout"),  # everything a check may raise that we map
    "SENSOR_TIMEOUT_ERRORS": ("AirflowSensorTimeout", "AirflowTaskTimeout"),
}

if TYPE_CHECKING:  # what type checkers see (3.x locations); at run time ``__getattr__`` resolves them
    from airflow.sdk import Asset as Asset
    from airflow.sdk import BaseHook as SensorBaseHook
    from airflow.sdk import BaseSensorOperator, PokeReturnValue, task
    from airflow.sdk._shared.secrets_masker import redact as redact_secrets
    from airflow.sdk.configuration import conf as airflow_conf
    from airflow.sdk.crypto import get_fernet
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowRescheduleException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
    )
    from airflow.sdk.log import mask_secret
    from airflow.sdk.observability.stats import Stats
    from airflow.triggers.base import BaseEventTrigger as EventTriggerBase  # type: ignore[attr-defined,unused-ignore]
    from airflow.triggers.base import BaseTrigger, StartTriggerArgs, TaskSuccessEvent, TriggerEvent

    CHECK_ERRORS: tuple[type[BaseException], ...]
    SENSOR_TIMEOUT_ERRORS: tuple[type[BaseException], ...]


def __getattr__(name: str) -> Any:
    if name in _ERROR_TUPLES:
        value: Any = tuple(
            Exception if part == "Exception" else __getattr__(part) for part in _ERROR_TUPLES[name]
        )
        globals()[name] = value
        return value
    target = _LAZY.get(name)
    if target is None:  # also a helpful error for typos in internal imports
        raise AttributeError(f"airflow_smart_ext.compat.locations has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value  # resolved once
    return value
