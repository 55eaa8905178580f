"""The soak's report: slopes over the last hour, final registry sizes, the table and the PNG plot.

Reads what ``bench_soak.py``'s child wrote (``samples.jsonl``, ``summary.json``); also usable on a run that
is still going (``python bench/soak_report.py /tmp/soak``) for partial numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchlib import Goal, Result, Table, fmt_num, render_result

WINDOW_SECONDS = 3600.0  # the slope is fitted over the last hour of the creation phase
# Growth allowed over that hour: RSS 5 % of its level at the window's start, threads and fds under one.
RSS_GROWTH_GOAL = 0.05


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per hour."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600.0 if var else float("nan")


def load(out_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    samples = [json.loads(line) for line in (out_dir / "samples.jsonl").read_text().splitlines() if line]
    summary_path = out_dir / "summary.json"
    return samples, json.loads(summary_path.read_text()) if summary_path.exists() else None


def plot(samples: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from airflow_smart_ext.triggers.registries import PER_WAIT

    minutes = [s["t"] / 60 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    panels = [
        (axes[0], "RSS (MiB)", [("rss_mib", "RSS")]),
        (axes[1], "threads / open fds", [("threads", "threads"), ("fds", "open fds")]),
        (axes[2], "waits", [("live", "live waits"), ("asyncio_tasks", "asyncio tasks")]),
    ]
    for axis, label, series in panels:
        for key, name in series:
            axis.plot(minutes, [s[key] for s in samples], label=name)
        axis.set_ylabel(label)
        axis.legend(loc="upper left", fontsize=8)
        axis.grid(alpha=0.3)
    for name in PER_WAIT:
        values = [s["registries"][name] for s in samples]
        if any(values):
            axes[3].plot(minutes, values, label=name)
    axes[3].set_ylabel("registry sizes (per-wait)")
    axes[3].set_xlabel("minutes since start")
    axes[3].legend(loc="upper left", fontsize=7, ncol=2)
    axes[3].grid(alpha=0.3)
    fig.suptitle("Soak: BackoffTrigger waits created and ended in one process (Airflow's run_trigger)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)
    plt.close(fig)


def result_from(out_dir: Path, png: Path | None, measured: bool) -> Result:
    from airflow_smart_ext.triggers.registries import PER_WAIT

    samples, summary = load(out_dir)
    creating = [s for s in samples if s["phase"] == "creating"]
    end_of_creation = creating[-1]["t"] if creating else 0.0
    window = [s for s in creating if s["t"] >= end_of_creation - WINDOW_SECONDS]
    first, last = (window[0], window[-1]) if window else (samples[0], samples[-1])
    final = samples[-1]
    settled = next((s for s in samples if s["phase"] == "settled"), final)
    slopes = {
        key: slope_per_hour([(s["t"], s[key]) for s in window]) for key in ("rss_mib", "threads", "fds")
    }
    span_min = (last["t"] - first["t"]) / 60
    table = Table(
        [
            "quantity",
            f"window start (min {first['t'] / 60:.0f})",
            "window end",
            "slope / hour",
            "20 s after the last wait",
            "after every deadline",
        ]
    )
    for key, name in (("rss_mib", "RSS (MiB)"), ("threads", "threads"), ("fds", "open fds")):
        table.add(
            name,
            fmt_num(first[key]),
            fmt_num(last[key]),
            f"{slopes[key]:+.2f}",
            fmt_num(settled[key]),
            fmt_num(final[key]),
        )
    table.add(
        "live waits",
        fmt_num(first["live"]),
        fmt_num(last["live"]),
        "",
        fmt_num(settled["live"]),
        fmt_num(final["live"]),
    )
    table.add(
        "asyncio tasks",
        fmt_num(first["asyncio_tasks"]),
        fmt_num(last["asyncio_tasks"]),
        "",
        fmt_num(settled["asyncio_tasks"]),
        fmt_num(final["asyncio_tasks"]),
    )
    peak = {name: max(s["registries"][name] for s in samples) for name in final["registries"]}
    for name, size in final["registries"].items():
        kind = "per wait" if name in PER_WAIT else "bounded"
        table.add(
            f"`{name}` ({kind})",
            fmt_num(first["registries"][name]),
            fmt_num(last["registries"][name]),
            f"peak {peak[name]:,}",
            fmt_num(settled["registries"][name]),
            fmt_num(size),
        )
    leaked = {name: settled["registries"][name] for name in PER_WAIT if settled["registries"][name]}
    still = {name: final["registries"][name] for name in PER_WAIT if final["registries"][name]}
    rss_growth = slopes["rss_mib"] * span_min / 60
    done = summary is not None
    goals = [
        Goal(
            f"last hour of creation: RSS growth < {RSS_GROWTH_GOAL:.0%}, threads and fds growth < 1",
            f"over {span_min:.0f} min: RSS {slopes['rss_mib']:+.2f} MiB/h ({rss_growth / first['rss_mib']:+.1%}), "
            f"threads {slopes['threads']:+.2f}/h, fds {slopes['fds']:+.2f}/h",
            (
                rss_growth < RSS_GROWTH_GOAL * first["rss_mib"]
                and slopes["threads"] * span_min / 60 < 1
                and slopes["fds"] * span_min / 60 < 1
            )
            if measured and done
            else None,
        ),
        Goal(
            "every per-wait registry empty when no waits remain (20 s after the last one ended)",
            ("all empty" if not leaked else "not empty: " + ", ".join(f"{k}={v}" for k, v in leaked.items()))
            + "; after every wait's deadline had passed: "
            + ("all empty" if not still else ", ".join(f"{k}={v}" for k, v in still.items())),
            (not leaked) if done else None,
        ),
    ]
    notes = []
    if summary is None:
        notes.append(
            f"partial: the run is still going ({final['created']:,} created, {final['live']:,} live)"
        )
    else:
        ended = sum(summary["ended"].values())
        notes.append(
            f"{summary['created']:,} waits created in {summary['created_seconds'] / 60:.1f} min, {ended:,} ended "
            f"(all by {summary['drained_seconds'] / 60:.1f} min); endings (kind->event): "
            + ", ".join(f"{k} {v:,}" for k, v in summary["ended"].items())
        )
        if summary["failures"]:
            notes.append("trigger tasks that raised: " + "; ".join(summary["failures"]))
    if png is not None:
        plot(samples, png)
        notes.append(f"plot: `{png.name}` (RSS, threads, fds, live waits, per-wait registry sizes over time)")
    return Result(
        key="soak",
        title="Soak: waits created and ended for an hour in one triggerer process",
        question=(
            "After 100,000 waits have come and gone in one triggerer process, are memory, threads, file "
            "descriptors and every registry/pool/cache of ours back to their baseline?"
        ),
        method=(
            "bench/bench_soak.py: one fresh process drives `BackoffTrigger`s through Airflow's own "
            "`TriggerRunner.run_trigger` on a plain asyncio loop (no supervisor/DB, as bench_triggerer). "
            "Waits are created at a steady rate, each ending one way: a shared condition flips true (40 %, "
            "rate-limited per connection), deadline (15 %), cancelled as the triggerer does (15 %, half with "
            "Airflow's user-action message), permanent error (10 %), transient errors until recovery (10 %), "
            "checks hanging beyond their time limit until recovery (10 %). Sampled every 15 s; the slope is a "
            "least-squares fit over the last hour of the creation phase; final sizes after the last wait "
            "ended, a 20 s settle and `gc.collect()`. Registries: `airflow_smart_ext.triggers.registries`."
        ),
        tables=[table],
        goals=goals,
        notes=notes,
    )


def main() -> None:
    """Report a run's directory (also one still going): ``soak_report.py /tmp/soak [--png P] [--json J]``."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir", type=Path, nargs="?", default=Path("/tmp/soak"))
    parser.add_argument("--png", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--measured", action="store_true", help="judge the slope goal (an hour-long run)")
    args = parser.parse_args()
    result = result_from(args.out_dir, args.png, args.measured)
    if args.json:
        args.json.write_text(result.to_json())
    sys.stdout.write(render_result(result, 0) + "\n")


if __name__ == "__main__":
    main()
