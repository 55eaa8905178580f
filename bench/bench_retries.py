"""Task retries: Airflow's own retry delays vs ``BackoffRetryPolicy``, on a virtual clock (no sleeping).

Airflow's side calls its real ``TaskInstance.next_retry_datetime`` (``retry_exponential_backoff=2.0``,
``retry_delay`` = base, ``max_retry_delay`` = cap) on a stand-in holding exactly the attributes it reads;
ours calls the real ``BackoffRetryPolicy.evaluate`` with the same retries, base and cap, once per jitter.

(a) Outage herd: 1,000 task instances fail at t=0 against a dependency that is down for 10 minutes; every
    try while it is down fails at once, the first try after recovery succeeds. Two shapes of the 1,000:
    distinct tasks, and one mapped task with 1,000 map indexes (Airflow hashes dag_id, task_id, logical
    date and try number -- not the map index -- into its jitter).
(b) Error mix: 4xx (never succeed), 429 with ``Retry-After`` (any call inside the window gets 429 again,
    with the remaining window) and 5xx (the service is back after a per-task random time).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import statistics
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from benchlib import Goal, Result, Table, fmt_num, peak_in_window, script_main

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
LOGICAL_DATE = EPOCH - dt.timedelta(days=1)
RUN_ID = "scheduled__2025-12-31T00:00:00+00:00"
JITTERS = ("full", "equal", "decorrelated", "none")
DEFAULT_JITTER = "equal"  # BackoffRetryPolicy's default
OUTAGE = 600.0
# (retries, base delay, cap): the headline configuration first, then a grid for robustness.
HEADLINE = (5, 60.0, 600.0)
GRID = [(3, 60.0, 600.0), (5, 30.0, 600.0), (5, 60.0, 600.0), (8, 10.0, 300.0), (3, 300.0, 3600.0)]
_SILENT = logging.getLogger("bench.silent")
_SILENT.setLevel(logging.CRITICAL)

# A delay function: (task index, map_index-or-None, try number just failed, error) -> seconds.
DelayFn = Callable[[str, int, int, BaseException], float | None]


def airflow_delays(retries: int, base: float, cap: float) -> DelayFn:
    """Airflow's real ``TaskInstance.next_retry_datetime`` minus the failed try's end: its retry delay."""
    from airflow.models.taskinstance import TaskInstance

    task = SimpleNamespace(
        retry_delay=dt.timedelta(seconds=base),
        retry_exponential_backoff=2.0,
        max_retry_delay=dt.timedelta(seconds=cap),
    )

    def delay(task_id: str, map_index: int, try_number: int, error: BaseException) -> float:
        stand_in = SimpleNamespace(
            retry_delay_override=None,
            task=task,
            try_number=try_number,
            dag_id="bench_retries",
            task_id=task_id,
            map_index=map_index,
            logical_date=LOGICAL_DATE,
            execution_date=LOGICAL_DATE,
            end_date=EPOCH,
            log=_SILENT,
        )
        return float((TaskInstance.next_retry_datetime(stand_in) - EPOCH).total_seconds())

    return delay


def our_delays(retries: int, base: float, cap: float, jitter: str, http_aware: bool = False) -> DelayFn:
    """``BackoffRetryPolicy.evaluate`` (the real decision, as the worker calls it); None = fail now."""
    from airflow_smart_ext.retries import CONNECTION_ERRORS, HTTP_ERRORS, BackoffRetryPolicy

    rules = [HTTP_ERRORS, CONNECTION_ERRORS] if http_aware else []
    policy = BackoffRetryPolicy(initial=base, factor=2, cap=cap, jitter=jitter, rules=rules)

    def delay(task_id: str, map_index: int, try_number: int, error: BaseException) -> float | None:
        ti = SimpleNamespace(dag_id="bench_retries", task_id=task_id, run_id=RUN_ID, map_index=map_index)
        decision = policy.evaluate(error, try_number, retries, {"ti": ti})
        if decision.action.value != "retry":
            return None
        return float(decision.retry_delay.total_seconds())

    return delay


class _Response:
    def __init__(self, status: int, retry_after: float | None = None) -> None:
        self.status_code = status
        self.headers = {} if retry_after is None else {"Retry-After": str(int(retry_after + 0.999))}


class HTTPError(Exception):
    def __init__(self, status: int, retry_after: float | None = None) -> None:
        super().__init__(f"{status}")
        self.response = _Response(status, retry_after)


# ---- (a) outage herd -------------------------------------------------------------------------------
def outage(delay: DelayFn, retries: int, tasks: int, mapped: bool) -> dict[str, Any]:
    """Per task: retry times until one lands after recovery (success) or the retries run out."""
    retry_times: list[float] = []
    saved: dict[int, float] = {}
    refused = ConnectionRefusedError("connection refused")
    for index in range(tasks):
        task_id, map_index = ("fan_out", index) if mapped else (f"task_{index}", -1)
        now = 0.0
        for try_number in range(1, retries + 1):
            wait = delay(task_id, map_index, try_number, refused)
            if wait is None:
                break
            now += wait
            retry_times.append(now)
            if now >= OUTAGE:
                saved[index] = now
                break
    during = sum(t < OUTAGE for t in retry_times)
    return {
        "saved": saved,
        "peak10": peak_in_window(retry_times, 10.0, not_before=OUTAGE),
        "during": during,
        "lost": tasks - len(saved),
        "mean_after": statistics.fmean(t - OUTAGE for t in saved.values()) if saved else float("nan"),
    }


# ---- (b) error mix ---------------------------------------------------------------------------------
def error_mix(delay: DelayFn, retries: int, tasks: int, seed: int = 7) -> dict[str, float]:
    """Each task: one error kind. 4xx never succeeds; 429 says Retry-After R (a call before t0 + R gets 429
    with the rest of the window); 5xx succeeds from a per-task recovery time on."""
    rng = random.Random(seed)
    wasted = inside = retried = successes = 0
    for index in range(tasks):
        kind = ("4xx", "429", "5xx")[index % 3]
        window = rng.choice((30.0, 120.0, 600.0)) if kind == "429" else 0.0
        recovers = rng.uniform(0, 900) if kind == "5xx" else 0.0
        now = 0.0
        error: BaseException = (
            HTTPError(404) if kind == "4xx" else HTTPError(429, window) if kind == "429" else HTTPError(503)
        )
        for try_number in range(1, retries + 1):
            wait = delay(f"task_{index}", -1, try_number, error)
            if wait is None:
                break
            now += wait
            retried += 1
            if kind == "4xx":
                wasted += 1
                error = HTTPError(404)
            elif kind == "429":
                if now < window:
                    inside += 1
                    error = HTTPError(429, window - now)
                else:
                    successes += 1
                    break
            elif now >= recovers:
                successes += 1
                break
    return {"wasted": wasted, "inside": inside, "retries": retried, "successes": successes}


def run(tiny: bool) -> Result:
    tasks = 60 if tiny else 1000
    mix_tasks = 60 if tiny else 900
    retries, base, cap = HEADLINE
    result = Result(
        key="retries",
        title="Task retries",
        question=(
            "When many tasks fail against one dependency, how hard do their retries hit it at recovery, how many "
            "tasks run out of retries, and how many retries are spent on errors that cannot succeed or inside a "
            "server's Retry-After window -- Airflow's own retry delays vs BackoffRetryPolicy?"
        ),
        method=(
            f"Virtual clock. Airflow: its real `TaskInstance.next_retry_datetime` with `retry_exponential_backoff=2.0`, "
            f"`retry_delay`=base, `max_retry_delay`=cap. Ours: the real `BackoffRetryPolicy.evaluate` with "
            f"initial=base, factor 2, the same cap and `retries`. (a) {tasks:,} task instances fail at t=0, the "
            f"dependency is down {OUTAGE / 60:g} min; a try fails instantly while it is down, the first try after "
            "recovery succeeds; peak = most retries in any 10 s window after recovery (sliding). (b) "
            f"{mix_tasks:,} tasks, a third each 404, 429 with Retry-After 30 s / 2 min / 10 min, 503 recovering "
            "after U(0, 15 min); ours with `rules=[HTTP_ERRORS, CONNECTION_ERRORS]`. Headline configuration: "
            f"retries={retries}, base {base:g} s, cap {cap:g} s; a grid of other configurations below."
        ),
    )
    candidates: dict[str, DelayFn] = {
        "Airflow `retry_exponential_backoff=2.0`": airflow_delays(retries, base, cap)
    }
    for jitter in JITTERS:
        label = f"ours `jitter={jitter!r}`" + (" (default)" if jitter == DEFAULT_JITTER else "")
        candidates[label] = our_delays(retries, base, cap, jitter)
    airflow_label = next(iter(candidates))

    table_a = Table(
        [
            "shape",
            "policy",
            "peak retries / 10 s after recovery",
            "retries during the outage",
            "tasks out of retries before recovery",
            "lost here but saved by Airflow",
            "mean time to success after recovery",
        ],
        caption=f"(a) Outage herd: {tasks:,} task instances, dependency down {OUTAGE / 60:g} min, "
        f"retries={retries}, base {base:g} s, cap {cap:g} s.",
    )
    headline: dict[tuple[bool, str], dict[str, Any]] = {}
    for mapped in (False, True):
        shape = f"1 mapped task × {tasks:,}" if mapped else f"{tasks:,} distinct tasks"
        baseline = outage(candidates[airflow_label], retries, tasks, mapped)
        for label, delay in candidates.items():
            measured = baseline if label == airflow_label else outage(delay, retries, tasks, mapped)
            extra_lost = len(set(baseline["saved"]) - set(measured["saved"]))
            measured["extra_lost"] = extra_lost
            headline[(mapped, label)] = measured
            table_a.add(
                shape,
                label,
                fmt_num(measured["peak10"]),
                fmt_num(measured["during"]),
                fmt_num(measured["lost"]),
                "—" if label == airflow_label else fmt_num(extra_lost),
                f"{measured['mean_after']:.0f} s",
            )
    result.tables.append(table_a)

    # Grid: the two goal measures of (a) for the default jitter, over other configurations.
    grid = Table(
        [
            "retries, base, cap",
            "shape",
            "Airflow: peak / out of retries",
            "ours (default): peak / out of retries",
            "lost here but saved by Airflow",
        ],
        caption="(a) across configurations, default jitter.",
    )
    grid_misses = 0
    for config in [] if tiny else GRID:
        r, b, c = config
        for mapped in (False, True):
            theirs = outage(airflow_delays(r, b, c), r, tasks, mapped)
            mine = outage(our_delays(r, b, c, DEFAULT_JITTER), r, tasks, mapped)
            lost = len(set(theirs["saved"]) - set(mine["saved"]))
            grid_misses += lost > 0 or mine["peak10"] > theirs["peak10"]
            grid.add(
                f"{r}, {b:g} s, {c:g} s",
                "mapped" if mapped else "distinct",
                f"{theirs['peak10']:,} / {theirs['lost']:,}",
                f"{mine['peak10']:,} / {mine['lost']:,}",
                fmt_num(lost),
            )
    if grid.rows:
        result.tables.append(grid)

    table_b = Table(
        [
            "policy",
            "retries on 4xx (cannot succeed)",
            "calls inside a Retry-After window",
            "retries in all",
            "tasks recovered",
        ],
        caption=f"(b) Error mix: {mix_tasks:,} tasks (404 / 429 + Retry-After / 503), retries={retries}, base {base:g} s, cap {cap:g} s.",
    )
    mix: dict[str, dict[str, float]] = {}
    mix[airflow_label] = error_mix(candidates[airflow_label], retries, mix_tasks)
    for jitter in JITTERS:
        label = f"ours `jitter={jitter!r}` + HTTP_ERRORS" + (" (default)" if jitter == DEFAULT_JITTER else "")
        mix[label] = error_mix(our_delays(retries, base, cap, jitter, http_aware=True), retries, mix_tasks)
    for label, measured in mix.items():
        table_b.add(
            label,
            fmt_num(measured["wasted"]),
            fmt_num(measured["inside"]),
            fmt_num(measured["retries"]),
            fmt_num(measured["successes"]),
        )
    result.tables.append(table_b)

    ours_b = next(v for k, v in mix.items() if "(default)" in k)
    theirs_b = mix[airflow_label]
    result.goals.append(
        Goal(
            "(b) 0 retries on errors that cannot succeed (4xx)",
            f"{ours_b['wasted']:,.0f} (Airflow: {theirs_b['wasted']:,.0f})",
            ours_b["wasted"] == 0,
        )
    )
    result.goals.append(
        Goal(
            "(b) 0 calls inside a Retry-After window",
            f"{ours_b['inside']:,.0f} (Airflow: {theirs_b['inside']:,.0f})",
            ours_b["inside"] == 0,
        )
    )
    default_label = next(k for k in candidates if "(default)" in k)
    for mapped in (False, True):
        shape = "mapped" if mapped else "distinct"
        ours_a, theirs_a = headline[(mapped, default_label)], headline[(mapped, airflow_label)]
        result.goals.append(
            Goal(
                f"(a, {shape}) our default loses no task that Airflow's saves",
                f"{ours_a['extra_lost']:,} lost that Airflow saved (ours out of retries: {ours_a['lost']:,}, "
                f"Airflow: {theirs_a['lost']:,})",
                ours_a["extra_lost"] == 0,
            )
        )
        result.goals.append(
            Goal(
                f"(a, {shape}) our default's peak at recovery is no higher",
                f"{ours_a['peak10']:,} vs Airflow {theirs_a['peak10']:,} per 10 s",
                ours_a["peak10"] <= theirs_a["peak10"],
            )
        )
    distinct_ours, distinct_airflow = headline[(False, default_label)], headline[(False, airflow_label)]
    result.notes.append(
        "Airflow's jitter hashes dag_id, task_id, logical date and try number, not the map index: every instance "
        "of a mapped task retries in the same second (its 1,000 peak). Ours seeds each task instance, map index "
        "included."
    )
    result.notes.append(
        "Same base, different reach: before retry k Airflow waits U[b, 2b) (mean 1.5 b), our default (equal "
        "jitter) U[b/2, b] (mean 0.75 b). Ours retries sooner -- here "
        f"{distinct_ours['during']:,} retries during the outage vs Airflow's {distinct_airflow['during']:,}, "
        f"and success {distinct_ours['mean_after']:.0f} s vs {distinct_airflow['mean_after']:.0f} s after "
        "recovery on average -- and with few retries on a short base its total wait can end before a long outage "
        "does where Airflow's does not (grid rows with losses): give such tasks more retries, a larger initial, "
        "or bound them by time with budget."
    )
    if grid.rows:
        result.notes.append(
            f"Grid: the default misses at least one of the two (a) goals in {grid_misses} of {len(grid.rows)} "
            "configuration/shape pairs (see the grid table)."
        )
    return result


if __name__ == "__main__":
    script_main(run)
