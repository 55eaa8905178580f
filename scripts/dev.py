#!/usr/bin/env python3
"""The project's two commands, for a fresh Debian machine that has only Python >= 3.10.

    python3 scripts/dev.py demo [--airflow 3.3|2.11.2] [--keep-ui]   # the main job: example DAGs in a real Airflow
    python3 scripts/dev.py test [--airflow 3.3|2.11.2]   # ruff + mypy + vulture + the whole pytest suite
        [--sqlite-only]     # no PostgreSQL: the proofs that need it are left out (the closing line counts them)
        [--postgres-dsn DSN]  # the PostgreSQL pass on this server instead of a private cluster
        [--sequential]      # every step one after the other (the PostgreSQL pass last) instead of in 2 lanes
        [--unit-only]       # only the unit tier (tests/unit), no static checks
        [--lowest]          # unit tier, every direct dependency at its declared floor (Airflow too, not --airflow)
        [--then-on 3.0 3.1 3.2 lowest ...]   # a step of the lanes: the unit tier and the live smoke on
                            # these minors, with the package installed from its built wheel (CI)
        [--then-smoke-on 3.0 3.1]   # a step too: the live smoke alone, from the built wheel (CI)
        [--then-demo-on 3.3 2.11.2]   # a step too: the demo, whose every example DAG must succeed (CI)
        [--then-demo-on-postgres 2.11.2]   # the same, on the PostgreSQL pass's server (tasks in parallel; CI)
        [-- PYTEST_ARGS]    # extra pytest arguments, for every pass

Each creates (or reuses) its own virtualenv ``.venv-<airflow>`` in the project, installs Airflow and this
package (editable, with the dev extras) into it, and runs the job with that interpreter. ``uv`` is used when
it is on PATH or can be pip-installed into the venv (installs Airflow in seconds); ``SMART_EXT_USE_PIP=1``
forces plain pip. Standard library only: this file runs before any dependency exists.

The test command installs the Debian packages its proofs need when they are missing (PostgreSQL's server,
Redis, Chromium and its driver; as root, with apt-get — otherwise it stops at once and prints the command),
starts private PostgreSQL clusters (the PostgreSQL pass; on Airflow 3 the distributed pass), and ends with
``scripts/proofs.py``'s verdict over the JUnit reports of its passes: a skip for a reason not on
``tests/allowed_skips.txt``, or a test file that ran in no pass, fails the command.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import typing
from collections.abc import Callable
from pathlib import Path

import proofs  # scripts/proofs.py, beside this file

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


Step = Callable[[], tuple[str, int, float]]  # a job step: its name, exit code and seconds
# Steps at a time (run_in_lanes). Two: the machine is CPU-bound with two (both cores busy through most of CI's
# rehearsal); three made it slower (load 12, the SQLite pass 850 s instead of 520 s) and tests timed out.
LANES = 2
_lane = threading.local()  # .log: the log file of a background lane (run_in_lanes), where its steps write


def lane_log() -> typing.IO[str] | None:
    return getattr(_lane, "log", None)


def in_lane_output(log: typing.IO[str], target: Callable[[int], None], index: int) -> None:
    _lane.log = log
    target(index)


def say(message: str) -> None:
    print(f"[dev] {message}", file=lane_log() or sys.stdout, flush=True)


def run(argv: list[str], **kwargs: object) -> None:
    say("$ " + " ".join(argv))
    log = lane_log()
    streams = {"stdout": log, "stderr": subprocess.STDOUT} if log else {}
    subprocess.run(argv, check=True, **streams, **kwargs)  # type: ignore[call-overload]


def run_to_end(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Run a job step and return its exit code. Ctrl-C reaches the step too (same process group) and makes it
    tear its Airflow down; ``subprocess.run`` would SIGKILL it 0.25 s later and leave Airflow running."""
    log = lane_log()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT if log else None)
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


