#!/usr/bin/env python3
"""The project's two commands, for a fresh machine that has only Python >= 3.10.

    python3 scripts/dev.py demo [--airflow 3.3|2.11.2] [--keep-ui]   # the main job: example DAGs in a real Airflow
    python3 scripts/dev.py test [--airflow 3.3|2.11.2] [--postgres-dsn DSN]   # ruff + mypy + the whole pytest suite

Each creates (or reuses) its own virtualenv ``.venv-<airflow>`` in the project, installs Airflow and this
package (editable, with the dev extras) into it, and runs the job with that interpreter. ``uv`` is used when
it is on PATH or can be pip-installed into the venv (installs Airflow in seconds); ``SMART_EXT_USE_PIP=1``
forces plain pip. Standard library only: this file runs before any dependency exists.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
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


def say(message: str) -> None:
    print(f"[dev] {message}", flush=True)


def run(argv: list[str], **kwargs: object) -> None:
    say("$ " + " ".join(argv))
    subprocess.run(argv, check=True, **kwargs)  # type: ignore[call-overload]


def ensure_venv(version: str) -> Path:
    """Create/refresh ``.venv-<version>`` and return its python. Reinstalls only when inputs change."""
    requirement = airflow_requirement(version)
    venv = ROOT / f".venv-{version}"
    python = venv / "bin" / "python"
    extras = ".[dev,postgres]"
    stamp_text = "\n".join(
        [requirement, extras, sys.version, hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()]
    )
    stamp = venv / ".smart-ext-stamp"
    if python.exists() and stamp.exists() and stamp.read_text() == stamp_text:
        say(f"reusing {venv.name} ({requirement})")
        return python
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
    started = time.monotonic()
    packages = [requirement, "-e", extras]
    uv = None if os.environ.get("SMART_EXT_USE_PIP") == "1" else shutil.which("uv")
    if uv is None and os.environ.get("SMART_EXT_USE_PIP") != "1":
        # uv resolves Airflow's ~200 dependencies in seconds; pip takes about a minute. Either works.
        if subprocess.run([str(python), "-m", "pip", "install", "-q", "uv"], cwd=ROOT).returncode == 0:
            uv = str(venv / "bin" / "uv")
        else:
            say("could not install uv into the venv; using pip")
    if uv:
        run([uv, "pip", "install", "-q", "--python", str(python), *packages], cwd=ROOT)
    else:
        run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], cwd=ROOT)
        run([str(python), "-m", "pip", "install", "-q", *packages], cwd=ROOT)
    stamp.write_text(stamp_text)
    say(f"{venv.name} ready in {time.monotonic() - started:.0f}s")
    return python


def cmd_test(args: argparse.Namespace) -> int:
    python = ensure_venv(args.airflow)
    bin_dir = python.parent
    env = dict(os.environ)
    env.pop("SMART_EXT_TEST_PG_DSN", None)  # the first pass is SQLite; Postgres gets its own pass below
    steps: list[tuple[str, list[str], dict[str, str]]] = [
        ("ruff check", [str(bin_dir / "ruff"), "check", "."], env),
        ("ruff format", [str(bin_dir / "ruff"), "format", "--check", "."], env),
        ("mypy", [str(bin_dir / "mypy")], env),
        (
            "pytest (unit + integration, SQLite)",
            [str(python), "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args],
            env,
        ),
    ]
    dsn = args.postgres_dsn or os.environ.get("SMART_EXT_TEST_PG_DSN", "")
    if dsn:
        pg_env = {**env, "SMART_EXT_TEST_PG_DSN": dsn}
        steps.append(
            (
                "pytest (integration + postgres tests, PostgreSQL)",
                [
                    str(python),
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "-m",
                    "integration or postgres",
                    *args.pytest_args,
                ],
                pg_env,
            )
        )
    else:
        say("no --postgres-dsn / SMART_EXT_TEST_PG_DSN: the PostgreSQL pass is skipped")
    failed: list[str] = []
    timings: list[str] = []
    for name, argv, step_env in steps:
        say(f"== {name}")
        started = time.monotonic()
        code = subprocess.run(argv, cwd=ROOT, env=step_env).returncode
        timings.append(
            f"{name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {time.monotonic() - started:.0f}s"
        )
        if code != 0:
            failed.append(name)
    say(f"summary for Airflow {args.airflow}:")
    for line in timings:
        say("  " + line)
    return 1 if failed else 0


def cmd_demo(args: argparse.Namespace) -> int:
    python = ensure_venv(args.airflow)
    argv = [str(python), str(ROOT / "scripts" / "demo.py")]
    if args.keep_ui:
        argv.append("--keep-ui")
    return subprocess.run(argv, cwd=ROOT).returncode


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
    sub.choices["test"].add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    sub.choices["demo"].add_argument(
        "--keep-ui", action="store_true", help="keep Airflow and its UI up at localhost:8080"
    )
    args = parser.parse_args()
    return cmd_test(args) if args.command == "test" else cmd_demo(args)


if __name__ == "__main__":
    sys.exit(main())
