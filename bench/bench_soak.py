"""Issue 25, part 4 — a soak: 100,000 ``BackoffTrigger`` waits created and ended in one process over an hour.

One fresh child process drives every wait through Airflow's own ``TriggerRunner.run_trigger`` on a plain
asyncio loop, as ``bench_triggerer.py`` does (no supervisor, no DB). Waits are created at a steady rate and
end in every way a wait ends in a triggerer: the condition comes true (shared conditions flipping), the
deadline passes, the task is cancelled (as the triggerer cancels on a user action or a reassignment), the
check raises a permanent error, transient errors are ridden out until the system recovers, checks hang
beyond their time limit (abandoned) until it recovers. Every ``SAMPLE_EVERY`` seconds the child writes RSS,
threads, open file descriptors, asyncio tasks and every registry of ours
(``airflow_smart_ext.triggers.registries``) to ``samples.jsonl``; after the last wait ended and a settle,
the final sizes. Standalone (the documented run)::

    .venv-3.3/bin/python bench/bench_soak.py --minutes 65 --waits 100000 --out-dir /tmp/soak \\
        --png docs/soak.png --json /tmp/soak/result.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import gc
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import Result, fake_ti, render_result, rss_bytes

BENCH_DIR = Path(__file__).resolve().parent
ENDINGS = {"success": 40, "timeout": 15, "cancel": 15, "error": 10, "transient": 10, "hung": 10}
EPOCH = 20.0  # conditions of one epoch are shared by the waits created in it
POLICY = {"initial": 2.0, "factor": 1.5, "cap": 6.0, "jitter": "full", "splay": 1.0}
CONNECTIONS = 10  # connection ids the checks use (token buckets and slots are per connection)
RATE_LIMIT = 20.0  # checks per second per connection, on the success waits
HANG_SECONDS = 4.0
HUNG_CHECK_TIMEOUT = 1.5
SAMPLE_EVERY = 15.0
# Deadline of a wait that does not time out on purpose (the flips and recoveries come well before it); a
# smoke run ends sooner, as the final sample waits for every deadline to pass.
DEADLINE_SECONDS = 300.0
TINY_DEADLINE_SECONDS = 60.0
SETTLE_SECONDS = 20.0  # after the last wait ended: abandoned checks return, wake-up timers fire
DEFAULT_MINUTES = 65.0
DEFAULT_WAITS = 100_000
RUN_ALL_MINUTES = 10.0  # run_all.py's full run (SMART_EXT_SOAK_MINUTES overrides); the hour is standalone


def _check(classpath: str, index: int, **kwargs: Any) -> dict[str, Any]:
    return {
        "type": "sensor",
        "classpath": f"soak_checks.{classpath}",
        "kwargs": kwargs,
        "context": {"dag_id": "soak", "task_id": f"wait_{index}", "run_id": "soak", "try_number": 1},
    }


def _make_wait(
    index: int, ending: str, now: float, rng: random.Random, deadline: float = DEADLINE_SECONDS
) -> tuple[Any, float | None]:
    """The trigger of wait ``index`` and when to cancel it (None: it ends on its own)."""
    from airflow_smart_ext.triggers import BackoffTrigger
    from airflow_smart_ext.wait_model.sharing import wait_seed

    epoch = int(now // EPOCH) * EPOCH
    conn_id = f"db-{index % CONNECTIONS}"
    options: dict[str, Any] = {"deadline": now + deadline}
    cancel_after = None
    if ending == "success":  # flips 20-50 s after its epoch began
        check = _check("FlipSensor", index, key=index % 6, at=epoch + 20 + 6 * (index % 6), conn_id=conn_id)
        options["rate_limit"] = RATE_LIMIT
    elif ending in ("timeout", "cancel"):  # long-lived groups, joined by waits of every epoch
        check = _check("NeverSensor", index, key=index % 20, conn_id=conn_id)
        if ending == "timeout":
            options["deadline"] = now + rng.uniform(8.0, 30.0)
        else:
            cancel_after = rng.uniform(3.0, 40.0)
    elif ending == "error":
        check = _check("BrokenSensor", index, key=f"{epoch:.0f}-{index % 3}", conn_id=conn_id)
    elif ending == "transient":
        check = _check("FlakySensor", index, key=index % 3, at=epoch + 30, conn_id=conn_id)
    else:
        check = _check(
            "HangingSensor",
            index,
            key=index % 3,
            at=epoch + 30,
            hang=HANG_SECONDS,
            conn_id=f"hung-{index % 3}",
        )
        options["check_timeout"] = HUNG_CHECK_TIMEOUT
    trigger = BackoffTrigger(
        check=check,
        policy=dict(POLICY),
        seed=wait_seed(check),  # as the sensor does: one schedule per condition
        started_at=now,
        after=0,
        share=True,
        **options,
    )
    return trigger, cancel_after


def _process_sample() -> dict[str, Any]:
    from airflow_smart_ext.triggers import registries

    status = Path("/proc/self/status").read_text()
    threads = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:"))
    return {
        "rss_mib": rss_bytes() / 2**20,
        "threads": threads,
        "fds": len(os.listdir("/proc/self/fd")),
        "asyncio_tasks": len(asyncio.all_tasks()),
        "registries": registries.sizes(),
    }


async def _soak(minutes: float, waits: int, out_dir: Path, deadline: float) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from airflow.jobs import triggerer_job_runner
        from airflow.jobs.triggerer_job_runner import TriggerRunner

    import soak_checks  # noqa: F401  (imported before the baseline, as the triggerer would have it)

    from airflow_smart_ext.triggers.worker_first import FINAL_CHECK_GRACE_SECONDS

    # 3.x: the message of a cancel by user action (on_kill runs); 2.11 has none (a plain cancel).
    user_cancel = getattr(triggerer_job_runner, "_USER_ACTION_CANCEL_MSG", None)
    loop = asyncio.get_running_loop()
    runner: Any = TriggerRunner()  # its ``triggers`` entries are typed per Airflow version
    rate = waits / (minutes * 60.0)
    endings = [name for name, weight in ENDINGS.items() for _ in range(weight)]
    live: dict[int, tuple[str, asyncio.Task[None]]] = {}
    ended: collections.Counter[str] = collections.Counter()
    statuses: dict[int, str] = {}
    failures: list[str] = []
    samples = (out_dir / "samples.jsonl").open("w")
    started = time.time()
    created = 0
    latest_deadline = started

    def take_events() -> None:
        while runner.events:
            entry: Any = runner.events.popleft()  # 3.x: TriggerEventEntry; 2.11: (trigger_id, event)
            trigger_id, event = (entry.trigger_id, entry.event) if hasattr(entry, "event") else entry
            statuses[trigger_id] = event.payload.get("status", "?")

    def on_done(index: int, task: asyncio.Task[None]) -> None:
        ending, _ = live.pop(index)
        runner.triggers.pop(index, None)
        take_events()
        if task.cancelled():
            status = "cancelled"
        elif task.exception() is not None:
            status = "raised"
            if len(failures) < 5:
                failures.append(f"{ending}: {task.exception()!r}"[:300])
        else:
            status = statuses.pop(index, "no event")
        ended[f"{ending}->{status}"] += 1

    def sample(phase: str) -> None:
        record = {"t": time.time() - started, "phase": phase, "created": created, "live": len(live)}
        record["ended"] = sum(ended.values())
        record.update(_process_sample())
        samples.write(json.dumps(record) + "\n")
        samples.flush()

    async def sampler() -> None:
        while True:
            sample("creating" if created < waits else "draining")
            await asyncio.sleep(SAMPLE_EVERY)

    sampling = asyncio.create_task(sampler())
    while created < waits:
        due = min(waits, int(rate * (time.time() - started)) + 1)
        while created < due:
            index = created
            rng = random.Random(index)
            ending = endings[rng.randrange(len(endings))]
            trigger, cancel_after = _make_wait(index, ending, time.time(), rng, deadline)
            trigger.task_instance = fake_ti(index)
            runner.triggers[index] = {"task": None, "name": f"soak/{index}", "events": 0, "is_watcher": False}
            task = asyncio.create_task(runner.run_trigger(index, trigger))
            runner.triggers[index]["task"] = task
            live[index] = (ending, task)
            latest_deadline = max(latest_deadline, trigger.deadline)
            task.add_done_callback(functools.partial(on_done, index))
            if cancel_after is not None:
                args = (user_cancel,) if user_cancel and index % 2 else ()
                loop.call_later(cancel_after, task.cancel, *args)
            created += 1
        await asyncio.sleep(0.05)
    created_seconds = time.time() - started
    while live:
        await asyncio.sleep(1.0)
    drained_seconds = time.time() - started
    sampling.cancel()
    sample("no waits left")
    await asyncio.sleep(SETTLE_SECONDS)
    gc.collect()
    sample("settled")
    # A wait that ended may leave wake-ups armed until its own moments (at most its deadline + the final
    # check's grace): sample again once every such moment has passed, to tell "held until" from "leaked".
    await asyncio.sleep(max(0.0, latest_deadline + FINAL_CHECK_GRACE_SECONDS + 2.0 - time.time()))
    gc.collect()
    sample("after every deadline")
    samples.close()
    summary = {
        "minutes": minutes,
        "waits": waits,
        "created": created,
        "ended": dict(sorted(ended.items())),
        "created_seconds": created_seconds,
        "drained_seconds": drained_seconds,
        "failures": failures,
        "runner_triggers_left": len(runner.triggers),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))


def _run_child(minutes: float, waits: int, out_dir: Path, deadline: float) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))
    with (out_dir / "child.stderr").open("w") as stderr:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(minutes), str(waits), str(out_dir), str(deadline)],
            env=env,
            stdout=subprocess.DEVNULL,  # every trigger logs; the real triggerer pays that too
            stderr=stderr,
            timeout=minutes * 60 + 1800,
        )
    if proc.returncode != 0 or not (out_dir / "summary.json").exists():
        tail = (out_dir / "child.stderr").read_text()[-3000:]
        raise RuntimeError(f"soak child failed ({proc.returncode}): {tail}")


def run_soak(
    minutes: float, waits: int, out_dir: Path, png: Path | None, deadline: float = DEADLINE_SECONDS
) -> Result:
    from soak_report import result_from

    _run_child(minutes, waits, out_dir, deadline)
    return result_from(out_dir, png, measured=minutes >= 60)


def run(tiny: bool) -> Result:
    """``run_all.py``'s entry: a short soak (the documented hour runs standalone, see the module docstring)."""
    import tempfile

    minutes = 0.5 if tiny else float(os.environ.get("SMART_EXT_SOAK_MINUTES", RUN_ALL_MINUTES))
    waits = 600 if tiny else int(DEFAULT_WAITS * minutes / DEFAULT_MINUTES)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        return run_soak(minutes, waits, Path(tmp), None, TINY_DEADLINE_SECONDS if tiny else DEADLINE_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true", help="30 s, 600 waits (numbers meaningless)")
    parser.add_argument("--json", type=Path, help="write the Result as JSON to this path")
    parser.add_argument("--minutes", type=float, help=f"creation phase (default {DEFAULT_MINUTES:g})")
    parser.add_argument("--waits", type=int, help=f"waits created (default {DEFAULT_WAITS:,})")
    parser.add_argument("--out-dir", type=Path, help="samples.jsonl, summary.json, child.stderr go here")
    parser.add_argument("--png", type=Path, help="write the plot here (e.g. docs/soak.png)")
    args = parser.parse_args()
    began = time.perf_counter()
    if args.minutes is None and args.waits is None and args.out_dir is None:
        result = run(args.tiny)  # as run_all.py calls it
    else:
        result = run_soak(
            args.minutes or DEFAULT_MINUTES,
            args.waits or DEFAULT_WAITS,
            args.out_dir or Path("/tmp/soak"),
            args.png,
        )
    result.seconds = time.perf_counter() - began
    if args.json:
        args.json.write_text(result.to_json())
    else:
        sys.stdout.write(render_result(result, 0) + "\n")


if __name__ == "__main__":
    if "--child" in sys.argv:
        minutes, waits, out_dir, deadline = sys.argv[sys.argv.index("--child") + 1 :][:4]
        asyncio.run(_soak(float(minutes), int(waits), Path(out_dir), float(deadline)))
    else:
        main()