def ensure_venv(version: str, wheel: Path | None = None) -> Path:
    """Create/refresh ``.venv-<version>`` and return its python. Reinstalls only when inputs change.

    ``version == LOWEST``: uv's ``--resolution lowest-direct`` installs every direct dependency of the
    package (Airflow included) at its declared floor, so the floors are tested, not just written down
    (tests/unit/test_dependency_floors.py checks what it installed against pyproject.toml).
    ``wheel``: the package from that built wheel instead of the checkout (what users install)."""
    lowest = version == LOWEST
    requirement = "" if lowest else " ".join([airflow_requirement(version), *server_stack_caps(version)])
    venv = ROOT / f".venv-{version}"
    python = venv / "bin" / "python"
    extras = "[test,postgres]" if lowest else "[dev,postgres]"  # the floors of the tooling don't matter
    package = [f"{wheel}{extras}"] if wheel else ["-e", f".{extras}"]
    stamp_text = "\n".join(
        [
            requirement,
            " ".join(package),
            hashlib.sha256(wheel.read_bytes()).hexdigest() if wheel else "",
            sys.version,
            hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest(),
        ]
    )
    stamp = venv / ".smart-ext-stamp"
    if python.exists() and stamp.exists() and stamp.read_text() == stamp_text:
        say(f"reusing {venv.name} ({requirement or 'lowest'}, {' '.join(package)})")
        return python
    if lowest and venv.exists():  # uv keeps installed versions that satisfy: a stale venv would hide a floor
        shutil.rmtree(venv)
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
    started = time.monotonic()
    packages = package if lowest else [*requirement.split(), *package]
    uv = venv_uv(python)
    if uv:
        resolution = ["--resolution", "lowest-direct"] if lowest else []
        reinstall = ["--reinstall-package", "airflow-smart-ext"] if wheel else []
        run(
            [uv, "pip", "install", "-q", "--python", str(python), *resolution, *reinstall, *packages],
            cwd=ROOT,
        )
    elif lowest:
        raise SystemExit("--lowest needs uv (pip cannot resolve to the lowest versions)")
    else:
        run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], cwd=ROOT)
        run([str(python), "-m", "pip", "install", "-q", *packages], cwd=ROOT)
    if wheel:
        check_installed_from_wheel(python, wheel)
    stamp.write_text(stamp_text)
    say(f"{venv.name} ready in {time.monotonic() - started:.0f}s")
    return python


def venv_uv(python: Path) -> str | None:
    """uv for this venv (on PATH, or pip-installed into it), or None: plain pip then."""
    if os.environ.get("SMART_EXT_USE_PIP") == "1":
        return None
    uv = shutil.which("uv")
    if uv is None:
        # uv resolves Airflow's ~200 dependencies in seconds; pip takes about a minute. Either works.
        if subprocess.run([str(python), "-m", "pip", "install", "-q", "uv"], cwd=ROOT).returncode == 0:
            return str(python.parent / "uv")
        say("could not install uv into the venv; using pip")
    return uv


DIST_DIR = ROOT / ".dist"


def build_distributions(python: Path) -> Path:
    """The sdist, and the wheel built from it (so the sdist is complete), checked by twine; the wheel."""
    shutil.rmtree(DIST_DIR, ignore_errors=True)
    uv = venv_uv(python)
    if uv:
        run([uv, "build", "-q", "--out-dir", str(DIST_DIR), str(ROOT)], cwd=ROOT)
    else:
        run([str(python), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(DIST_DIR), str(ROOT)], cwd=ROOT)
    wheels, sdists = sorted(DIST_DIR.glob("*.whl")), sorted(DIST_DIR.glob("*.tar.gz"))
    run([str(python.parent / "twine"), "check", "--strict", *map(str, wheels + sdists)], cwd=ROOT)
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"expected one wheel and one sdist in {DIST_DIR}: {sorted(DIST_DIR.iterdir())}")
    return wheels[0]


def check_installed_from_wheel(python: Path, wheel: Path) -> None:
    """The venv's package is the wheel's, not the checkout: Airflow's processes (started outside the
    checkout) import it from site-packages."""
    probe = (
        "import airflow_smart_ext, importlib.metadata as m, json; "
        "d = m.distribution('airflow-smart-ext'); "
        "print(json.dumps([airflow_smart_ext.__file__, d.version, d.read_text('direct_url.json') or '']))"
    )
    out = subprocess.run(
        [str(python), "-I", "-c", probe], cwd=str(python.parent), capture_output=True, text=True, check=True
    ).stdout
    import json

    module, version, direct_url = json.loads(out)
    if "site-packages" not in module or '"editable": true' in direct_url or wheel.name not in direct_url:
        raise SystemExit(f"{python}: airflow_smart_ext is not the installed wheel {wheel.name}: {out}")
    say(f"installed from {wheel.name}: airflow-smart-ext {version} at {Path(module).parent}")


