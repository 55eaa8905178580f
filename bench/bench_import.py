"""Question 2 — import cost: what importing our package adds on top of ``import airflow``, in fresh processes.

Every scheduler and dag-processor loads ``airflow_smart_ext.plugin`` (the ``airflow.plugins`` entry point),
so its import time is paid on every component start. Each sample is a brand-new interpreter that imports a
chain of modules and reports the cumulative time after each one, so "what our module adds" is measured
inside the same process as the ``import airflow`` it is compared with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from benchlib import Goal, Result, Table, fmt_seconds, median, ratio, script_main

GOAL_SECONDS = 0.050

# Child program: import each module in argv in order, print cumulative seconds after each (or the error).
_CHILD = r"""
import importlib, json, sys, time
out = []
started = time.perf_counter()
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out.append([name, time.perf_counter() - started, None])
    except Exception as exc:  # report, do not hide: the row will say the module failed to import
        out.append([name, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"])
        break
print(json.dumps(out))
"""

# (label, chain of modules). The measured increment is: cumulative time after the last module minus the
# cumulative time after the module named by ``reference`` in the same process.
VARIANTS: list[tuple[str, list[str], str]] = [
    ("`import airflow_smart_ext.plugin`", ["airflow", "airflow_smart_ext.plugin"], "airflow"),
    (
        "`…plugin` after `airflow.plugins_manager` (what a scheduler already has loaded)",
        ["airflow", "airflow.plugins_manager", "airflow_smart_ext.plugin"],
        "airflow.plugins_manager",
    ),
    ("`import airflow_smart_ext.sensors`", ["airflow", "airflow_smart_ext.sensors"], "airflow"),
    ("`import airflow_smart_ext.triggers`", ["airflow", "airflow_smart_ext.triggers"], "airflow"),
    (
        "plugin + sensors + triggers together",
        ["airflow", "airflow_smart_ext.plugin", "airflow_smart_ext.sensors", "airflow_smart_ext.triggers"],
        "airflow",
    ),
    (
        "baseline: common-sql `SqlSensor` (what users import today)",
        ["airflow", "airflow.providers.common.sql.sensors.sql"],
        "airflow",
    ),
]


def _child_env(airflow_home: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": airflow_home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "PYTHONDONTWRITEBYTECODE": "0",
        }
    )
    return env


def _sample(chain: list[str], env: dict[str, str]) -> list[list]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, *chain], env=env, capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"import child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(tiny: bool) -> Result:
    repeats = 1 if tiny else 10
    variants = VARIANTS[:1] if tiny else VARIANTS
    with tempfile.TemporaryDirectory(prefix="bench-import-") as home:
        env = _child_env(home)
        if not tiny:  # warm-up: airflow.cfg creation and .pyc compilation
            for _label, chain, _ref in variants:
                _sample(chain, env)
        airflow_alone: list[float] = []
        added: dict[str, list[float]] = {label: [] for label, _, _ in variants}
        errors: dict[str, str] = {}
        for _ in range(repeats):
            for label, chain, reference in variants:  # interleaved: one fresh process per variant per repeat
                out = _sample(chain, env)
                times = {name: seconds for name, seconds, _ in out}
                failed = [error for _, _, error in out if error]
                if failed:
                    errors[label] = failed[0]
                    continue
                airflow_alone.append(times["airflow"])
                added[label].append(times[chain[-1]] - times[reference])

    airflow_median = median(airflow_alone)
    table = Table(["import", "adds (median)", "min … max", "share of `import airflow`", "reading"])
    table.add(
        "`import airflow` (reference)",
        fmt_seconds(airflow_median),
        "",
        "100 %",
        "the floor every component pays",
    )
    goal_measured = "not measured"
    goal_met: bool | None = None
    for label, _chain, _reference in variants:
        if label in errors:
            table.add(label, "import failed", "", "", errors[label][:200])
            continue
        samples = added[label]
        value = median(samples)
        if "plugin`" in label and label.startswith("`import"):
            goal_met = value <= GOAL_SECONDS
            goal_measured = f"{fmt_seconds(value)} (median of {len(samples)} fresh processes)"
        reading = "within the 50 ms budget" if value <= GOAL_SECONDS else "over the 50 ms budget"
        table.add(
            label,
            fmt_seconds(value),
            f"{fmt_seconds(min(samples))} … {fmt_seconds(max(samples))}",
            f"{100 * ratio(value, airflow_median):.1f} %",
            reading,
        )
    return Result(
        key="import",
        title="Import cost",
        question=(
            "What does importing the package (and the plugin module every scheduler and dag-processor "
            "loads) add on top of `import airflow`?"
        ),
        method=(
            f"{repeats} repeats; in each repeat every variant runs in a brand-new `{os.path.basename(sys.executable)}` "
            "process that imports `airflow` and then our module, timing both with `time.perf_counter` inside "
            "the same process (variants interleaved). Medians; the share column is the added time divided by "
            "the median `import airflow` time of the same run. One warm-up process per variant first "
            "(writes airflow.cfg and .pyc files)."
        ),
        tables=[table],
        goals=[Goal("plugin import adds ≤ 50 ms on top of `import airflow`", goal_measured, goal_met)],
    )


if __name__ == "__main__":
    script_main(run)
