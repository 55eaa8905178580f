"""Registering a secret opened in the triggerer where its log lines are masked (issue 35).

3.x: triggers run in a subprocess whose supervisor writes the trigger log files with its own masker; a value
opened there (``secret_kwargs.unseal``) reaches that masker only as a ``MaskSecret`` message, and the SDK's
``mask_secret`` cannot send one from the event loop (its synchronous send fails there, silently). 3.3 has
``airflow.sdk.log.amask_secret``; 3.0-3.2 send the same message with the comms' ``asend``. 2.11: one process
writes the logs, its masker is the one ``mask_secret`` fills.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_3_PLUS

__all__ = ["amask_secret"]

#: How long 3.0-3.2 wait for the supervisor to acknowledge a secret before the wait goes on without it.
MASK_REPLY_SECONDS = 5.0


async def amask_secret(value: Any) -> None:
    """Mask ``value`` in this process and, in 3.x's triggerer, in its supervisor (which writes the log files)."""
    if AIRFLOW_V_3_3_PLUS:
        from airflow.sdk.log import amask_secret as mask

        await mask(value)
        return
    if not AIRFLOW_V_3_0_PLUS:
        from airflow.utils.log.secrets_masker import mask_secret

        mask_secret(value)
        return
    from airflow.sdk.log import mask_secret as mask_here

    mask_here(value)
    with suppress(Exception):  # as the SDK's own: outside the triggerer there is no supervisor to tell
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import MaskSecret

        comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
        if comms is not None:  # bounded: a supervisor that never answers must not hold the wait up
            await asyncio.wait_for(comms.asend(MaskSecret(value=value, name=None)), MASK_REPLY_SECONDS)
