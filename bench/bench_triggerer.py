"""Question 5 — triggerer capacity: N live ``BackoffTrigger``s in one process vs N ``TimeDeltaTrigger``s.

Each configuration runs in a fresh child process (so resident memory is not shared between them). The child
drives every trigger through Airflow's own ``TriggerRunner.run_trigger`` coroutine — the per-trigger wrapper
the real triggerer uses (logging context, tracing span, event queue, ``cleanup()``) — on a plain asyncio
event loop. Airflow's supervisor/DB sync loop around it (``TriggerRunner.arun``: sockets to the supervisor,
DB queries) is not run: there is no scheduler or metadata DB in this benchmark.

Measured in a steady-state window after every trigger has started:

* loop lag — a watchdog coroutine sleeps 50 ms in a loop and records how late it wakes up (p50 / p99);
* resident memory per trigger — (RSS after the triggers started − RSS before creating them) ÷ N;
* CPU per check — process CPU time in the window ÷ checks executed in the window (``poke`` calls of a
  counting sensor that never becomes true, so every trigger keeps running).

``BackoffTrigger`` runs a compressed policy so that checks happen within the window (the production
default of minutes between checks would make the window idle): see ``POLICY``. Every trigger gets its own
check (distinct sensor kwargs, ``share=False``), i.e. no de-duplication helps here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import (
    Goal,
    Result,
    Table,
    fake_ti,
    fmt_num,
    fmt_ratio,
    fmt_seconds,
    median,
    percentile,
    ratio,
    rss_bytes,
    script_main,
)

BENCH_DIR = Path(__file__).resolve().parent
POLICY = {"initial": 2.0, "factor": 2.0, "cap": 60.0, "jitter": "full", "splay": 2.0}
# Fan-out: checks at most 4 s apart per condition, so every condition completes inside the window.
FANOUT_POLICY = {"initial": 2.0, "factor": 2.0, "cap": 8.0, "jitter": "full", "splay": 2.0}
WATCHDOG_PERIOD = 0.05
SETTLE_SECONDS = 3.0  # after the last trigger was created, before the measured window opens
GOAL_P99_SECONDS = 0.100
GOAL_FANOUT_P99_SECONDS = 0.050
FANOUT_CONDITIONS = 10
SHARED = "BackoffTrigger, 10 shared conditions"
# Airflow's own trigger completing the same way: N DateTimeTriggers whose moments fall on FANOUT_CONDITIONS
# instants inside the window (N/10 each), so the fan-out row has a same-run baseline for "N tasks' waits end".
FIRING = "DateTimeTrigger, 10 firing instants"
# The fan-out again with the opt-in GC schedule of airflow_smart_ext.triggers.gc_tuning.
GC_INTERVAL = 3600
SHARED_GC = f"{SHARED}, triggerer_full_gc_interval={GC_INTERVAL}"
KINDS = ("TimeDeltaTrigger", "BackoffTrigger", SHARED, SHARED_GC, FIRING)


def _make_trigger(kind: str, index: int, now: float, window: float = 0.0) -> Any:
    import warnings
    from datetime import timedelta

    if kind in ("TimeDeltaTrigger", FIRING):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Present on 2.11 and, as Airflow's shim to the standard provider, on 3.x.
            from airflow.triggers.temporal import TimeDeltaTrigger
        if kind == FIRING:
            # Within 20 s the trigger re-reads its moment every second: _fire_in_window moves it into the window.
            return TimeDeltaTrigger(timedelta(seconds=20))
        return TimeDeltaTrigger(timedelta(hours=1))
    from airflow_smart_ext.triggers import BackoffTrigger
    from airflow_smart_ext.wait_model.sharing import wait_seed

    if kind in (SHARED, SHARED_GC):
        # N waits on FANOUT_CONDITIONS conditions; condition j comes true at (j + 1) / (C + 1) of the window,
        # so every condition completes all its subscribers inside the measured window.
        condition = index % FANOUT_CONDITIONS
        shared_check = {
            "type": "sensor",
            "classpath": "bench_checks.ReadyAfterSensor",
            "kwargs": {"key": condition, "ready_after": 0.2 * window * condition / FANOUT_CONDITIONS},
            "context": {"dag_id": "bench_fanout", "task_id": f"wait_{index}", "run_id": "bench"},
        }
        return BackoffTrigger(
            check=shared_check,
            policy=dict(FANOUT_POLICY),
            seed=wait_seed(shared_check),  # as the sensor does: one schedule per condition
            started_at=now,
            deadline=None,
            after=0,
            share=True,
        )
    check = {
        "type": "sensor",
        "classpath": "bench_checks.CountingNeverTrueSensor",
        "kwargs": {"key": index},
        "context": {
            "dag_id": "bench_triggerer",
            "task_id": f"wait_{index}",
            "run_id": "bench",
            "map_index": -1,
            "try_number": 1,
        },
    }
    return BackoffTrigger(
        check=check,
        policy=dict(POLICY),
        seed=f"bench_triggerer/wait_{index}/bench",
        started_at=now,
        deadline=None,
        after=0,
        share=False,
    )


def _fire_in_window(triggers: list[Any], window_start: float, window: float) -> None:
    """Move FIRING triggers' moments onto FANOUT_CONDITIONS instants, the last at 0.8 of the window."""
    import pendulum

    # 3.x keeps the moment behind a read-only property (``_moment``); 2.11 in a plain attribute.
    attribute = "_moment" if isinstance(getattr(type(triggers[0]), "moment", None), property) else "moment"
    for index, trigger in enumerate(triggers):
        instant = (index % FANOUT_CONDITIONS + 1) / FANOUT_CONDITIONS * 0.8 * window
        setattr(trigger, attribute, pendulum.from_timestamp(window_start + instant))


