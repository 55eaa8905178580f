#!/usr/bin/env python3
"""The project's two commands, for a fresh machine that has only Python >= 3.10.

    python3 scripts/dev.py demo [--airflow 3.3|2.11.2] [--keep-ui]   # the main job: example DAGs in a real Airflow
    python3 scripts/dev.py test [--airflow 3.3|2.11.2] [--postgres-dsn DSN]   # ruff + mypy + the whole pytest suite
        [--sequential]      # with a DSN: the PostgreSQL pass after the SQLite pass instead of alongside it
        [--unit-only]       # only the unit tier (tests/unit), no static checks: CI's extra Airflow minors
        [--lowest]          # unit tier, every direct dependency at its declared floor (Airflow too, not --airflow)
        [--then-unit-tier-on 3.0 3.1 lowest ...]   # in the SQLite pass's lane: the unit tier on these too (CI)
        [--distributed-pg-dsn DSN [--distributed-pg-restart CMD]]   # in that lane too: the distributed pass
        [-- PYTEST_ARGS]    # extra pytest arguments, for both passes

Each creates (or reuses) its own virtualenv ``.venv-<airflow>`` in the project, installs Airflow and this
package (editable, with the dev extras) into it, and runs the job with that interpreter. ``uv`` is used when
it is on PATH or can be pip-installed into the venv (installs Airflow in seconds); ``SMART_EXT_USE_PIP=1``
forces plain pip. Standard library only: this file runs before any dependency exists.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_AIRFLOW = "3.3"
SUPPORTED = re.compile(r"^(2\.11|3\.\d+)(\.\d+)?$")


def airflow_requirement(version: str) -> str:
    """``3.3`` -> ``apache-airflow==3.3.*`` (latest patch); ``2.11.2`` -> ``apache-airflow==2.11.2``."""
    if not SUPPORTED.match(version):
        raise SystemExit(
            f"--airflow {version!r} is not supported: give 3.x or 3.x.y (default {DEFAULT_AIRFLOW}) or 2.11 / 2.11.y"
        )
    return f"apache-airflow=={version}" if version.count(".") == 2 else f"apache-airflow=={version}.*"


# Caps a release's own metadata lacks: the newest versions break its api-server, so every real-Airflow test
# (and bench) failed there. 3.0: PyJWT 2.15 rejects the list ``iss`` 3.0 puts in its tokens (2.10.1 takes it;
# 3.1 fixed it); 3.2: fastapi 0.165 rejects its callable ``Field(discriminator=...)`` (0.136 takes it; 3.3
# caps fastapi < 0.137).
SERVER_STACK_CAPS = {"3.0": ["pyjwt<2.11", "fastapi<0.118"], "3.2": ["fastapi<0.137"]}


def server_stack_caps(version: str) -> list[str]:
    return SERVER_STACK_CAPS.get(".".join(version.split(".")[:2]), [])


def say(message: str) -> None:
    print(f"[dev] {message}", flush=True)


def run(argv: list[str], **kwargs: object) -> None:
    say("$ " + " ".join(argv))
    subprocess.run(argv, check=True, **kwargs)  # type: ignore[call-overload]


def run_to_end(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Run a job step and return its exit code. Ctrl-C reaches the step too (same process group) and makes it
    tear its Airflow down; ``subprocess.run`` would SIGKILL it 0.25 s later and leave Airflow running."""
    proc = subprocess.Popen(argv, cwd=ROOT, env=env)
    return wait_to_end(proc)


def wait_to_end(proc: subprocess.Popen[bytes]) -> int:
    """``proc.wait()`` that keeps waiting through Ctrl-C, then re-raises it (see ``run_to_end``)."""
    interrupted = False
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt
    return code


LOWEST = "lowest"  # the venv whose direct dependencies are all at the floors pyproject.toml declares


