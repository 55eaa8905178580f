"""Where checks run in the triggerer: configuration, the bounded check threads, per-key slots, time limits,
rate limits, imports.

Blocking work (a sync ``poke``, a DB-API query) runs in a pool of our own with a fixed number of threads
(``[smart_ext] check_threads``), never on the triggerer's event loop and never through
``asgiref.sync_to_async`` (which funnels every call onto one thread). Checks with the same concurrency key
(one connection, or one sensor class) share ``[smart_ext] max_concurrent_checks_per_connection`` slots, so
1,000 triggers cannot open 1,000 connections at once. A check that hangs past its time limit is abandoned:
within a bounded budget its thread is detached and its slot released at once, so other tasks' hung checks
never take a live check's slot or thread (``check_threads``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import json
import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from airflow_smart_ext import compat
from airflow_smart_ext.conditions.check_threads import (
    AbandonedChecks,
    CheckThreads,
    PreviousCheckStillRunning,
)

CONFIG_SECTION = "smart_ext"
DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION = 4
DEFAULT_CHECK_THREADS = 32
# Abandoned checks whose threads may run detached (beyond check_threads): per concurrency key, in all.
DEFAULT_MAX_ABANDONED_PER_KEY = 8
DEFAULT_MAX_ABANDONED = 32
# A check's time limit when neither the sensor (check_timeout=) nor [smart_ext] check_time_limit sets one:
# its poke_interval, within these bounds (a check may take a while; a hung one must not hold a wait forever).
MIN_DEFAULT_CHECK_TIME_LIMIT = 60.0
MAX_DEFAULT_CHECK_TIME_LIMIT = 600.0

T = TypeVar("T")


# --- configuration -----------------------------------------------------------------------------------


_config_cache: dict[tuple[str, str, str | None], Any] = {}


def _config_value(key: str, default: Any) -> Any:
    """``[smart_ext] key``, read once per process (a lookup costs ~50 µs on 3.x; every trigger run needs
    several). Keyed by the option's environment variable too, so setting it (tests, a restart) is seen."""
    env = os.environ.get(f"AIRFLOW__{CONFIG_SECTION.upper()}__{key.upper()}")
    cache_key = (key, str(default), env)
    if cache_key not in _config_cache:
        _config_cache[cache_key] = compat.locations.airflow_conf.get(
            CONFIG_SECTION, key, fallback=str(default)
        )
    return _config_cache[cache_key]


def config_text(key: str, default: str = "") -> str:
    return str(_config_value(key, default))


def config_positive_int(key: str, default: int) -> int:
    value = _config_value(key, default)
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"[{CONFIG_SECTION}] {key} must be a positive integer, got {value!r}")
    return number


def config_non_negative_float(key: str, default: float) -> float:
    value = _config_value(key, default)
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not number >= 0:
        raise ValueError(f"[{CONFIG_SECTION}] {key} must be a number >= 0, got {value!r}")
    return number


def connection_rate_limit(explicit: float | None) -> float | None:
    """Checks per second allowed on a check's connection: the wait's own ``rate_limit``, else ``[smart_ext]
    max_checks_per_second_per_connection`` (0 there: None, no limit)."""
    if explicit is not None:
        return explicit
    return config_non_negative_float("max_checks_per_second_per_connection", 0.0) or None


# --- running blocking work off the event loop ---------------------------------------------------------

_pool: CheckThreads | None = None
_pool_lock = threading.Lock()
ABANDONED = AbandonedChecks()
# asyncio.Semaphore binds to the loop that first uses it: keep one set per running loop.
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _ConnectionSlots]] = (
    weakref.WeakKeyDictionary()
)


def existing_check_pool() -> CheckThreads | None:
    """The check threads of this process if a blocking check created them (never creates them)."""
    return _pool


def loop_entries(registry: Mapping[asyncio.AbstractEventLoop, T]) -> list[T]:
    """A per-loop registry's entry of the running loop (a triggerer has one loop), or every loop's when
    called outside one."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return list(registry.values())
    return [registry[loop]] if loop in registry else []


def connection_semaphore_count() -> int:
    """Connection slots of the running loop (or of all loops) that are held or waited for."""
    return sum(len(per_loop) for per_loop in loop_entries(_semaphores))


def config_cache_size() -> int:
    return len(_config_cache)


#: Which condition the check running in this task is for (the round sets its group's sharing key): a
#: condition whose abandoned check still runs starts no second one.
CHECK_OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "smart_ext_check_owner", default=None
)


def _check_pool() -> CheckThreads:
    """A pool of our own: the loop's default executor is small (cpu + 4) and shared with everything else."""
    global _pool
    if _pool is not None:  # the hot path (every blocking check): no lock once created
        return _pool
    with _pool_lock:
        if _pool is None:
            _pool = CheckThreads(config_positive_int("check_threads", DEFAULT_CHECK_THREADS))
        return _pool