# Debian packages the test command's proofs need, and the files that show them installed: the PostgreSQL
# pass's server, the distributed pass's broker (and the harness's own Redis test), the UI tests' browser.
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def postgres_bin() -> Path | None:
    """The newest local PostgreSQL server's binaries (Debian: /usr/lib/postgresql/<major>/bin), or PG_BIN."""
    if os.environ.get("PG_BIN"):
        candidates = [Path(os.environ["PG_BIN"])]
    else:
        candidates = sorted(
            Path("/usr/lib/postgresql").glob("*/bin"),
            key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
            reverse=True,
        )
    return next((c for c in candidates if (c / "initdb").exists() and (c / "pg_ctl").exists()), None)


def missing_system_packages(postgres: bool) -> list[str]:
    missing = ["postgresql"] if postgres and postgres_bin() is None else []
    missing += [] if shutil.which("redis-server") else ["redis-server"]
    missing += [] if CHROMIUM.exists() else ["chromium"]
    missing += [] if CHROMEDRIVER.exists() else ["chromium-driver"]
    return missing


def ensure_system_packages(postgres: bool) -> None:
    """Install the missing ones with apt-get as root; otherwise stop at once with the command to run."""
    missing = missing_system_packages(postgres)
    if not missing:
        return
    command = f"apt-get update && apt-get install -y {' '.join(missing)}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SystemExit(
            f"[dev] the tests need Debian packages that are not installed: {', '.join(missing)}. Run, as root:\n"
            f"    sudo sh -c '{command}'\n"
            "then this command again."
            + ("" if not postgres else " (--sqlite-only runs without PostgreSQL, leaving its proofs out.)")
        )
    log = ROOT / ".test-logs" / "apt.log"
    log.parent.mkdir(exist_ok=True)
    say(f"installing {', '.join(missing)} with apt-get (log: {log.relative_to(ROOT)})")
    apt_env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log.open("ab") as out:
        for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *missing]):
            if subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=apt_env).returncode != 0:
                raise SystemExit(f"[dev] {' '.join(argv)} failed: see {log}")
    # Debian starts the packages' own services (Redis on 6379, a PostgreSQL cluster on 5432): the tests run
    # private ones on free ports, so these are stopped again.
    for service in ("redis-server", "postgresql"):
        if service in missing:
            subprocess.run(["service", service, "stop"], capture_output=True)
    still = missing_system_packages(postgres)
    if still:
        raise SystemExit(f"[dev] apt-get ran, but {', '.join(still)} are still missing: see {log}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """A throwaway PostgreSQL cluster on a free loopback port, removed at exit (as CI's used to be): initdb
    refuses root, so as root it runs as ``nobody``."""

    def __init__(self, pg_bin: Path, name: str) -> None:
        self.pg_bin = pg_bin
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"smart-ext-pg-{name}-"))
        self.data = self.dir / "data"
        self.as_user = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> list[str]:
        return [*self.as_user, str(self.pg_bin / "pg_ctl"), "-D", str(self.data), *args]

    @property
    def restart_command(self) -> str:
        """A shell command restarting it (the distributed pass's database-restart test); pg_ctl restart keeps
        the options the server was started with."""
        log = self.dir / "server.log"
        return " ".join([*self.pg_ctl("-l", str(log), "restart", "-m", "fast", "-w")])

    def start(self) -> PrivateCluster:
        (self.dir / "sock").mkdir()
        if self.as_user:
            shutil.chown(self.dir, "nobody")
            for path in self.dir.iterdir():
                shutil.chown(path, "nobody")
        initdb = [*self.as_user, str(self.pg_bin / "initdb"), "-D", str(self.data), "-U", "postgres"]
        options = f"-p {self.port} -k {self.dir / 'sock'} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off"
        for argv in (
            [*initdb, "--auth=trust", "-E", "UTF8"],
            self.pg_ctl("-l", str(self.dir / "server.log"), "-w", "-o", options, "start"),
        ):
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode != 0:
                log = (self.dir / "server.log").read_text() if (self.dir / "server.log").exists() else ""
                raise SystemExit(
                    f"[dev] could not start PostgreSQL ({' '.join(argv)}):\n{proc.stdout}{proc.stderr}{log}"
                )
        atexit.register(self.stop)
        say(f"private PostgreSQL cluster up at 127.0.0.1:{self.port} ({self.dir})")
        return self

    def stop(self) -> None:
        subprocess.run(self.pg_ctl("-m", "immediate", "stop"), capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


# The distributed pass (issue 36, docs/deployment.md): the topology users run (CeleryExecutor, two workers,
# schedulers and triggerers) on a PostgreSQL server of its own, which its database-restart test restarts.
# It runs the rolling upgrade (first: it starts an Airflow of its own, before the session's one is up),
# tests/integration/test_distributed_live.py and these rows of the differential matrix, one per way a wait
# ends (met after not-yet, soft timeout, transient errors ridden out, a permanent error retried, mapped).
DISTRIBUTED_TESTS = [
    "tests/integration/test_distributed_upgrade_live.py",
    "tests/integration/test_distributed_live.py",
]
REPORTS_DIR = ROOT / ".test-logs" / "reports"
# The live smoke of the minors the real-Airflow tier does not run (3.0-3.2): a wait, a watcher, the view.
MINOR_SMOKE = "tests/integration/test_minor_smoke_live.py"
BENCH_PROCESS_SMOKES = "tests/unit/test_bench_smoke.py::test_process_scripts_run"
TOOLING_IN_ANOTHER_LEG_ENV = "SMART_EXT_TOOLING_IN_ANOTHER_LEG"


class Leg:
    """One invocation's pytest passes: each writes a JUnit report, read at the end by scripts/proofs.py."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.reports: list[Path] = []
        REPORTS_DIR.mkdir(parents=True, exist_ok=True)
        for stale in REPORTS_DIR.glob(f"{label}-*.xml"):
            stale.unlink()

    def pytest(self, python: Path, step: str) -> list[str]:
        """pytest's argv for one pass, its report named after the pass."""
        report = REPORTS_DIR / f"{self.label}-{step}.xml"
        self.reports.append(report)
        return [str(python), "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}"]


def run_distributed_pass(
    leg: Leg, python: Path, cluster: PrivateCluster, pytest_args: list[str], env: dict[str, str]
) -> tuple[str, int, float]:
    name = "pytest (the distributed pass: CeleryExecutor, 2 workers, 2 schedulers, 2 triggerers, PostgreSQL)"
    say(f"== {name}")
    started = time.monotonic()
    step_env = {
        **env,
        "SMART_EXT_TEST_PG_DSN": cluster.dsn,
        "SMART_EXT_TOPOLOGY": "celery",  # tests/integration/conftest.py
        "SMART_EXT_TEST_PG_RESTART": cluster.restart_command,
    }
    argv = [*leg.pytest(python, "distributed"), "--durations=25", *DISTRIBUTED_TESTS]
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
    env.pop("SMART_EXT_TEST_PG_DSN", None)  # the first pass is SQLite; PostgreSQL gets its own pass below
    env.pop("SMART_EXT_LOWEST_LEG", None)
    env.pop("SMART_EXT_SQLITE_SLICE", None)
    env.pop(TOOLING_IN_ANOTHER_LEG_ENV, None)
    if args.tooling_in_another_leg:
        env[TOOLING_IN_ANOTHER_LEG_ENV] = "1"  # tests/conftest.py TOOLING_FILES: skipped, allow-listed
    leg = Leg(f"airflow-{version}")
    if args.unit_only or args.lowest:  # the floors are proven on the unit tier (the venv has no tooling)
        unit_tier = run_then_leg(leg, version, None, args.pytest_args, env)
        return finish(leg, [unit_tier], version, every_file=False, strict=True)
    dsn = args.postgres_dsn or os.environ.get("SMART_EXT_TEST_PG_DSN", "")
    airflow3 = not args.airflow.startswith("2.")
    ensure_system_packages(postgres=not args.sqlite_only and not (dsn and not airflow3))
    python = ensure_venv(version)
    clusters: list[PrivateCluster] = []
    if not args.sqlite_only:
        pg_bin = postgres_bin()
        assert pg_bin is not None  # ensure_system_packages
        if not dsn:
            clusters.append(PrivateCluster(pg_bin, "pass").start())
            dsn = clusters[-1].dsn
        if airflow3:  # the distributed pass restarts its server: one of its own
            clusters.append(PrivateCluster(pg_bin, "distributed").start())
    bin_dir = python.parent
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
    sqlite_env = dict(env)
    sqlite_name = "pytest (unit + integration, SQLite)"
    # With PostgreSQL the integration tier runs there (the LocalExecutor on every version) and the SQLite pass
    # runs the unit tier and the slice about SQLite itself (tests/integration/conftest.py).
    if dsn:
        sqlite_env["SMART_EXT_SQLITE_SLICE"] = "1"
        sqlite_name = "pytest (unit + the integration tier's SQLite slice, SQLite)"
    # The benchmarks' fresh-process smokes (a real Airflow among them) run in Airflow 3 legs: the benches
    # measure Airflow 3 (docs/benchmarks.md).
    bench_smokes = [] if airflow3 else ["--deselect", BENCH_PROCESS_SMOKES]
    # The slowest tests at the end of each pass's log: where CI's minutes go.
    sqlite_argv = [*leg.pytest(python, "sqlite"), "--durations=25", *bench_smokes, *args.pytest_args]
    steps: list[Step] = [functools.partial(run_pass, sqlite_name, sqlite_argv, sqlite_env)]
    pg_shard: Callable[[int], tuple[str, int, float]] | None = None
    if dsn:
        claims = ROOT / ".test-logs" / f"claims-{leg.label}"  # tests/conftest.py: which shard runs a file
        shutil.rmtree(claims, ignore_errors=True)
        pg_env = {**env, "SMART_EXT_TEST_PG_DSN": dsn, "SMART_EXT_SHARD_CLAIMS": str(claims)}

        def pg_shard(index: int) -> tuple[str, int, float]:
            argv = [
                *leg.pytest(python, f"postgres-{index}"),
                "--durations=25",
                "-m",
                "integration or postgres",
            ]
            name = f"pytest (integration + postgres tests, PostgreSQL, shard {index})"
            return run_pass(name, [*argv, *args.pytest_args], {**pg_env, "SMART_EXT_SHARD_INDEX": str(index)})

    else:
        say("--sqlite-only: no PostgreSQL pass and no distributed pass; their proofs are left out")
    timings: list[tuple[str, int, float]] = []
    # The static checks come first in the first lane; the second lane's PostgreSQL pass starts meanwhile.
    steps[:0] = [functools.partial(run_pass, name, argv, env) for name, argv in checks]
    # CI's extra steps, in the order the first lane takes them after the SQLite pass.
    if airflow3 and clusters:  # the last one is the distributed pass's
        steps.append(
            functools.partial(run_distributed_pass, leg, python, clusters[-1], args.pytest_args, env)
        )
    if airflow3:  # 2.11's sdist ships no tests (docs/sensors.md "Swapping the base class")
        steps.append(functools.partial(run_airflow_suite_step, leg, python))
    wheel = build_distributions(python) if args.then_smoke_on or set(args.then_on) - {LOWEST} else None
    steps += [functools.partial(run_then_leg, leg, v, wheel, [], env, False) for v in args.then_smoke_on]
    steps += [functools.partial(run_demo_step, v) for v in args.then_demo_on]
    if args.then_demo_on_postgres and not dsn:
        say("--then-demo-on-postgres: no PostgreSQL (--sqlite-only); the demo runs on SQLite")
    steps += [functools.partial(run_demo_step, v, dsn) for v in args.then_demo_on_postgres]
    steps += [functools.partial(run_then_leg, leg, v, wheel, [], env) for v in args.then_on]
    if args.sequential:
        timings += [guarded(step) for step in steps]
        if pg_shard:
            timings.append(guarded(functools.partial(pg_shard, 0)))
    else:
        timings += run_in_lanes(steps, pg_shard, f"airflow-{args.airflow}")
    return finish(leg, timings, args.airflow, every_file=not args.pytest_args, strict=not args.sqlite_only)


def finish(
    leg: Leg, timings: list[tuple[str, int, float]], version: str, every_file: bool, strict: bool
) -> int:
    """The leg's summary, then its proofs' verdict (scripts/proofs.py) as the closing line."""
    say(f"summary for Airflow {version}:")
    for name, code, seconds in timings:
        say(f"  {name}: {pytest_result(code)} in {seconds:.0f}s")
    missing = [report for report in leg.reports if not report.is_file()]
    verdict = proofs.judge(
        proofs.read_reports(report for report in leg.reports if report.is_file()),
        proofs.load_allowed_skips(),
        every_file=every_file,
        or_allowed_skips=True,
    )
    for report in missing:
        say(f"not run: a pass wrote no report ({report.relative_to(ROOT)})")
    for line in verdict.report():  # its last line closes the command's output
        say(line)
    left_out = verdict.left_out + len(missing)
    failed = any(code != 0 for _name, code, _seconds in timings)
    if left_out and not strict:
        say(f"--sqlite-only: {left_out} proofs left out (above); a full run needs PostgreSQL")
    return 1 if failed or (left_out and strict) else 0


def run_pass(name: str, argv: list[str], env: dict[str, str]) -> tuple[str, int, float]:
    say(f"== {name}")
    started = time.monotonic()
    code = run_to_end(argv, env)
    return name, code, time.monotonic() - started


def run_then_leg(
    leg: Leg,
    version: str,
    wheel: Path | None,
    pytest_args: list[str],
    env: dict[str, str],
    unit_tier: bool = True,
) -> tuple[str, int, float]:
    """The unit tier in ``.venv-<version>``: CI runs it on an Airflow minor the real-Airflow tier skips, and
    at the floors. On a minor, the package comes from the built wheel (what users install) and the leg adds
    the live smoke (one real Airflow on SQLite); ``unit_tier=False``: the live smoke alone. The static checks
    are not repeated here."""
    started = time.monotonic()
    python = ensure_venv(version, None if version == LOWEST else wheel)
    if version == LOWEST:
        env = {**env, "SMART_EXT_LOWEST_LEG": "1"}  # test_dependency_floors: installed == declared floors
    parts = (["unit tier"] if unit_tier else []) + (["live smoke, from the wheel"] if wheel else [])
    name = (
        "pytest (unit tier, lowest declared dependencies)"
        if version == LOWEST
        else f"pytest ({' + '.join(parts)}, Airflow {version})"
    )
    say(f"== {name}")
    tests = (["tests/unit"] if unit_tier else []) + ([MINOR_SMOKE] if wheel else [])
    # The benchmarks' fresh-process smokes (a real Airflow among them) run in the main legs only; a
    # PostgreSQL variant has no server here (the main legs run it).
    deselect = ["--deselect", BENCH_PROCESS_SMOKES, "-m", "not postgres"]
    label = "lowest" if version == LOWEST else version
    code = run_to_end([*leg.pytest(python, f"then-{label}"), *tests, *deselect, *pytest_args], env)
    seconds = time.monotonic() - started
    say(f"summary: {name}: {pytest_result(code)} in {seconds:.0f}s")
    return name, code, seconds


def run_airflow_suite_step(leg: Leg, python: Path) -> tuple[str, int, float]:
    """Airflow's own sensor tests (its released sdists) with the base swapped for BackoffSensor: a failure
    not on tests/airflow_suite_allowed.txt fails the step (issue 42)."""
    name = "Airflow's own sensor tests, base swapped for BackoffSensor"
    say(f"== {name}")
    started = time.monotonic()
    report = REPORTS_DIR / f"{leg.label}-airflow-suite.xml"
    leg.reports.append(report)
    script = ROOT / "scripts" / "airflow_sensor_suite.py"
    code = run_to_end([sys.executable, str(script), "--python", str(python), "--junitxml", str(report)])
    seconds = time.monotonic() - started
    say(f"summary: {name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {seconds:.0f}s")
    return name, code, seconds


def run_demo_step(version: str, pg_dsn: str = "") -> tuple[str, int, float]:
    """The demo (the README's first command) in ``.venv-<version>``; with ``pg_dsn``, on a database of that
    server (the LocalExecutor runs tasks in parallel; Airflow 2.11 on SQLite runs one at a time, ~13 min)."""
    name = f"demo (every example DAG in a real Airflow {version}{', PostgreSQL' if pg_dsn else ''})"
    say(f"== {name}")
    started = time.monotonic()
    python = ensure_venv(version)
    demo_env = {**os.environ, "SMART_EXT_TEST_PG_DSN": pg_dsn} if pg_dsn else None
    code = run_to_end([str(python), str(ROOT / "scripts" / "demo.py")], demo_env)
    seconds = time.monotonic() - started
    say(f"summary: {name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {seconds:.0f}s")
    return name, code, seconds


def guarded(step: Step) -> tuple[str, int, float]:
    """A step whose own code raised (e.g. a failed install) is a failed step, never a lost one."""
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - reported as the step's failure, with its traceback
        traceback.print_exc(file=lane_log() or sys.stderr)
        name = getattr(step, "func", step).__name__
        return f"{name}: raised {exc!r}", 1, 0.0


def run_in_lanes(
    steps: list[Step], pg_shard: Callable[[int], tuple[str, int, float]] | None, log_prefix: str
) -> list[tuple[str, int, float]]:
    """The leg's steps in LANES lanes at a time. The first lane streams to the terminal; each other lane writes
    a log file, printed whole at the end. A lane takes the next step that is left, and once none is left runs
    a shard of the PostgreSQL pass (``pg_shard``; lane 1 starts there), which takes the test files no shard
    has claimed yet (tests/conftest.py): the lanes end together, whatever each step costs. Each pytest run
    has its own Airflows (own AIRFLOW_HOME, database and free ports)."""
    log_dir = ROOT / ".test-logs"
    log_dir.mkdir(exist_ok=True)
    first, *left = steps  # the terminal's lane starts with the first step
    lock = threading.Lock()
    results: list[tuple[str, int, float]] = []

    def take() -> Step | None:
        with lock:
            return left.pop(0) if left else None

    def lane(index: int, start_with: Step | None = None) -> None:
        if start_with is not None:
            results.append(guarded(start_with))
        if not (pg_shard and index == 1):
            while (step := take()) is not None:
                results.append(guarded(step))
        if pg_shard:
            results.append(guarded(functools.partial(pg_shard, index)))

    background: list[tuple[threading.Thread, Path, typing.IO[str]]] = []
    for index in range(1, LANES if pg_shard else 1):  # without PostgreSQL: one lane, the steps in order
        log_path = log_dir / f"{log_prefix}-lane-{index}.log"
        log = log_path.open("w", buffering=1)
        say(f"lane {index}: runs alongside; output in {log_path.relative_to(ROOT)}, shown below when done")
        thread = threading.Thread(target=in_lane_output, args=(log, lane, index), daemon=True)
        thread.start()
        background.append((thread, log_path, log))
    try:
        lane(0, first)
    finally:  # Ctrl-C reached every step (one process group): each tears its Airflow down
        for index, (thread, log_path, lane_file) in enumerate(background, start=1):
            thread.join()
            lane_file.close()
            say(f"== lane {index}: output ({log_path.relative_to(ROOT)})")
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
        "--postgres-dsn",
        default="",
        help="the PostgreSQL pass on this server (default: a private cluster the command starts)",
    )
    sub.choices["test"].add_argument(
        "--sqlite-only",
        action="store_true",
        help="no PostgreSQL: the PostgreSQL and distributed passes are left out (the closing line counts them)",
    )
    sub.choices["test"].add_argument(
        "--sequential",
        action="store_true",
        help="run every step one after the other (the PostgreSQL pass last) instead of in two lanes",
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
        "--then-on",
        nargs="+",
        default=[],
        metavar="VERSION",
        help="a step of the lanes: the unit tier and the live smoke on these Airflow minors, the package "
        "installed from its built wheel ('lowest': the unit tier at the declared floors)",
    )
    sub.choices["test"].add_argument(
        "--then-smoke-on",
        nargs="+",
        default=[],
        metavar="VERSION",
        help="a step of the lanes: the live smoke alone on these Airflow minors, from the built wheel",
    )
    sub.choices["test"].add_argument(
        "--then-demo-on",
        nargs="+",
        default=[],
        metavar="VERSION",
        help="a step of the lanes: the demo (scripts/demo.py) on these Airflow versions too",
    )
    sub.choices["test"].add_argument(
        "--then-demo-on-postgres",
        nargs="+",
        default=[],
        metavar="VERSION",
        help="a step of the lanes: the demo on these Airflow versions, on the PostgreSQL pass's server",
    )
    sub.choices["test"].add_argument(
        "--tooling-in-another-leg",
        action="store_true",
        help="skip the tests of the project's own tooling (Airflow-independent): another leg runs them",
    )
    sub.choices["test"].add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    sub.choices["demo"].add_argument(
        "--keep-ui", action="store_true", help="keep Airflow and its UI up at localhost:8080"
    )
    args = parser.parse_args()
    # A SIGTERM ends the command as an exit does: the private clusters are removed (atexit).
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        return cmd_test(args) if args.command == "test" else cmd_demo(args)
    except KeyboardInterrupt:
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