async def _child(kind: str, count: int, window: float, settle: float) -> dict[str, Any]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from airflow.jobs.triggerer_job_runner import TriggerRunner

    import bench_checks

    _make_trigger(kind, -1, time.time())  # import every module the triggers need before the RSS baseline
    runner = TriggerRunner()
    rss_before = rss_bytes()
    loop = asyncio.get_running_loop()
    created = time.perf_counter()
    now = time.time()
    triggers = []
    for index in range(count):
        trigger = _make_trigger(kind, index, now, window)
        triggers.append(trigger)
        trigger.task_instance = fake_ti(index)
        runner.triggers[index] = {"task": None, "name": f"bench/{index}", "events": 0, "is_watcher": False}
        runner.triggers[index]["task"] = asyncio.create_task(runner.run_trigger(index, trigger))
        if index % 200 == 199:
            await asyncio.sleep(0)  # the real runner also yields while creating triggers
    create_seconds = time.perf_counter() - created
    await asyncio.sleep(settle)  # every trigger task has started and reached its first wait

    lags: list[float] = []
    stop = asyncio.Event()
    import gc

    gc_pauses: list[float] = []
    full_pauses: list[float] = []  # generation-2 collections: they traverse every tracked object
    gc_started: list[float] = []
    gc_collected: list[int] = []  # cyclic garbage the collector reclaimed in the window

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_started[:] = [time.perf_counter()]
        elif gc_started:
            gc_pauses.append(time.perf_counter() - gc_started[0])
            gc_collected.append(info["collected"])
            if info["generation"] == 2:
                full_pauses.append(gc_pauses[-1])

    gc.callbacks.append(on_gc)
    tracked_objects = len(gc.get_objects()) + gc.get_freeze_count()
    gc_pauses.clear()
    full_pauses.clear()
    gc_collected.clear()
    bench_checks.WINDOW_START.append(time.time())
    if kind == FIRING:
        _fire_in_window(triggers, bench_checks.WINDOW_START[0], window)

    async def watchdog() -> None:
        while not stop.is_set():
            started = loop.time()
            await asyncio.sleep(WATCHDOG_PERIOD)
            lags.append(max(0.0, loop.time() - started - WATCHDOG_PERIOD))

    pokes_before = bench_checks.pokes_so_far()
    cpu_before = time.process_time()
    wall_before = time.perf_counter()
    watcher = asyncio.create_task(watchdog())
    await asyncio.sleep(window)
    stop.set()
    await watcher
    wall = time.perf_counter() - wall_before
    cpu = time.process_time() - cpu_before
    checks = bench_checks.pokes_so_far() - pokes_before
    rss_after = rss_bytes()
    gc.callbacks.remove(on_gc)
    # Cyclic garbage not yet reclaimed at the end of the window (with the opt-in GC schedule: what freezing
    # held back, its memory cost).
    gc.unfreeze()
    garbage_held = gc.collect()
    tasks = [details["task"] for details in runner.triggers.values()]
    failed = [task for task in tasks if task.done() and task.exception() is not None]
    alive = sum(1 for task in tasks if not task.done())
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "kind": kind,
        "count": count,
        "alive": alive,
        "failed": [repr(task.exception())[:300] for task in failed[:3]],
        "events": len(runner.events),
        "create_seconds": create_seconds,
        "rss_per_trigger": (rss_after - rss_before) / count,
        "lag_p50": percentile(lags, 50),
        "lag_p99": percentile(lags, 99),
        "lag_max": max(lags),
        "gc_pause_max": max(gc_pauses, default=0.0),
        "gc_pause_total": sum(gc_pauses),
        "gc_full": len(full_pauses),
        "gc_full_max": max(full_pauses, default=0.0),
        "tracked_objects": tracked_objects,
        "gc_collected": sum(gc_collected),
        "garbage_held": garbage_held,
        "cpu_share": cpu / wall,
        "checks": checks,
        "cpu_per_check": cpu / checks if checks else None,
    }