async def run_blocking(func: Callable[..., T], *args: Any, key: str | None = None) -> T:
    """Run ``func(*args)`` in a check thread, keeping context variables (log context) like to_thread.

    With ``key``: in one of that concurrency key's slots. A waiter that gives up (time limit, cancelled
    trigger) abandons the call: within the abandoned-check budget its thread is detached and the slot
    released at once (``check_threads``); over it, the slot is released when the thread ends.
    """
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, func, *args)
    pool = _check_pool()
    if key is None:
        return await asyncio.wrap_future(pool.submit(call), loop=loop)  # type: ignore[no-any-return]
    owner = CHECK_OWNER.get()
    if ABANDONED.running(owner):
        raise PreviousCheckStillRunning(
            f"the previous check of this condition was abandoned and is still running (on {key}); "
            "not starting another until it ends"
        )
    release = await take_connection_slot(key)  # on the loop only: when the call ends or is detached
    try:
        future = pool.submit(call)
    except BaseException:
        release()
        raise

    def ended(_: Any) -> None:
        # RuntimeError: the loop closed (triggerer shutting down); nobody waits for the slot any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(release)

    future.add_done_callback(ended)
    try:
        return await asyncio.wrap_future(future, loop=loop)  # type: ignore[no-any-return]
    except asyncio.CancelledError:
        if not future.done():
            record = ABANDONED.add(
                key,
                owner,
                config_positive_int("max_abandoned_checks_per_connection", DEFAULT_MAX_ABANDONED_PER_KEY),
                config_positive_int("max_abandoned_checks", DEFAULT_MAX_ABANDONED),
                lambda: pool.detach(future),
            )
            if record.detached:
                release()
            future.add_done_callback(lambda _: ABANDONED.ended(record))
        raise


class CheckTimeLimitExceeded(TimeoutError):
    """A check ran past its time limit: a failed check (transient: a hung system may recover)."""


#: The time limit (seconds) of the check running in this task, set by the round that runs it: a shared check
#: that may wait inside (a connection lookup asked again) keeps that wait well within it.
CHECK_TIME_LIMIT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "smart_ext_check_time_limit", default=None
)


def check_time_limit(check_timeout: float | None, poke_interval: float) -> float:
    """Seconds one check may take: the sensor's ``check_timeout``, else ``[smart_ext] check_time_limit``,
    else derived from the schedule (``poke_interval`` within [60 s, 600 s])."""
    if check_timeout is not None:
        return float(check_timeout)
    configured = config_non_negative_float("check_time_limit", 0.0)
    if configured > 0:
        return configured
    return min(max(poke_interval, MIN_DEFAULT_CHECK_TIME_LIMIT), MAX_DEFAULT_CHECK_TIME_LIMIT)


class _ConnectionSlots:
    """One key's slots and how many hold or wait for one (the entry goes when none does)."""

    __slots__ = ("semaphore", "users")

    def __init__(self) -> None:
        self.semaphore = asyncio.Semaphore(
            config_positive_int(
                "max_concurrent_checks_per_connection", DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION
            )
        )
        self.users = 0


async def take_connection_slot(key: str) -> Callable[[], None]:
    """Wait for one of ``key``'s slots; returns its release (idempotent). A long-running triggerer keeps no
    entry for a connection nobody is checking."""
    loop = asyncio.get_running_loop()
    per_loop = _semaphores.setdefault(loop, {})
    slots = per_loop.get(key)
    if slots is None:
        slots = per_loop[key] = _ConnectionSlots()
    slots.users += 1

    def leave() -> None:
        slots.users -= 1
        if slots.users <= 0 and per_loop.get(key) is slots:
            del per_loop[key]
            if not per_loop:
                _semaphores.pop(loop, None)

    try:
        await slots.semaphore.acquire()
    except BaseException:
        leave()
        raise
    held = True

    def release() -> None:
        nonlocal held
        if held:
            held = False
            slots.semaphore.release()
            leave()

    return release


@contextlib.asynccontextmanager
async def connection_slot(key: str) -> AsyncIterator[None]:
    """``async with connection_slot(key):`` one of ``key``'s slots for the block (cancelling frees it)."""
    release = await take_connection_slot(key)
    try:
        yield
    finally:
        release()


# --- shipping user code and values to the triggerer ------------------------------------------------------


def callable_path(func: Any) -> str | None:
    """Dotted import path of a module-level function/class, or None when it cannot be imported by name.

    Used to ship callables (SQL criteria) and sensor classes to the triggerer, which imports them again.
    Lambdas, nested functions, bound methods, ``functools.partial`` and anything defined in a DAG file
    (Airflow imports DAG files as ``unusual_prefix_<hash>_<name>``, a name no other process can import)
    are not importable there.
    """
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    if module.startswith("unusual_prefix_"):
        return None
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    if target is not func:
        return None
    return f"{module}.{qualname}"


def json_problem(value: Any) -> str | None:
    """Why ``value`` cannot travel to the triggerer as JSON *unchanged*, or None when it can.

    Refused: what JSON cannot encode (objects, NaN, dicts with mixed key types) and what it changes on the
    way (tuples become lists, int keys become str keys: ``KeyError: 1`` in the triggerer).
    """
    try:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as err:
        return str(err)
    arrived = json.loads(text)
    if arrived != value:
        return (
            f"it arrives as {arrived!r}: JSON turns tuples into lists and dict keys into strings"
            if len(text) < 200
            else "JSON turns tuples into lists and dict keys into strings"
        )
    return None


_sys_path_lock = threading.Lock()


def import_object(dotted_path: str) -> Any:
    """Import ``pkg.module.Name`` (a sensor class or an SQL criterion) in the triggerer.

    Modules kept in the DAGs folder (e.g. ``dags/common/sensors.py`` imported as ``common.sensors``) are
    importable on workers because Airflow puts the DAGs folder / bundle on ``sys.path`` there, but the 3.x
    triggerer does not: on ``ModuleNotFoundError`` the DAGs folder is added and the import retried. Always
    retried: triggers starting together import in several check threads at once, and the import that failed
    here may have failed just before another thread added the folder.
    """
    module_name, _, attr = dotted_path.rpartition(".")
    if not module_name:
        raise ImportError(f"{dotted_path!r} is not a dotted 'module.name' path")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        dags_folder = compat.locations.airflow_conf.get("core", "dags_folder", fallback="")
        if not dags_folder or not os.path.isdir(dags_folder):
            raise
        with _sys_path_lock:
            if dags_folder not in sys.path:
                sys.path.append(dags_folder)
        module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {attr!r}") from None
