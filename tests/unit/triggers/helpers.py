"""Importable helpers for the trigger tests: sensors the trigger re-creates by classpath, check specs."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

from airflow_smart_ext import clock as seam
from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.sensors import BackoffSensor
from airflow_smart_ext.triggers import BackoffTrigger
from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger
from tests.unit.clock import START, FakeClock

# --- test sensors (importable by classpath: the trigger re-creates them) ------------------------------

POKES: dict[str, list[float]] = defaultdict(list)
POKED = threading.Condition()  # notified on every poke of a FlagSensor (pokes run in worker threads)
READY_AT: dict[str, float] = {}
RAISE: dict[str, str] = {}
BLOCK_SECONDS: dict[str, float] = {}
THREADS: dict[str, set[str]] = defaultdict(set)


class FlagSensor(compat.locations.BaseSensorOperator):
    """Done once the virtual clock reaches READY_AT[name]; records every poke."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> Any:
        with POKED:
            POKES[self.name].append(seam.now())
            POKED.notify_all()
        THREADS[self.name].add(threading.current_thread().name)
        if self.name in BLOCK_SECONDS:
            time.sleep(BLOCK_SECONDS[self.name])
        if self.name in RAISE:
            raise RuntimeError(RAISE[self.name])
        ready = READY_AT.get(self.name)
        if ready is not None and seam.now() >= ready:
            return compat.locations.PokeReturnValue(
                is_done=True, xcom_value={"name": self.name, "ds": context["ds"]}
            )
        return False


class FailingSensor(compat.locations.BaseSensorOperator):
    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(seam.now())
        raise compat.locations.AirflowFailException("bad partition")


class SkippingSensor(compat.locations.BaseSensorOperator):
    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> bool:
        POKES[self.name].append(seam.now())
        raise compat.locations.AirflowSkipException("nothing to wait for today")


class TimingOutSensor(SkippingSensor):
    def poke(self, context: Any) -> bool:
        POKES[self.name].append(seam.now())
        raise compat.locations.AirflowTaskTimeout("poke took too long")


class AsyncFlagSensor(FlagSensor):
    async def apoke(self, context: Any) -> bool:
        POKES[self.name].append(seam.now())
        THREADS[self.name].add(threading.current_thread().name)
        return seam.now() >= READY_AT.get(self.name, float("inf"))


async def poked(name: str) -> None:
    """Returns once the FlagSensor ``name`` has poked (an event, not a polling loop)."""

    def wait() -> None:
        with POKED:
            assert POKED.wait_for(lambda: POKES[name], timeout=60), f"{name} never poked"

    await asyncio.to_thread(wait)


def value_is_ready(value: Any) -> bool:
    return value == "ready"


def value_is_broken(value: Any) -> bool:
    return value == "broken"


def sensor_check(name: str, cls: str = "FlagSensor", task_id: str = "wait") -> dict[str, Any]:
    return {
        "type": "sensor",
        "classpath": f"{__name__}.{cls}",
        "kwargs": {"name": name},
        "context": {
            "dag_id": "d",
            "task_id": task_id,
            "run_id": "r",
            "map_index": -1,
            "try_number": 1,
            "ds": "2026-01-02",
            "ts": "2026-01-02T00:00:00+00:00",
            "logical_date": "2026-01-02T00:00:00+00:00",
            "data_interval_start": "2026-01-02T00:00:00+00:00",
            "data_interval_end": "2026-01-03T00:00:00+00:00",
        },
    }


def make_trigger(check: dict[str, Any], policy: BackoffPolicy, **overrides: Any) -> BackoffTrigger:
    kwargs: dict[str, Any] = {
        "check": check,
        "policy": policy.to_dict(),
        "seed": "seed-1",
        "started_at": START,
        "deadline": START + 3600,
        "after": 0,
        "share": True,
    }
    kwargs.update(overrides)
    return BackoffTrigger(**kwargs)


async def first_event(trigger: BackoffTrigger) -> dict[str, Any]:
    agen = trigger.run()
    try:
        event = await agen.__anext__()
    finally:
        await agen.aclose()
    payload: dict[str, Any] = event.payload
    return payload


def sql_check(**overrides: Any) -> dict[str, Any]:
    check: dict[str, Any] = {
        "type": "sql",
        "conn_id": "smart_ext_unit_sqlite",
        "sql": "SELECT state FROM partitions WHERE name = ?",
        "parameters": ["2026-01-02"],
        "hook_params": None,
        "selector": None,
        "success": f"{__name__}.value_is_ready",
        "failure": f"{__name__}.value_is_broken",
        "fail_on_empty": False,
    }
    check.update(overrides)
    return check


DELAY: dict[str, float] = {}


class SlowAsyncSensor(compat.locations.BaseSensorOperator):
    """Observes READY_AT at the start of its poke, then takes DELAY[name] virtual seconds to answer."""

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    async def apoke(self, context: Any) -> bool:
        POKES[self.name].append(seam.now())
        ready = seam.now() >= READY_AT.get(self.name, float("inf"))
        await seam.asleep(DELAY.get(self.name, 0.0))
        return ready


class ConnSensor(SlowAsyncSensor):
    def __init__(self, *, name: str, conn_id: str, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.conn_id = conn_id


class ArgSensor(BackoffSensor):
    """A base-class-swapped sensor with one templated argument (importable by name)."""

    template_fields = ("name",)

    def __init__(self, *, name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name

    def poke(self, context: Any) -> Any:

        POKES[self.name].append(seam.now())
        ready = READY_AT.get(self.name)
        if ready is not None and seam.now() >= ready:
            return compat.locations.PokeReturnValue(is_done=True, xcom_value={"name": self.name})
        return False


# --- the zero-worker start trigger of an ArgSensor (virtual clock) ---


def _trigger(
    name: str,
    started: float,
    timeout: float = 30.0,
    sensor_kwargs: dict[str, Any] | None = None,
    **start: Any,
) -> BackoffStartTrigger:
    sensor = ArgSensor(
        task_id="wait",
        name=name,
        deferrable=True,
        timeout=timeout,
        **{"poke_interval": 2, **(sensor_kwargs or {})},
    )
    kwargs = dict(sensor.deferrable_check({"ti": SimpleNamespace(dag_id="", task_id="wait", run_id="")}))
    plan = {
        "check": {**kwargs, "kwargs": {"name": None}},
        "fields": {"name": ["kwargs", "name"]},
        "policy": sensor.backoff_policy.to_dict(),
        "timeout": timeout,
        "backstop_seconds": timeout + 60,
        "do_xcom_push": True,
        "sensor": "ArgSensor",
        **start,
    }
    trigger = BackoffStartTrigger(start=plan, name=name)
    # What Airflow persisted for the try: 3.x the trigger timeout, 2.11 the task instance's start_date.
    trigger.task_instance = SimpleNamespace(  # type: ignore[assignment]
        dag_id="d",
        task_id="wait",
        run_id="r",
        map_index=-1,
        try_number=1,
        start_date=dt.datetime.fromtimestamp(started, dt.timezone.utc),
    )
    trigger.timeout_after = dt.datetime.fromtimestamp(started + timeout + 60, dt.timezone.utc)
    trigger._render_context = {
        "dag_run": SimpleNamespace(logical_date=None, data_interval_start=None, data_interval_end=None)
    }
    return trigger


async def _first_event(trigger: BackoffStartTrigger) -> Any:
    async for event in trigger.run():
        return event
    raise AssertionError("no event")


async def _event_with_time(trigger: BackoffTrigger, clock: FakeClock) -> tuple[dict[str, Any], float]:
    payload = await first_event(trigger)
    return payload, clock.now
