"""Only the cold 2,000-run plan of ``bench_timetables.py`` (same timetables, same method: a freshly
deserialized instance per repeat, median of 9), for re-measuring that absolute goal on a quiet machine:

    .venv-3.3/bin/python bench/bench_timetable_plan.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_timetables as bt  # noqa: E402
import pendulum  # noqa: E402


def main() -> int:
    ours, notes = bt.our_timetables()
    for note in notes:
        print("note:", note)
    earliest = pendulum.datetime(2016, 1, 4, tz="UTC")
    seconds: dict[str, list[float]] = {label: [] for label in ours}
    for _ in range(9):
        for label, timetable in ours.items():
            fresh = type(timetable).deserialize(timetable.serialize())
            started = time.perf_counter()
            infos = bt.plan(fresh, bt.plan_start(label, earliest), bt.PLAN_RUNS)
            seconds[label].append(time.perf_counter() - started)
            if len(infos) != bt.PLAN_RUNS:
                print(f"MISS: {label} planned only {len(infos)} runs")
                return 1
    missed = 0
    for label, values in seconds.items():
        value = statistics.median(values)
        met = value < bt.GOAL_PLAN_SECONDS
        missed += not met
        print(f"{value * 1000:8.1f} ms  {'met   ' if met else 'MISSED'}  {label}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
