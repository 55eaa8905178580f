#!/usr/bin/env python3
"""Airflow's own sensor tests, base class swapped for ``BackoffSensor`` (issue 42): the drop-in promise, proven.

For the Airflow a Python interpreter has installed, fetches the released sdists that ship Airflow's own sensor
tests (the Task SDK's ``tests/task_sdk/bases/test_sensor.py``: ``BaseSensorOperator``; the standard provider's
``tests/unit/standard/sensors/test_bash.py``, ``test_date_time.py``, ``test_filesystem.py``, ``test_time.py``:
its sensors rebased), runs them unmodified with ``BaseSensorOperator`` replaced by
``BackoffSensor(backoff_factor=1, jitter="none", splay=0)`` (``scripts/airflow_suite/conftest.py``), and
fails on any failure that is not on the allow-list
(``tests/airflow_suite_allowed.txt``: ``TEST_ID | WHY``; an id without ``[params]`` covers every parametrization).

    python scripts/airflow_sensor_suite.py --python .venv-3.3/bin/python --junitxml .test-logs/airflow-suite.xml
    python scripts/airflow_sensor_suite.py --python .venv-3.3/bin/python --stock   # the same files, Airflow's base

Exit status: 0 when every failure is allowed (swapped) or nothing fails (``--stock``), 1 otherwise, 2 when the
suite could not be set up. The JUnit report has one test case per test: an allowed failure is a ``skipped`` case
whose message starts ``allowed difference:`` and gives the allow-list's reason. Sdists are cached under
``.cache/airflow-suite`` (downloaded with the interpreter's own pip, by name and the installed version).
A release whose sdist does not ship the tests (apache-airflow 2.11.2 ships none) is reported, not faked.

``run_suite(...)`` is the same as a function (for scripts/dev.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "scripts" / "airflow_suite"
ALLOWED = ROOT / "tests" / "airflow_suite_allowed.txt"
CACHE = ROOT / ".cache" / "airflow-suite"


@dataclasses.dataclass(frozen=True)
class Suite:
    """Test files of one sdist: ``dist==version``, the paths inside it, the folder they run in."""

    name: str
    dist: str
    version: str
    members: tuple[str, ...]


@dataclasses.dataclass
class Outcome:
    id: str
    outcome: str  # passed, failed, error, skipped, xfailed (on the allow-list)
    detail: str = ""
    allowed_because: str | None = None


def installed_versions(python: str) -> dict[str, str | None]:
    probe = (
        "import json, importlib.metadata as m\n"
        "def v(d):\n"
        "    try:\n        return m.version(d)\n"
        "    except m.PackageNotFoundError:\n        return None\n"
        "print(json.dumps({d: v(d) for d in ('apache-airflow', 'apache-airflow-task-sdk', "
        "'apache-airflow-providers-standard')}))"
    )
    out = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def suites_for(versions: dict[str, str | None]) -> tuple[list[Suite], list[str]]:
    """The suites this Airflow has, and notes on those it lacks."""
    suites, notes = [], []
    airflow, sdk, standard = (
        versions["apache-airflow"],
        versions["apache-airflow-task-sdk"],
        versions["apache-airflow-providers-standard"],
    )
    if sdk:
        suites.append(
            Suite("task_sdk", "apache-airflow-task-sdk", sdk, ("tests/task_sdk/bases/test_sensor.py",))
        )
    elif airflow:
        # Airflow 2: BaseSensorOperator's tests are tests/sensors/test_base.py of the apache-airflow sdist, if it
        # ships them (2.11.2's does not; they also need a metadata DB: dag_maker).
        suites.append(Suite("airflow", "apache-airflow", airflow, ("tests/sensors/test_base.py",)))
    if standard:
        members = tuple(
            f"tests/unit/standard/sensors/{name}"
            for name in ("test_bash.py", "test_date_time.py", "test_filesystem.py", "test_time.py")
        )
        suites.append(Suite("standard", "apache-airflow-providers-standard", standard, members))
    else:
        notes.append("apache-airflow-providers-standard is not installed: its sensor tests are not run")
    return suites, notes


def sdist(python: str, dist: str, version: str, cache: Path) -> Path:
    """The sdist of ``dist==version`` (cached), fetched with the interpreter's own pip."""
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{dist.replace('-', '_')}-{version}"
    for candidate in (cache / f"{stem}.tar.gz", cache / f"{dist}-{version}.tar.gz"):
        if candidate.exists():
            return candidate
    subprocess.run(
        [python, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", dist, f"{dist}=={version}"]
        + ["--dest", str(cache)],
        check=True,
    )
    found = sorted(cache.glob(f"{stem}*.tar.gz")) or sorted(cache.glob(f"{dist}-{version}*.tar.gz"))
    if not found:
        raise RuntimeError(f"pip downloaded no sdist of {dist}=={version} into {cache}")
    return found[0]


def extract(archive: Path, members: tuple[str, ...], into: Path) -> tuple[list[Path], list[str]]:
    """The members found (copied flat into ``into``) and those the sdist does not ship."""
    into.mkdir(parents=True, exist_ok=True)
    found, missing = [], []
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1]: name for name in tar.getnames() if "/" in name}
        for member in members:
            if member not in names:
                missing.append(member)
                continue
            source = tar.extractfile(names[member])
            assert source is not None
            target = into / Path(member).name
            target.write_bytes(source.read())
            found.append(target)
    return found, missing