def _run_child(kind: str, count: int, window: float, settle: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-trig-") as tmp:
        out = Path(tmp) / "out.json"
        env = dict(os.environ)
        env.setdefault("AIRFLOW_HOME", tmp)
        env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        env.pop("AIRFLOW__SMART_EXT__TRIGGERER_FULL_GC_INTERVAL", None)
        if kind == SHARED_GC:
            env["AIRFLOW__SMART_EXT__TRIGGERER_FULL_GC_INTERVAL"] = str(GC_INTERVAL)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))
        proc = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(count), str(window), str(settle), str(out)],
            env=env,
            stdout=subprocess.DEVNULL,  # every trigger logs; the real triggerer pays that too
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"{kind} x {count} child failed ({proc.returncode}): {proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def run(tiny: bool) -> Result:
    sizes = (20,) if tiny else (1000, 10000)
    window = 0.5 if tiny else 10.0
    settle = 0.5 if tiny else SETTLE_SECONDS
    repeats = 1 if tiny else 3
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
    errors: dict[tuple[str, int], str] = {}
    for _ in range(repeats):
        for count in sizes:
            for kind in KINDS:  # interleaved: a noisy phase of the machine hits both kinds alike
                if (kind, count) in errors:
                    continue
                try:
                    samples.setdefault((kind, count), []).append(_run_child(kind, count, window, settle))
                except Exception as exc:
                    errors[(kind, count)] = str(exc)

    table = Table(
        [
            "triggers",
            "N",
            "alive at end",
            "start-up of N",
            "loop lag p50",
            "loop lag p99",
            "p99 vs TimeDelta",
            "RSS / trigger",
            "RSS vs TimeDelta",
            "checks in window",
            "CPU / check",
            "CPU (share of 1 core)",
            "reading",
        ]
    )
    goal = Goal(
        f"10,000 BackoffTriggers with loop lag p99 < {fmt_seconds(GOAL_P99_SECONDS)}", "not measured", None
    )
    fanout_goals = {
        kind: Goal(
            f"10,000 waits on {FANOUT_CONDITIONS} conditions ({kind}): loop lag p99 < "
            f"{fmt_seconds(GOAL_FANOUT_P99_SECONDS)}",
            "not measured",
            None,
        )
        for kind in (SHARED, SHARED_GC)
    }
    notes = []
    for count in sizes:
        for kind in KINDS:
            key = (kind, count)
            if key in errors:
                table.add(kind, fmt_num(count), "failed", *[""] * 9, errors[key][-300:])
                continue
            runs = samples[key]
            base = samples.get(("TimeDeltaTrigger", count))
            p99 = median([r["lag_p99"] for r in runs])
            rss = median([r["rss_per_trigger"] for r in runs])
            p99_ratio = rss_ratio = float("nan")
            if base and len(base) == len(runs):
                p99_ratio = median(
                    [
                        ratio(max(r["lag_p99"], 1e-4), max(b["lag_p99"], 1e-4))
                        for r, b in zip(runs, base, strict=True)
                    ]
                )
                rss_ratio = median(
                    [
                        ratio(r["rss_per_trigger"], b["rss_per_trigger"])
                        for r, b in zip(runs, base, strict=True)
                    ]
                )
            cpu_per_check = [r["cpu_per_check"] for r in runs if r["cpu_per_check"]]
            alive = min(r["alive"] for r in runs)
            for r in runs:
                if r["failed"]:
                    notes.append(f"{kind} x {count}: trigger tasks failed: {r['failed']}")
            gc_text = (
                f"GC: {fmt_num(median([r['gc_full'] for r in runs]), 0)} full collections of "
                f"{fmt_num(median([r['tracked_objects'] for r in runs]), 0)} objects, longest "
                f"{fmt_seconds(median([r['gc_full_max'] for r in runs]))}; cyclic garbage reclaimed in the "
                f"window {fmt_num(median([r['gc_collected'] for r in runs]), 0)} objects, still held at its end "
                f"{fmt_num(median([r['garbage_held'] for r in runs]), 0)}"
            )
            if kind == "TimeDeltaTrigger":
                reading = "baseline: sleeping coroutines, no checks"
            elif kind == FIRING:
                reading = (
                    f"Airflow's own trigger, {count - alive:,} of {count:,} fired in the window: p99 lag "
                    f"{fmt_seconds(p99)}; {gc_text}"
                )
            elif kind in (SHARED, SHARED_GC):
                done = count - alive
                reading = (
                    f"p99 lag {fmt_seconds(p99)} "
                    + ("< 50 ms" if p99 < GOAL_FANOUT_P99_SECONDS else "≥ 50 ms: over the goal")
                    + f"; {done:,} of {count:,} waits completed in the window (all {FANOUT_CONDITIONS} "
                    f"conditions came true in it), {fmt_num(median([r['checks'] for r in runs]), 0)} checks; "
                    + gc_text
                )
            else:
                reading = (
                    f"p99 lag {fmt_seconds(p99)} "
                    + ("< 100 ms" if p99 < GOAL_P99_SECONDS else "≥ 100 ms: over the goal")
                    + f", {fmt_num(median([r['checks'] for r in runs]), 0)} checks in {window:g} s"
                )
                if alive < count:
                    reading += f"; only {alive:,} of {count:,} still running"
            table.add(
                kind,
                fmt_num(count),
                f"{alive:,}",
                fmt_seconds(median([r["create_seconds"] for r in runs])),
                fmt_seconds(median([r["lag_p50"] for r in runs])),
                fmt_seconds(p99),
                fmt_ratio(p99_ratio),
                f"{rss / 1024:.1f} KiB",
                fmt_ratio(rss_ratio),
                fmt_num(median([r["checks"] for r in runs]), 0),
                fmt_seconds(median(cpu_per_check)) if cpu_per_check else "n/a",
                f"{median([r['cpu_share'] for r in runs]):.0%}",
                reading,
            )
            if kind in (SHARED, SHARED_GC) and count == max(sizes):
                firing = samples.get((FIRING, count))
                baseline = (
                    f"; Airflow's DateTimeTrigger firing {count:,} in the same window: p99 "
                    f"{fmt_seconds(median([r['lag_p99'] for r in firing]))}"
                    if firing
                    else ""
                )
                setting = (
                    f" with [smart_ext] triggerer_full_gc_interval = {GC_INTERVAL}"
                    if kind == SHARED_GC
                    else ""
                )
                fanout_goals[kind] = Goal(
                    f"{count:,} waits on {FANOUT_CONDITIONS} conditions, every condition completing all its "
                    f"subscribers in the window{setting}: loop lag p99 < {fmt_seconds(GOAL_FANOUT_P99_SECONDS)}",
                    f"p99 {fmt_seconds(p99)} (median of {len(runs)} runs), {count - alive:,} completed"
                    + baseline,
                    (p99 < GOAL_FANOUT_P99_SECONDS and alive == 0) if not tiny else None,
                )
            if kind == "BackoffTrigger" and count == max(sizes):
                goal = Goal(
                    f"{count:,} BackoffTriggers with loop lag p99 < {fmt_seconds(GOAL_P99_SECONDS)}",
                    f"p99 {fmt_seconds(p99)} (median of {len(runs)} runs), {alive:,} alive",
                    (p99 < GOAL_P99_SECONDS and alive == count) if not tiny else None,
                )
    return Result(
        key="triggerer",
        title="Triggerer capacity",
        question=(
            "How many live `BackoffTrigger`s can one triggerer process hold: memory per trigger, event-loop lag "
            "(p50/p99) and CPU per check, vs the same number of Airflow `TimeDeltaTrigger`s?"
        ),
        method=(
            "Driven by Airflow's own `TriggerRunner.run_trigger` (the per-trigger coroutine of the real "
            "triggerer) on a plain asyncio loop in a fresh process per configuration; the runner's "
            "supervisor/DB loop is not run. Triggers are created in batches of 200 (yielding to the loop "
            "in between, as the runner does); start-up of N is that creation time. After a "
            f"{settle:g} s settle, a watchdog coroutine sleeps 50 ms in a loop and records its "
            f"wake-up delay over a {window:g} s window. BackoffTrigger policy {POLICY} (compressed so "
            "checks happen in the window: a stress test — at 10,000 triggers it makes several hundred "
            "checks per second, where 10,000 sensors with `poke_interval=60`, `max_wait=30 min` make about "
            "10 per second once at the cap), one distinct never-true sensor check per trigger, `share=False`. "
            f"Fan-out row ({SHARED!r}): N waits on {FANOUT_CONDITIONS} conditions sharing checks (`share=True`, "
            f"one seed per condition as the sensor does), policy {FANOUT_POLICY}; condition j comes true at "
            "0.02·j of the window, so the lag includes every moment a condition completes its N/10 "
            "subscribers at once. "
            f"Baseline row ({FIRING!r}): N of Airflow's own `TimeDeltaTrigger`s whose moments fall on "
            f"{FANOUT_CONDITIONS} instants in the window (N/10 each; Airflow's trigger polls every second "
            "in its last 20 s, as it does in production), so both rows end N waits in the window. "
            f"Row {SHARED_GC!r}: the fan-out again with the opt-in GC schedule "
            f"(`[smart_ext] triggerer_full_gc_interval = {GC_INTERVAL}`). GC readings: full collections in the "
            "window and the longest, cyclic garbage the collector reclaimed in the window, and cyclic garbage "
            "still held at its end (what `gc.collect()` after `gc.unfreeze()` reclaims then). "
            f"Median of {repeats} runs per row; kinds interleaved; ratios are BackoffTrigger ÷ TimeDeltaTrigger "
            "of the same repeat (lag floored at 0.1 ms)."
        ),
        tables=[table],
        goals=[goal, *fanout_goals.values()],
        notes=notes,
    )


def _child_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=5, metavar=("KIND", "COUNT", "WINDOW", "SETTLE", "OUT"))
    args = parser.parse_args()
    kind, count, window, settle, out = args.child
    result = asyncio.run(_child(kind, int(count), float(window), float(settle)))
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    if "--child" in sys.argv:
        _child_main()
    else:
        script_main(run)
