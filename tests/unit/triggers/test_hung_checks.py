"""Hung checks (real time, real threads): they never starve another wait, never delay a healthy one, never
outlive the deadline."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import importlib
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.conditions import check_threads, runtime
from airflow_smart_ext.triggers import BackoffTrigger
from airflow_smart_ext.triggers import worker_first as trigger_module
from tests.unit.triggers.fault_sensors import POKES, READY_AT, RECOVERED, RELEASE, check
from tests.unit.triggers.helpers import first_event, sensor_check
from tests.unit.triggers.helpers import make_trigger as trigger

pytestmark = pytest.mark.usefixtures("fault_sensor_state")


# --- hung checks (real time, real threads) ---------------------------------------------------------------------


async def test_hung_checks_on_one_connection_never_starve_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """100 checks that never return on one connection + one healthy sensor on another: the healthy one is
    checked on schedule and the thread count stays within the fixed pool."""
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    baseline = threading.active_count()
    start = time.time()
    policy = BackoffPolicy(initial=0.5, factor=1, jitter="none", splay=0)
    hung = [
        BackoffTrigger(
            check=check("HungSensor", name=f"h{i}", conn_id="hung"),
            policy=policy.to_dict(),
            seed=f"h{i}",
            started_at=start,
            deadline=start + 60,
            check_timeout=0.4,
        )
        for i in range(100)
    ]
    READY_AT["ok"] = float("inf")
    healthy = BackoffTrigger(
        check=check("OutageSensor", name="ok", conn_id="healthy"),
        policy=policy.to_dict(),
        seed="ok",
        started_at=start,
        deadline=start + 4,
        check_timeout=0.4,
    )
    tasks = [asyncio.ensure_future(first_event(t)) for t in hung]
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, threading.active_count() - baseline)
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    try:
        payload = await asyncio.wait_for(first_event(healthy), 30)
    finally:
        sampler.cancel()
        for task in tasks:
            task.cancel()
        RELEASE.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert payload["status"] == "timeout"  # it never came true; what matters is when it was checked
    # Checks #1..#8 (#0 was the worker's) are due every 0.5 s, #8 at the deadline. Starved (the bug), the
    # healthy wait gets no check at all. On a loaded machine its own first check (building the sensor in a
    # check thread) can outlast its 0.4 s time limit, and the slots it covers are skipped by design (missed
    # checks are skipped; no second check of a condition while one runs): seen on 2.11 under load, the first
    # check at 2.0-3.1 s, then every 0.5 s. So: checks made, none before its slot, every check after the
    # first on schedule, and the final check at the deadline.
    seen = [at - start for at in POKES["ok"]]
    assert 2 <= len(seen) <= 8 and seen == sorted(seen), seen
    assert all(at >= 0.5 * (n + 1) - 0.01 for n, at in enumerate(seen)), seen  # never before its slot
    gaps = [later - earlier for earlier, later in zip(seen, seen[1:], strict=False)]
    assert max(gaps) <= 1.5, seen  # once its first check reported, a slot's interval plus 1.0 s late at most
    assert 4 - 0.01 <= seen[-1] <= 4 + 1.0, seen  # the final check at the deadline
    # The hung connection holds its abandoned-check budget (detached threads) plus its own slots, no more:
    # each hung condition runs one check (no second while it hangs), the other conditions find the slots taken.
    hung_threads = (
        runtime.DEFAULT_MAX_ABANDONED_PER_KEY + runtime.DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION
    )
    # (fewer when a loaded machine starts some hung conditions' checks only after the window)
    assert 0 < sum(len(v) for k, v in POKES.items() if k != "ok") <= hung_threads
    assert all(len(v) == 1 for k, v in POKES.items() if k != "ok")
    assert peak <= hung_threads + 4  # plus the few threads the healthy checks use
    print(f"hung checks: threads above baseline peak={peak}; healthy checks {len(seen)}/8 on time")


async def test_the_trigger_reports_its_timeout_at_the_deadline_while_its_check_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    monkeypatch.setattr(trigger_module, "FINAL_CHECK_GRACE_SECONDS", 0.3)
    start = time.time()
    policy = BackoffPolicy(initial=0.5, factor=1, jitter="none", splay=0)
    hung = BackoffTrigger(
        check=check("HungSensor", name="late", conn_id="hung-deadline"),
        policy=policy.to_dict(),
        seed="late",
        started_at=start,
        deadline=start + 1.0,
        check_timeout=600,  # far beyond the deadline: the deadline must win
    )
    payload = await asyncio.wait_for(first_event(hung), 10)
    elapsed = time.time() - start
    assert payload["status"] == "timeout"
    assert 1.0 <= elapsed < 1.0 + 0.3 + 0.5, elapsed


def dags_folder_module(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, module: str, code: str) -> None:
    """``module`` in a DAGs folder that is not on sys.path (as in the 3.x triggerer) and not imported yet."""
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path))
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry != str(tmp_path)])
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_transient_errors_from_a_dags_folder_module_resolve_in_the_triggerer(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers put the DAGs folder on sys.path, the 3.x triggerer does not: the trigger must still find it.
    dags_folder_module(
        tmp_path, monkeypatch, "zz_dag_side_errors", "class FlakyWarehouse(Exception):\n    pass\n"
    )
    built = trigger(
        sensor_check("a"),
        BackoffPolicy(initial=1),
        transient_errors=["zz_dag_side_errors.FlakyWarehouse"],
    )
    assert [cls.__name__ for cls in built._transient_types] == ["FlakyWarehouse"]


def test_an_import_that_fails_just_before_another_thread_adds_the_dags_folder_is_retried(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Triggers starting together import their criteria in several check threads at once: this import fails
    # (the DAGs folder is not on sys.path yet), another thread adds the folder, then this one falls back.
    dags_folder_module(
        tmp_path, monkeypatch, "zz_dag_side_criteria", "def is_done(value):\n    return value == 'done'\n"
    )
    real_import = importlib.import_module
    failed_first: list[str] = []

    def import_module(name: str, package: str | None = None) -> Any:
        if name == "zz_dag_side_criteria" and not failed_first:
            failed_first.append(name)
            sys.path.append(str(tmp_path))  # the other thread, between this failure and its fallback
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert runtime.import_object("zz_dag_side_criteria.is_done")("done") is True
    assert failed_first and sys.path.count(str(tmp_path)) == 1
    with pytest.raises(ModuleNotFoundError):  # a module that is nowhere still fails, after one retry
        runtime.import_object("zz_no_such_module_anywhere.is_done")


@dataclasses.dataclass(frozen=True)
class HungScenario:
    id: str
    hung: tuple[tuple[str, str | None, int], ...]  # (sensor class, conn_id or None, number of hung waits)
    healthy: tuple[str, str | None, str]  # (sensor class, conn_id or None, behaviour "never" | "ready")
    hung_behaviour: str = "hang"
    hung_check_timeout: float = 0.15  # the hung waits' own check_timeout
    cancel_hung_at: float | None = None  # the hung waits are cancelled (task cleared) then
    recover_at: float | None = None  # RECOVERED is set then


SLOTS = runtime.DEFAULT_MAX_CONCURRENT_CHECKS_PER_CONNECTION
PER_KEY_BUDGET = runtime.DEFAULT_MAX_ABANDONED_PER_KEY
HUNG_SCENARIOS = [
    HungScenario("hung-same-class", (("ProbeSensor", None, 4),), ("ProbeSensor", None, "ready")),
    HungScenario("hung-same-class-never-true", (("ProbeSensor", None, 4),), ("ProbeSensor", None, "never")),
    HungScenario("hung-same-connection", (("ProbeSensor", "nfs", 4),), ("OtherProbeSensor", "nfs", "never")),
    HungScenario("hung-different-class", (("OtherProbeSensor", None, 4),), ("ProbeSensor", None, "never")),
    # The most a key may hang with every healthy wait of it still on time: its budget plus all slots but one.
    HungScenario(
        "n-hung-then-healthy",
        (("ProbeSensor", None, PER_KEY_BUDGET + SLOTS - 1),),
        ("ProbeSensor", None, "never"),
    ),
    HungScenario(
        "hung-on-many-keys",
        (("ProbeSensor", None, 6), ("OtherProbeSensor", None, 6), ("ProbeSensor", "nfs", 6)),
        ("ProbeSensor", "healthy-db", "never"),
    ),
    HungScenario(
        "hung-then-recovers",
        (("ProbeSensor", None, 4),),
        ("ProbeSensor", None, "never"),
        hung_behaviour="recovers",
        recover_at=1.0,
    ),
    HungScenario(
        "cancelled-while-its-check-hangs",
        (("ProbeSensor", None, 4),),
        ("ProbeSensor", None, "never"),
        hung_check_timeout=30,
        cancel_hung_at=0.3,
    ),
]


@pytest.mark.parametrize("scenario", HUNG_SCENARIOS, ids=lambda s: s.id)
async def test_other_tasks_hung_checks_never_delay_a_healthy_wait(
    scenario: HungScenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hung waits check first (at once) and are abandoned (time limit or cancellation) before the healthy
    wait's first check at 0.5 s: every check of the healthy wait runs on its schedule, each hung condition
    runs one check while it hangs, threads stay within the budget and Stats shows the abandoned checks."""
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    gauges: list[tuple[str, float]] = []
    monkeypatch.setattr(
        compat.locations.Stats, "gauge", lambda name, value, *a, **k: gauges.append((name, value))
    )
    baseline = threading.active_count()
    start = time.time()

    def probe(cls: str, conn_id: str | None, name: str, behaviour: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"name": name, "behaviour": behaviour}
        if conn_id is not None:
            kwargs["conn_id"] = conn_id
        return check(cls, **kwargs)

    hung = [
        BackoffTrigger(
            check=probe(cls, conn_id, f"hung-{cls}-{conn_id}-{i}", scenario.hung_behaviour),
            policy=BackoffPolicy(initial=0.1, factor=1, jitter="none", splay=0).to_dict(),
            seed=f"h{i}",
            started_at=start - 0.1,  # check #1 due at once
            deadline=start + 30,
            check_timeout=scenario.hung_check_timeout,
        )
        for cls, conn_id, count in scenario.hung
        for i in range(count)
    ]
    hung_tasks = [asyncio.ensure_future(first_event(t)) for t in hung]
    healthy_cls, healthy_conn, behaviour = scenario.healthy
    healthy = BackoffTrigger(
        check=probe(healthy_cls, healthy_conn, "healthy", behaviour),
        policy=BackoffPolicy(initial=0.5, factor=1, jitter="none", splay=0).to_dict(),
        seed="ok",
        started_at=start,
        deadline=start + 2,
        check_timeout=0.4,
    )
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, threading.active_count() - baseline)
            await asyncio.sleep(0.02)

    async def faults() -> None:
        if scenario.cancel_hung_at is not None:
            await asyncio.sleep(start + scenario.cancel_hung_at - time.time())
            for task in hung_tasks:
                task.cancel()
        if scenario.recover_at is not None:
            await asyncio.sleep(start + scenario.recover_at - time.time())
            RECOVERED.set()

    side = [asyncio.ensure_future(sample()), asyncio.ensure_future(faults())]
    try:
        payload = await asyncio.wait_for(first_event(healthy), 20)
        recovered = (
            await asyncio.wait_for(asyncio.gather(*hung_tasks), 10) if scenario.recover_at is not None else []
        )
    finally:
        for task in [*side, *hung_tasks]:
            task.cancel()
        RELEASE.set()
        await asyncio.gather(*side, *hung_tasks, return_exceptions=True)

    expected = [start + 0.5] if behaviour == "ready" else [start + 0.5 * k for k in range(1, 5)]
    assert payload["status"] == ("success" if behaviour == "ready" else "timeout")
    assert len(POKES["healthy"]) == len(expected), POKES["healthy"]
    for seen, due in zip(POKES["healthy"], expected, strict=True):
        assert due - 0.01 <= seen <= due + 0.5, (seen - start, due - start)
    hung_pokes = {name: len(times) for name, times in POKES.items() if name.startswith("hung-")}
    if scenario.recover_at is not None:
        # No second check while the first hung; once it returned, the next check found the condition true.
        assert all(event["status"] == "success" for event in recovered)
        assert set(hung_pokes.values()) == {2}, hung_pokes
    else:
        assert set(hung_pokes.values()) == {1}, hung_pokes  # one check per hung condition, never a second
    # Threads: per key at most its abandoned budget plus its slots, plus the few the healthy checks use.
    per_key: dict[tuple[str, str | None], int] = defaultdict(int)
    for cls, conn_id, count in scenario.hung:
        per_key[(cls if conn_id is None else "", conn_id)] += count
    bound = sum(min(count, PER_KEY_BUDGET + SLOTS) for count in per_key.values()) + 4
    assert peak <= bound, (peak, bound)
    assert any(name == check_threads.METRIC_ABANDONED_RUNNING and value > 0 for name, value in gauges), gauges
    print(f"{scenario.id}: threads above baseline peak={peak} (bound {bound}); healthy on time")


def test_a_detached_check_thread_gives_its_place_to_queued_work_and_ends_with_its_call() -> None:
    pool = check_threads.CheckThreads(2, name="smart-ext-test-pool")
    gate = threading.Event()
    running = [threading.Event(), threading.Event()]
    blocked = [pool.submit(lambda event=event: event.set() or gate.wait(30)) for event in running]
    queued = pool.submit(lambda: "ran")
    assert all(event.wait(5) for event in running)  # both live threads busy
    concurrent.futures.wait([queued], timeout=0.1)  # returns at once if a third thread ran it
    assert not queued.done()  # no third live thread
    assert pool.detach(blocked[0])
    assert queued.result(timeout=5) == "ran"  # a new live thread took the detached one's place
    assert not pool.detach(blocked[0])  # once
    names = lambda: {t.name for t in threading.enumerate() if t.name.startswith("smart-ext-test-pool")}  # noqa: E731
    assert len(names()) == 3
    gate.set()
    assert all(f.result(timeout=5) for f in blocked)
    deadline = time.monotonic() + 5
    while len(names()) > 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(names()) == 2  # the detached thread ended with its call; the live ones stay