def read_allowed(path: Path) -> dict[str, str]:
    allowed: dict[str, str] = {}
    if not path.exists():
        return allowed
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        test_id, _, why = line.partition("|")
        if not why.strip():
            raise SystemExit(f"{path}: {test_id.strip()} has no reason (TEST_ID | WHY)")
        allowed[test_id.strip()] = why.strip()
    return allowed


def allowed_reason(test_id: str, allowed: dict[str, str]) -> str | None:
    return allowed.get(test_id) or allowed.get(test_id.split("[", 1)[0])


def run_pytest(
    python: str, folder: Path, allowed: dict[str, str] | None, package_root: Path, timeout: float
) -> list[Outcome]:
    """Run the suite in ``folder``; ``allowed`` is None for the stock base, else the allow-list (its tests run
    as ``xfail``)."""
    results = folder / "results.jsonl"
    results.unlink(missing_ok=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_", "PYTEST_"))
    }
    home = folder / "airflow-home"
    home.mkdir(exist_ok=True)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "PYTHONPATH": os.pathsep.join([str(package_root), str(folder)]),
            "SMART_EXT_SWAP": "0" if allowed is None else "1",
            "SMART_EXT_SUITE_ALLOWED": json.dumps(allowed or {}),
            "SMART_EXT_SUITE_RESULTS": str(results),
            "PYTHONDONTWRITEBYTECODE": "1",
            # The connection a DB-backed run of Airflow's tests gets from `airflow db reset` (its default
            # connections); test_filesystem.py's FileSensor reads it, and needs no metadata DB otherwise.
            "AIRFLOW_CONN_FS_DEFAULT": json.dumps({"conn_type": "fs", "extra": {"path": "/"}}),
        }
    )
    command = [python, "-m", "pytest", str(folder), "--rootdir", str(folder), "-c", os.devnull]
    command += ["-p", "no:cacheprovider", "--import-mode=importlib", "-q", "-o", "asyncio_mode=strict"]
    command += ["-W", "ignore::DeprecationWarning", f"--timeout={timeout:g}"]
    subprocess.run(command, cwd=folder, env=env, stdin=subprocess.DEVNULL, check=False)
    outcomes = []
    if results.exists():
        for line in results.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            outcomes.append(Outcome(record["id"], record["outcome"], record.get("detail", "")))
    return outcomes


