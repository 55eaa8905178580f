"""How each line times a sensor out: ``timeout=None`` (3.3+ only), the error a deferred task is failed
with once its trigger timeout passed (3.x and 2.11 word it differently), and whether ``never_fail`` skips the
timeout of a resumed deferral (3.1+)."""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS

__all__ = ["NEVER_FAIL_SKIPS_A_RESUMED_TIMEOUT", "SENSOR_TIMEOUT_ACCEPTS_NONE", "is_trigger_timeout"]

#: A sensor's ``timeout=None`` means ``[sensors] default_timeout`` on 3.3+ (the SDK sensor's default became
#: None there); the sensors of 2.11 and 3.0-3.2 refuse None with a bare "must be timedelta" error.
SENSOR_TIMEOUT_ACCEPTS_NONE = AIRFLOW_V_3_3_PLUS

#: 3.1+'s BaseSensorOperator.resume_execution skips whatever a resumed deferral raises, its timeout included,
#: when ``never_fail`` is set; 2.11's and 3.0's skip it with ``soft_fail`` only. (Poke mode fails a timeout
#: with ``never_fail`` on every version.)
NEVER_FAIL_SKIPS_A_RESUMED_TIMEOUT = AIRFLOW_V_3_1_PLUS

# 2.11's scheduler fails a deferred task whose trigger timed out with this ``__fail__`` error, which
# BaseOperator turns into a *retryable* TaskDeferralError; 3.x's BaseSensorOperator maps its TaskDeferralTimeout
# to AirflowSensorTimeout (3.1+ then skips it with never_fail: NEVER_FAIL_SKIPS_A_RESUMED_TIMEOUT).
_DEFERRAL_TIMEOUT_ERROR_2X = "Trigger/execution timeout"
# 3.x fails a deferred task whose Airflow trigger timeout passed with this ``__fail__`` error
# (``TriggerFailureReason.TRIGGER_TIMEOUT``).
_DEFERRAL_TIMEOUT_ERROR_3X = "Trigger timeout"


def is_trigger_timeout(next_method: str, next_kwargs: dict[str, Any] | None) -> bool:
    """Whether Airflow resumes a task only to fail it because its trigger timeout passed (any version)."""
    expected = _DEFERRAL_TIMEOUT_ERROR_3X if AIRFLOW_V_3_0_PLUS else _DEFERRAL_TIMEOUT_ERROR_2X
    return next_method == "__fail__" and (next_kwargs or {}).get("error") == expected
