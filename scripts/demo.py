"""The main job: every example DAG, run to completion in a real Airflow, with a readable summary.

Run through ``python3 scripts/dev.py demo`` (which makes the virtualenv). Starts scheduler, dag-processor,
triggerer and api-server (3.x) or scheduler, triggerer and webserver (2.11) on SQLite in the project-local
``.airflow-home-<version>``; unpauses every DAG of ``example_dags/`` (scheduled DAGs run their bounded
catchup; ``schedule=None`` DAGs are triggered once), waits until nothing is left to run, and prints per DAG
its runs with data intervals, run times and states, each sensor's pokes and intervals, and whether deferred
tasks went through ``deferred``. Exit code 1 if any run or task failed. ``--keep-ui`` leaves Airflow up at
http://localhost:8080 until Ctrl-C.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_harness.env import AirflowEnv, iter_dag_files  # noqa: E402
from airflow_harness.state import EXAMPLE_DAGS_DIR  # noqa: E402

POKE_LINE = re.compile(r"Poke #(\d+) \(check #(\d+)\): condition not met; next check #(\d+) in ([\d.]+)s")
DONE_LINE = re.compile(
    r"(Success criteria met after \d+ poke\(s\)[^\n]*|Trigger finished: status=\S+ after \d+ check\(s\)[^\n]*|Sensor has timed out[^\n]*)"
)
DAG_ID = re.compile(r"""dag_id\s*=\s*["']([\w.-]+)["']""")


# Example DAGs defined only where Airflow has what they show (their files say so): -> the first such version.
NEEDS_AIRFLOW = {"watcher_orders_producer": "3.0", "watcher_orders_consumer": "3.0"}


def example_dag_ids(airflow_version: str) -> list[str]:
    ids = []
    for path in iter_dag_files([EXAMPLE_DAGS_DIR]):
        ids += DAG_ID.findall(path.read_text())
    major_minor = tuple(int(part) for part in airflow_version.split(".")[:2])
    return sorted(
        dag_id
        for dag_id in set(ids)
        if major_minor >= tuple(int(part) for part in NEEDS_AIRFLOW.get(dag_id, "0.0").split("."))
    )


def asset_scheduled(env: AirflowEnv, dag_id: str) -> bool:
    """Scheduled on assets (datasets on 2.11): runs come from asset events, never from a manual trigger."""
    table = "dag_schedule_asset_reference" if env.is_airflow3 else "dag_schedule_dataset_reference"
    return bool(env.query(f"SELECT 1 FROM {table} WHERE dag_id = %s", (dag_id,)))  # noqa: S608 (fixed names)


def fmt_time(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def duration(ti: dict[str, Any]) -> str:
    if ti.get("start_date") and ti.get("end_date"):
        return f"{(ti['end_date'] - ti['start_date']).total_seconds():.1f}s"
    return "-"


def sensor_story(env: AirflowEnv, dag_id: str, run_id: str, ti: dict[str, Any]) -> list[str]:
    lines = []
    try:
        log = env.task_log(dag_id, run_id, ti["task_id"], try_number=max(1, int(ti.get("try_number") or 1)))
    except Exception:  # a task that never ran has no log
        return lines
    intervals = [f"{float(m.group(4)):.1f}s" for m in POKE_LINE.finditer(log)]
    if intervals:
        lines.append(
            f"        pokes not met: {len(intervals)}; next-poke intervals: {', '.join(intervals[:12])}"
            + (" ..." if len(intervals) > 12 else "")
        )
    lines += [f"        {m.group(1)}" for m in DONE_LINE.finditer(log)]
    return lines


def wait_until_done(env: AirflowEnv, dag_ids: list[str], timeout: float) -> list[str]:
    """Wait until every DAG has ended all its runs and plans no more; the DAGs still pending at the timeout."""
    deadline = time.monotonic() + timeout
    pending = list(dag_ids)
    while time.monotonic() < deadline:
        pending = []
        for dag_id in dag_ids:
            runs = env.dag_runs(dag_id)
            more = env.query("SELECT next_dagrun_create_after FROM dag WHERE dag_id = %s", (dag_id,))
            creating = bool(more and more[0][0] is not None)
            if creating or not runs or any(r["state"] not in ("success", "failed") for r in runs):
                pending.append(dag_id)
        if not pending:
            return []
        time.sleep(2)
    print(f"[demo] FAILED: gave up waiting after {timeout:.0f}s; still pending: {', '.join(pending)}")
    return pending


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep-ui", action="store_true")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()

    import airflow

    home = ROOT / f".airflow-home-{airflow.__version__}"
    env = AirflowEnv(
        dag_sources=[EXAMPLE_DAGS_DIR],
        home=home,
        api_port=8080 if args.keep_ui else None,
        with_webserver=args.keep_ui,
        webserver_port=8080 if args.keep_ui else None,
        bind_host="0.0.0.0" if args.keep_ui else "127.0.0.1",
    )
    print(f"[demo] Airflow {env.airflow_version}, AIRFLOW_HOME={home}; starting components ...", flush=True)
    failed = False
    try:
        env.start()
        dag_ids = example_dag_ids(env.airflow_version)
        for dag_id in dag_ids:
            env.wait_for_dag(dag_id)
        for dag_id in dag_ids:
            env.unpause(dag_id)
            schedule = env.query("SELECT next_dagrun_create_after FROM dag WHERE dag_id = %s", (dag_id,))
            if (not schedule or schedule[0][0] is None) and not asset_scheduled(env, dag_id):
                env.trigger(dag_id)  # schedule=None: one manual run
        print(f"[demo] running {len(dag_ids)} example DAGs: {', '.join(dag_ids)}", flush=True)
        # A DAG still running at the timeout, or without a successful run, fails the demo: the main job is
        # every example DAG run to completion (CI runs this on 3.3 and 2.11.2).
        failed = bool(wait_until_done(env, dag_ids, args.timeout))

        print("\n" + "=" * 100)
        for dag_id in dag_ids:
            runs = env.dag_runs(dag_id)
            print(f"\nDAG {dag_id}: {len(runs)} run(s)")
            if not any(run["state"] == "success" for run in runs):
                print("  FAILED: no successful run")
                failed = True
            for run in sorted(
                runs,
                key=lambda r: (
                    r.get("data_interval_start") is None,
                    r.get("data_interval_start") or 0,
                    r["run_id"],
                ),
            ):
                failed |= run["state"] != "success"
                interval = f"{fmt_time(run.get('data_interval_start'))} -> {fmt_time(run.get('data_interval_end'))} UTC"
                print(
                    f"  {run['state'].upper():8} {run['run_id']}\n"
                    f"           data interval {interval}; ran {fmt_time(run.get('start_date'))} -> {fmt_time(run.get('end_date'))}"
                )
                for ti in env.task_instances(dag_id, run["run_id"]):
                    history = env.state_history(dag_id, run["run_id"], ti["task_id"], ti.get("map_index", -1))
                    went = [s for s in ("up_for_reschedule", "deferred") if s in history]
                    # Zero-worker wait: deferred, never queued for or run on a worker (docs/deferrable.md).
                    zero_worker = "deferred" in history and not {"queued", "running"} & set(history)
                    failed |= ti["state"] not in ("success", "skipped")
                    print(
                        f"      task {ti['task_id']}: {ti['state']} in {duration(ti)}, try {ti.get('try_number')}"
                        + (f"; went through {' and '.join(went)}" if went else "")
                        + (
                            "; waited with ZERO worker phases (started and ended in the triggerer)"
                            if zero_worker
                            else ""
                        )
                    )
                    for line in sensor_story(env, dag_id, run["run_id"], ti):
                        print(line)
        print("\n" + "=" * 100)
        print(
            "[demo] RESULT:", "some runs FAILED (see above)" if failed else "every example DAG run succeeded"
        )
        if args.keep_ui:
            print("[demo] Airflow is up at http://localhost:8080 — Ctrl-C to stop.", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        env.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
