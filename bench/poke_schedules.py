"""Poke schedules on a virtual clock (no sleeping), shared by the poke-economy and herd benchmarks.

A schedule is an iterator of check times in seconds after the sensor started. Three families:

* fixed interval — what a plain ``BaseSensorOperator(poke_interval=60)`` does;
* Airflow's own ``exponential_backoff=True`` — computed by calling Airflow's real
  ``BaseSensorOperator._get_next_poke_interval`` on a real sensor object (never re-implemented here);
* ours — ``airflow_smart_ext.backoff.BackoffPolicy.next_check``, one strategy per jitter.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

POKE_INTERVAL = 60.0
CAP_SECONDS = 1800.0

# One DAG holds every Airflow sensor object we create, so ``dag_id`` (part of Airflow's jitter hash) is real.
_BENCH_DAG_ID = "bench_poke_schedules"
_SILENT = logging.getLogger("bench.silent")
_SILENT.setLevel(logging.CRITICAL)
_SILENT.propagate = False


def fixed_interval(interval: float = POKE_INTERVAL) -> Iterator[float]:
    step = 0
    while True:
        yield step * interval
        step += 1


class AirflowBackoffSensors:
    """Real Airflow sensors (``exponential_backoff=True``) whose poke intervals we read, never re-derive.

    ``airflow.sensors.base.BaseSensorOperator`` exists on 2.11 and, as Airflow's own deprecation shim to
    ``airflow.sdk``, on 3.x: one import location, no version check.
    """

    def __init__(self, count: int, poke_interval: float = POKE_INTERVAL, max_wait: float = CAP_SECONDS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from airflow import DAG
            from airflow.sensors.base import BaseSensorOperator

        class NeverTrueSensor(BaseSensorOperator):
            def poke(self, context: Any) -> bool:
                return False

        dag = DAG(_BENCH_DAG_ID, schedule=None, start_date=datetime(2024, 1, 1))
        self.sensors = []
        for index in range(count):
            sensor = NeverTrueSensor(
                task_id=f"sensor_{index}",
                dag=dag,
                mode="poke",
                poke_interval=poke_interval,
                exponential_backoff=True,
                max_wait=max_wait,
                timeout=7 * 86400,
            )
            # Airflow logs every computed interval at INFO; a silent logger keeps the bench output readable
            # and its timing free of log I/O (the interval itself is computed by Airflow's code unchanged).
            sensor._log = _SILENT
            self.sensors.append(sensor)

    def schedule(self, index: int, started_at: float) -> Iterator[float]:
        """Check times of sensor ``index``, as poke-mode ``execute()`` would produce them.

        ``execute()`` pokes, then sleeps ``_get_next_poke_interval(started_at, run_duration, poke_count)``
        with poke_count = 1, 2, … (poke mode passes the real count). ``started_at`` is the value Airflow
        hashes into the jitter (``time.monotonic()`` at start in poke mode).
        """
        sensor = self.sensors[index]
        now = 0.0
        poke_count = 1
        yield now
        while True:
            clock = now
            now = clock + sensor._get_next_poke_interval(started_at, lambda c=clock: c, poke_count)
            poke_count += 1
            yield now

    def first_overflowing_poke_count(self, limit: int = 5000) -> tuple[int, str] | None:
        """The smallest ``poke_count`` at which Airflow's own function raises, with the error text."""
        sensor = self.sensors[0]
        low, high = 1, limit
        try:
            sensor._get_next_poke_interval(0.0, lambda: 0.0, high)
        except (OverflowError, ValueError):
            pass
        else:
            return None
        while low < high:  # the failure is monotonic in poke_count (2 ** (n - 2) only grows)
            middle = (low + high) // 2
            try:
                sensor._get_next_poke_interval(0.0, lambda: 0.0, middle)
            except (OverflowError, ValueError):
                high = middle
            else:
                low = middle + 1
        try:
            sensor._get_next_poke_interval(0.0, lambda: 0.0, low)
        except (OverflowError, ValueError) as exc:
            return low, f"{type(exc).__name__}: {exc}"
        return None  # pragma: no cover - bisection invariant


def ours(policy: Any, seed: str) -> Iterator[float]:
    """Check times from ``BackoffPolicy.next_check`` exactly as our sensor/trigger consume it."""
    after: int | None = None
    now = 0.0
    while True:
        check = policy.next_check(seed, 0.0, now, None, after=after)
        if check is None:  # only with a deadline; none is given here
            return
        yield check.at
        after = check.index
        now = check.at


def our_policies(extra_splay: float | None = None) -> tuple[dict[str, Any], str]:
    """One policy per jitter strategy, as a user gets it from ``BackoffSensor(poke_interval=60, max_wait=30 min,
    jitter=...)`` with every other argument left at its default (read back from ``sensor.backoff_policy``).

    Falls back to ``BackoffPolicy``'s own defaults when the sensor module is not importable, and says so.
    ``extra_splay`` adds one clearly non-default row: the default jitter with that ``splay`` (seconds).
    """
    from airflow_smart_ext.backoff import JITTER_STRATEGIES, BackoffPolicy

    try:
        from airflow_smart_ext.sensors import BackoffSensor
    except ImportError:
        BackoffSensor = None  # noqa: N806
    policies: dict[str, Any] = {}
    if BackoffSensor is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from airflow import DAG

        class NeverTrueBackoffSensor(BackoffSensor):  # type: ignore[misc,valid-type]
            def poke(self, context: Any) -> bool:
                return False

        dag = DAG(_BENCH_DAG_ID + "_ours", schedule=None, start_date=datetime(2024, 1, 1))
        from airflow_smart_ext.backoff import DEFAULT_JITTER as default_jitter

        for jitter in JITTER_STRATEGIES:
            sensor = NeverTrueBackoffSensor(
                task_id=f"ours_{jitter}",
                dag=dag,
                poke_interval=POKE_INTERVAL,
                max_wait=CAP_SECONDS,
                jitter=jitter,
            )
            label = f"ours, jitter={jitter!r}" + (" (default)" if jitter == default_jitter else "")
            policies[label] = sensor.backoff_policy
        if extra_splay is not None:
            sensor = NeverTrueBackoffSensor(
                task_id="ours_extra_splay",
                dag=dag,
                poke_interval=POKE_INTERVAL,
                max_wait=CAP_SECONDS,
                splay=extra_splay,
            )
            label = f"ours, jitter={default_jitter!r}, splay={extra_splay / 60:g} min (NOT the default)"
            policies[label] = sensor.backoff_policy
        return policies, "`BackoffSensor(poke_interval=60, max_wait=1800, jitter=…)`, other arguments default"
    for jitter in JITTER_STRATEGIES:
        label = f"ours, jitter={jitter!r}" + (" (default)" if jitter == "full" else "")
        policies[label] = BackoffPolicy(initial=POKE_INTERVAL, cap=CAP_SECONDS, jitter=jitter)
    return policies, "`BackoffPolicy` defaults (the sensor module was not importable)"


def our_strategies(extra_splay: float | None = None) -> dict[str, Callable[[str], Iterator[float]]]:
    """One schedule factory per jitter strategy (see :func:`our_policies`)."""
    policies, _source = our_policies(extra_splay)
    return {label: (lambda seed, p=policy: ours(p, seed)) for label, policy in policies.items()}


def policies_text(extra_splay: float | None = None) -> str:
    """Where our policies came from and what they are, for the notes under each table."""
    policies, source = our_policies(extra_splay)
    described = "; ".join(f"{label}: {policy.describe()}" for label, policy in policies.items())
    return f"Our policies come from {source}: {described}."