def ensure_venv(version: str) -> Path:
    """Create/refresh ``.venv-<version>`` and return its python. Reinstalls only when inputs change.

    ``version == LOWEST``: uv's ``--resolution lowest-direct`` installs every direct dependency of the
    package (Airflow included) at its declared floor, so the floors are tested, not just written down
    (tests/unit/test_dependency_floors.py checks what it installed against pyproject.toml)."""
    lowest = version == LOWEST
    requirement = "" if lowest else " ".join([airflow_requirement(version), *server_stack_caps(version)])
    venv = ROOT / f".venv-{version}"
    python = venv / "bin" / "python"
    extras = ".[test,postgres]" if lowest else ".[dev,postgres]"  # the floors of the tooling don't matter
    stamp_text = "\n".join(
        [requirement, extras, sys.version, hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()]
    )
    stamp = venv / ".smart-ext-stamp"
    if python.exists() and stamp.exists() and stamp.read_text() == stamp_text:
        say(f"reusing {venv.name} ({requirement})")
        return python
    if lowest and venv.exists():  # uv keeps installed versions that satisfy: a stale venv would hide a floor
        shutil.rmtree(venv)
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
    started = time.monotonic()
    packages = ["-e", extras] if lowest else [*requirement.split(), "-e", extras]
    uv = None if os.environ.get("SMART_EXT_USE_PIP") == "1" else shutil.which("uv")
    if uv is None and os.environ.get("SMART_EXT_USE_PIP") != "1":
        # uv resolves Airflow's ~200 dependencies in seconds; pip takes about a minute. Either works.
        if subprocess.run([str(python), "-m", "pip", "install", "-q", "uv"], cwd=ROOT).returncode == 0:
            uv = str(venv / "bin" / "uv")
        else:
            say("could not install uv into the venv; using pip")
    if uv:
        resolution = ["--resolution", "lowest-direct"] if lowest else []
        run([uv, "pip", "install", "-q", "--python", str(python), *resolution, *packages], cwd=ROOT)
    elif lowest:
        raise SystemExit("--lowest needs uv (pip cannot resolve to the lowest versions)")
    else:
        run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], cwd=ROOT)
        run([str(python), "-m", "pip", "install", "-q", *packages], cwd=ROOT)
    stamp.write_text(stamp_text)
    say(f"{venv.name} ready in {time.monotonic() - started:.0f}s")
    return python


# The distributed pass (issue 36, docs/deployment.md): the topology users run (CeleryExecutor, two workers,
# schedulers and triggerers) on a PostgreSQL server of its own, which its database-restart test restarts.
# It runs the rolling upgrade (first: it starts an Airflow of its own, before the session's one is up),
# tests/integration/test_distributed_live.py and these rows of the differential matrix, one per way a wait
# ends (met after not-yet, soft timeout, transient errors ridden out, a permanent error retried, mapped).
DISTRIBUTED_TESTS = [
    "tests/integration/test_distributed_upgrade_live.py",
    "tests/integration/test_distributed_live.py",
    "tests/integration/test_differential_live.py",
]
DISTRIBUTED_DIFFERENTIAL_ROWS = "true_after_3,timeout_soft_fail,transient_3_then_true,permanent_error,mapped"


def run_distributed_pass(
    python: Path, dsn: str, restart_command: str, pytest_args: list[str], env: dict[str, str]
) -> tuple[str, int, float]:
    name = "pytest (the distributed pass: CeleryExecutor, 2 workers, 2 schedulers, 2 triggerers, PostgreSQL)"
    say(f"== {name}")
    started = time.monotonic()
    step_env = {
        **env,
        "SMART_EXT_TEST_PG_DSN": dsn,
        "SMART_EXT_TOPOLOGY": "celery",  # tests/integration/conftest.py
        "SMART_EXT_DF_SCENARIOS": DISTRIBUTED_DIFFERENTIAL_ROWS,
        "SMART_EXT_TEST_PG_RESTART": restart_command,
    }
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "--durations=10", *DISTRIBUTED_TESTS]
    code = run_to_end([*argv, "-m", "integration or postgres", *pytest_args], step_env)
    seconds = time.monotonic() - started
    say(f"summary: {name}: {pytest_result(code)} in {seconds:.0f}s")
    return name, code, seconds


def pytest_result(code: int) -> str:
    if code == 0:
        return "ok"
    if code == 5:  # a pass that selected nothing proves nothing: it fails, and says why
        return "FAILED (pytest exit 5: no tests ran)"
    return f"FAILED (exit {code})"