def write_junit(path: Path, outcomes: list[Outcome], label: str) -> None:
    failures = sum(1 for o in outcomes if o.outcome in ("failed", "error") and o.allowed_because is None)
    skipped = sum(1 for o in outcomes if o.outcome == "skipped" or o.allowed_because is not None)
    suite = ET.Element(
        "testsuite",
        name=f"airflow-sensor-suite ({label})",
        tests=str(len(outcomes)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    for outcome in outcomes:
        # classname: the module ("folder.test_x"); name: the rest of the id ("TestC::test_y[param]"), so that
        # scripts/proofs.py names each case by its id here, though the file is not one of the checkout's
        file_part, _, name = outcome.id.partition("::")
        classname = file_part.removesuffix(".py").replace("/", ".")
        case = ET.SubElement(suite, "testcase", classname=classname, name=name or file_part)
        if outcome.allowed_because is not None:
            ET.SubElement(case, "skipped", message=f"allowed difference: {outcome.allowed_because}")
        elif outcome.outcome in ("failed", "error"):
            ET.SubElement(
                case, "failure", message=f"{outcome.outcome}: not on the allow-list"
            ).text = outcome.detail
        elif outcome.outcome == "skipped":
            ET.SubElement(case, "skipped", message=outcome.detail[-500:])
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def run_suite(
    python: str,
    *,
    junitxml: Path | None = None,
    stock: bool = False,
    allowed_file: Path = ALLOWED,
    cache: Path = CACHE,
    package_root: Path = ROOT,
    keep: bool = False,
    timeout: float = 300.0,
) -> int:
    versions = installed_versions(python)
    suites, notes = suites_for(versions)
    allowed = {} if stock else read_allowed(allowed_file)
    work = Path(tempfile.mkdtemp(prefix="airflow-sensor-suite-"))
    try:
        for item in HARNESS.rglob("*.py"):
            target = work / item.relative_to(HARNESS)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(item, target)
        ran = 0
        for suite in suites:
            archive = sdist(python, suite.dist, suite.version, cache)
            found, missing = extract(archive, suite.members, work / suite.name)
            ran += len(found)
            notes += [f"{suite.dist}=={suite.version}'s sdist does not ship {member}" for member in missing]
        if not ran:
            print(
                "airflow-sensor-suite: no test file to run:", "; ".join(notes) or "no suite", file=sys.stderr
            )
            return 2
        outcomes = run_pytest(python, work, None if stock else allowed, package_root, timeout)
    finally:
        if keep:
            print(f"airflow-sensor-suite: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for outcome in outcomes:
        if outcome.outcome in ("failed", "error", "xfailed"):
            outcome.allowed_because = allowed_reason(outcome.id, allowed)
    label = f"Airflow {versions['apache-airflow']}, {'stock base' if stock else 'BackoffSensor base'}"
    if junitxml is not None:
        write_junit(junitxml, outcomes, label)
    passed = sum(o.outcome == "passed" for o in outcomes)
    failed = [o for o in outcomes if o.outcome in ("failed", "error", "xfailed")]
    unlisted = [o for o in failed if o.allowed_because is None]
    skipped = sum(o.outcome == "skipped" for o in outcomes)
    stale = sorted(
        test_id
        for test_id in allowed
        if any(o.id.split("[", 1)[0] == test_id.split("[", 1)[0] for o in outcomes)
        and not any(
            o.allowed_because is not None and allowed_reason(o.id, {test_id: ""}) is not None for o in failed
        )
    )
    for note in notes:
        print(f"airflow-sensor-suite: note: {note}")
    for test_id in stale:
        print(f"airflow-sensor-suite: allow-list entry passed here (not needed on this version): {test_id}")
    for outcome in unlisted:
        print(f"airflow-sensor-suite: UNLISTED {outcome.outcome.upper()} {outcome.id}\n{outcome.detail}\n")
    print(
        f"airflow-sensor-suite ({label}): {passed} passed of {len(outcomes)}; {len(failed)} did not "
        f"({len(failed) - len(unlisted)} on the allow-list, run as xfail); {skipped} skipped"
    )
    print(f"{passed} passed, {len(unlisted)} failed, {skipped + len(failed) - len(unlisted)} skipped")
    return 1 if unlisted else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the Airflow to test")
    parser.add_argument("--junitxml", type=Path, help="write a JUnit report here")
    parser.add_argument("--stock", action="store_true", help="run on Airflow's own base (the baseline)")
    parser.add_argument("--allowed", type=Path, default=ALLOWED, help="the allow-list (TEST_ID | WHY)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the sdists are kept")
    parser.add_argument("--package-root", type=Path, default=ROOT, help="the airflow_smart_ext to test")
    parser.add_argument("--keep", action="store_true", help="keep the temporary test folder")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test")
    args = parser.parse_args(argv)
    return run_suite(
        args.python,
        junitxml=args.junitxml,
        stock=args.stock,
        allowed_file=args.allowed,
        cache=args.cache,
        package_root=args.package_root,
        keep=args.keep,
        timeout=args.timeout,
    )


if __name__ == "__main__":
    sys.exit(main())
