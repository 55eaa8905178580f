"""Task retry policies (``retry_policy=``, ``airflow.sdk.RetryPolicy``, AIP-105): Airflow >= 3.3 only.

Older versions get inert stand-ins so ``airflow_smart_ext.retries`` imports everywhere; building a policy
there calls :func:`require_retry_policies`, which fails the DAG file at parse time with the alternatives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_smart_ext.compat.versions import AIRFLOW_V_3_3_PLUS, AIRFLOW_VERSION_STRING

__all__ = [
    "RETRY_POLICIES_SUPPORTED",
    "RETRY_POLICY_MIN_AIRFLOW",
    "RetryAction",
    "RetryDecision",
    "RetryPoliciesUnsupported",
    "RetryPolicy",
    "require_retry_policies",
]

RETRY_POLICY_MIN_AIRFLOW = "3.3.0"
RETRY_POLICIES_SUPPORTED = AIRFLOW_V_3_3_PLUS

if TYPE_CHECKING or RETRY_POLICIES_SUPPORTED:
    from airflow.sdk import RetryAction, RetryDecision, RetryPolicy
else:
    import abc as _abc

    class RetryPolicy(_abc.ABC):  # type: ignore[no-redef]  # Airflow < 3.3: never instantiated
        @_abc.abstractmethod
        def evaluate(
            self, exception: BaseException, try_number: int, max_tries: int, context: Any = None
        ) -> Any:
            """The Airflow >= 3.3 signature; see :func:`require_retry_policies`."""

    RetryAction = None  # type: ignore[assignment,misc]
    RetryDecision = None  # type: ignore[assignment,misc]


class RetryPoliciesUnsupported(RuntimeError):
    """A task retry policy was used on an Airflow without ``retry_policy`` (before 3.3)."""


def require_retry_policies(what: str) -> None:
    """Raise :class:`RetryPoliciesUnsupported` (at DAG parse) unless this Airflow has retry policies."""
    if RETRY_POLICIES_SUPPORTED:
        return
    raise RetryPoliciesUnsupported(
        f"{what} needs Airflow >= {RETRY_POLICY_MIN_AIRFLOW} (task retry policies, AIP-105); this is Airflow "
        f"{AIRFLOW_VERSION_STRING}. On this version use the operator's own backoff instead: "
        "retry_exponential_backoff=True and max_retry_delay=timedelta(...) on the operator, or "
        "attach the policy only when airflow_smart_ext.retries.RETRY_POLICIES_SUPPORTED is True."
    )