def cmd_test(args: argparse.Namespace) -> int:
    version = LOWEST if args.lowest else args.airflow
    env = dict(os.environ)
    env.pop("SMART_EXT_TEST_PG_DSN", None)  # the first pass is SQLite; Postgres gets its own pass below
    env.pop("SMART_EXT_LOWEST_LEG", None)
    env.pop("SMART_EXT_SQLITE_SLICE", None)
    if args.unit_only or args.lowest:  # the floors are proven on the unit tier (the venv has no tooling)
        return 0 if run_unit_tier(version, args.pytest_args, env)[1] == 0 else 1
    python = ensure_venv(version)
    bin_dir = python.parent
    # The slowest tests at the end of each pass's log: where CI's minutes go.
    pytest = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "--durations=25"]
    checks: list[tuple[str, list[str]]] = [
        ("ruff check", [str(bin_dir / "ruff"), "check", "."]),
        ("ruff format", [str(bin_dir / "ruff"), "format", "--check", "."]),
        ("mypy", [str(bin_dir / "mypy")]),
        # Dead code: anything unused in the package fails the run (framework hooks: the whitelist).
        (
            "dead code (vulture)",
            [
                str(bin_dir / "vulture"),
                "airflow_smart_ext",
                "scripts/vulture_whitelist.py",
                "--min-confidence",
                "60",
            ],
        ),
    ]
    dsn = args.postgres_dsn or os.environ.get("SMART_EXT_TEST_PG_DSN", "")
    sqlite_env = dict(env)
    sqlite_name = "pytest (unit + integration, SQLite)"
    pg_env = {**env, "SMART_EXT_TEST_PG_DSN": dsn}
    pg_argv = [*pytest, "-m", "integration or postgres", *args.pytest_args]
    # With PostgreSQL the integration tier runs there (the LocalExecutor on every version) and the SQLite pass
    # runs the unit tier and the slice about SQLite itself (tests/integration/conftest.py).
    if dsn:
        sqlite_env["SMART_EXT_SQLITE_SLICE"] = "1"
        sqlite_name = "pytest (unit + the integration tier's SQLite slice, SQLite)"
    passes: list[tuple[str, list[str], dict[str, str]]] = [
        (sqlite_name, [*pytest, *args.pytest_args], sqlite_env)
    ]
    if dsn:
        passes.append(("pytest (integration + postgres tests, PostgreSQL)", pg_argv, pg_env))
    else:
        say("no --postgres-dsn / SMART_EXT_TEST_PG_DSN: the PostgreSQL pass is skipped")
    timings: list[tuple[str, int, float]] = []
    for name, argv in checks:
        say(f"== {name}")
        started = time.monotonic()
        timings.append((name, run_to_end(argv, env), time.monotonic() - started))
    # CI's extra unit legs run in the SQLite pass's slot once that pass ends (the PostgreSQL pass, longer,
    # still runs alongside): two processes at a time, as in every leg, and no minutes added to the leg.
    # The benchmarks' fresh-process smokes (a real Airflow among them: half of a unit leg's time) run in
    # the main legs; the extra legs test the package on their Airflow.
    extra_leg_args = ["--deselect", "tests/unit/test_bench_smoke.py::test_process_scripts_run"]
    then: list[Callable[[], tuple[str, int, float]]] = [
        functools.partial(run_unit_tier, v, extra_leg_args, env) for v in args.then_unit_tier_on
    ]
    if args.distributed_pg_dsn:
        distributed = functools.partial(
            run_distributed_pass,
            python,
            args.distributed_pg_dsn,
            args.distributed_pg_restart,
            args.pytest_args,
            env,
        )
        then.insert(0, distributed)
    if args.sequential or len(passes) == 1:
        timings += [run_pass(name, argv, step_env) for name, argv, step_env in passes]
        timings += [leg() for leg in then]
    else:
        timings += run_side_by_side(passes, f"airflow-{args.airflow}", then)
    say(f"summary for Airflow {args.airflow}:")
    for name, code, seconds in timings:
        say(f"  {name}: {pytest_result(code)} in {seconds:.0f}s")
    return 1 if any(code != 0 for _name, code, _seconds in timings) else 0


def run_pass(name: str, argv: list[str], env: dict[str, str]) -> tuple[str, int, float]:
    say(f"== {name}")
    started = time.monotonic()
    code = run_to_end(argv, env)
    return name, code, time.monotonic() - started


def run_unit_tier(version: str, pytest_args: list[str], env: dict[str, str]) -> tuple[str, int, float]:
    """The unit tier alone in ``.venv-<version>``: CI runs it on the Airflow minors the real-Airflow tier
    skips, and at the floors. The static checks are not repeated here (the main leg runs them once)."""
    started = time.monotonic()
    python = ensure_venv(version)
    if version == LOWEST:
        env = {**env, "SMART_EXT_LOWEST_LEG": "1"}  # test_dependency_floors: installed == declared floors
    name = (
        f"pytest (unit tier, {'lowest declared dependencies' if version == LOWEST else f'Airflow {version}'})"
    )
    say(f"== {name}")
    code = run_to_end(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "tests/unit", *pytest_args], env
    )
    seconds = time.monotonic() - started
    say(f"summary: {name}: {pytest_result(code)} in {seconds:.0f}s")
    return name, code, seconds


def run_side_by_side(
    passes: list[tuple[str, list[str], dict[str, str]]],
    log_prefix: str,
    then: list[Callable[[], tuple[str, int, float]]],
) -> list[tuple[str, int, float]]:
    """Run the pytest passes at the same time: the first streams to the terminal (followed by the steps in
    ``then``), the others write a log file each, printed whole once the first pass and ``then`` have ended.
    Each pass has its own Airflow (own AIRFLOW_HOME, database and free ports), and a real Airflow mostly
    waits on timers, so two fit on two cores and the wall time is the longest pass instead of the sum
    (``--sequential`` runs them one after the other)."""
    log_dir = ROOT / ".test-logs"
    log_dir.mkdir(exist_ok=True)
    started = time.monotonic()
    ended: dict[str, float] = {}
    background: list[tuple[str, subprocess.Popen[bytes], Path, threading.Thread]] = []

    def note_end(name: str, proc: subprocess.Popen[bytes]) -> None:
        proc.wait()
        ended[name] = time.monotonic()

    for index, (name, argv, step_env) in enumerate(passes[1:], start=1):
        log_path = log_dir / f"{log_prefix}-pass-{index}.log"
        say(f"== {name}: runs alongside; output in {log_path.relative_to(ROOT)}, shown below when done")
        with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(argv, cwd=ROOT, env=step_env, stdout=log, stderr=subprocess.STDOUT)
        waiter = threading.Thread(target=note_end, args=(name, proc), daemon=True)
        waiter.start()
        background.append((name, proc, log_path, waiter))
    name, argv, step_env = passes[0]
    say(f"== {name}")
    try:
        code = run_to_end(argv, step_env)
    except KeyboardInterrupt:  # it reached every pass (one process group): let each tear its Airflow down
        for _name, proc, _log_path, _waiter in background:
            wait_to_end(proc)
        raise
    results = [(name, code, time.monotonic() - started)]
    results += [step() for step in then]
    for name, proc, log_path, waiter in background:
        waiter.join()
        results.append((name, proc.returncode, ended[name] - started))
        say(f"== {name}: output ({log_path.relative_to(ROOT)})")
        sys.stdout.write(log_path.read_text(errors="replace"))
        sys.stdout.flush()
    return results


def cmd_demo(args: argparse.Namespace) -> int:
    python = ensure_venv(args.airflow)
    argv = [str(python), str(ROOT / "scripts" / "demo.py")]
    if args.keep_ui:
        argv.append("--keep-ui")
    return run_to_end(argv)


def main() -> int:
    if sys.version_info < (3, 10):  # noqa: UP036 - this file runs under any python3 the user has
        raise SystemExit("Python >= 3.10 is required")
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("test", "demo"):
        p = sub.add_parser(name)
        p.add_argument(
            "--airflow", default=DEFAULT_AIRFLOW, help=f"Airflow version (default {DEFAULT_AIRFLOW})"
        )
    sub.choices["test"].add_argument(
        "--postgres-dsn", default="", help="also run the integration tier on this PostgreSQL server"
    )
    sub.choices["test"].add_argument(
        "--sequential",
        action="store_true",
        help="run the PostgreSQL pass after the SQLite pass instead of alongside it",
    )
    sub.choices["test"].add_argument(
        "--unit-only", action="store_true", help="only the unit tier (tests/unit), without the static checks"
    )
    sub.choices["test"].add_argument(
        "--lowest",
        action="store_true",
        help="in .venv-lowest: every direct dependency at its declared floor (Airflow too; needs uv)",
    )
    sub.choices["test"].add_argument(
        "--then-unit-tier-on",
        nargs="+",
        default=[],
        metavar="VERSION",
        help="after the SQLite pass, the unit tier on these Airflow versions too ('lowest': the floors)",
    )
    sub.choices["test"].add_argument(
        "--distributed-pg-dsn",
        default="",
        help="after the SQLite pass, the distributed pass (Airflow 3: the CeleryExecutor topology, Redis from "
        "redis-server on PATH) on this PostgreSQL server, which no other pass may use: it is restarted",
    )
    sub.choices["test"].add_argument(
        "--distributed-pg-restart",
        default="",
        help="a shell command restarting that server (the distributed pass's database-restart test needs it)",
    )
    sub.choices["test"].add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    sub.choices["demo"].add_argument(
        "--keep-ui", action="store_true", help="keep Airflow and its UI up at localhost:8080"
    )
    args = parser.parse_args()
    try:
        return cmd_test(args) if args.command == "test" else cmd_demo(args)
    except KeyboardInterrupt:
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
