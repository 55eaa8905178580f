"""The previous release, installed beside this checkout as users install it: the wheel built from its tagged
source tree (this repository's history) in a throwaway venv with the test venv's exact packages (the upgrade
tests: test_upgrade_live.py on one Airflow, test_distributed_upgrade_live.py rolled through the distributed
topology)."""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from airflow_harness.state import REPO_ROOT
from airflow_smart_ext import __version__

# Release 0.1.0: the tag ``v0.1.0``. A clone need not carry tags, so the commit is named too (and checked
# against the tag wherever the tag is there).
RELEASE_TAG = "v0.1.0"
RELEASE = "43a41da160dfbf2ee70b18b412a5530c80c175ad"


def uv_binary() -> str:
    uv = Path(sys.executable).parent / "uv"  # scripts/dev.py installs uv into the test venv
    found = str(uv) if uv.exists() else shutil.which("uv")
    if found is None:
        pytest.fail(
            "uv is needed to build the throwaway venv (scripts/dev.py installs it into the test venv)"
        )
    return found


def run_checked(*argv: str | Path) -> None:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )


def package_digest(package_dir: Path) -> str:
    """One hash over every module of an ``airflow_smart_ext`` tree (paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*")):
        if (
            path.is_file()
            and "__pycache__" not in path.parts
            and path.suffix in {".py", ".html", ".js", ".css"}
        ):
            digest.update(str(path.relative_to(package_dir)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def installed_package(python: Path) -> Path:
    out = subprocess.run(
        [  # -I: the package installed in the venv (what Airflow runs), not the checkout in the working dir
            str(python),
            "-I",
            "-c",
            "import airflow_smart_ext, os; print(os.path.dirname(airflow_smart_ext.__file__))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return Path(out.strip())


def previous_release_tree(work: Path) -> Path:
    tagged = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "-q", f"{RELEASE_TAG}^{{commit}}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert tagged in ("", RELEASE), f"{RELEASE_TAG} is {tagged}, not {RELEASE}: update RELEASE"
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", RELEASE], capture_output=True)
    if archive.returncode != 0:
        pytest.fail(
            f"git archive {RELEASE} failed (a shallow clone lacks the previous release: fetch it):\n"
            f"{archive.stderr.decode(errors='replace')}"
        )
    tree = work / "previous-release"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def throwaway_venv(work: Path, uv: str) -> Path:
    """The test venv's packages without ours (same versions: uv links them from its cache, no resolution).
    Named like the test venv, so the harness reuses its migrated SQLite template for this Airflow version."""
    venv = work / Path(sys.executable).parent.parent.name
    run_checked(uv, "venv", "-q", "--python", sys.executable, venv)
    frozen = subprocess.run(
        [uv, "pip", "freeze", "--python", sys.executable, "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    requirements = work / "requirements.txt"
    requirements.write_text(
        "\n".join(line for line in frozen.splitlines() if "airflow-smart-ext" not in line)
    )
    python = venv / "bin" / "python"
    run_checked(uv, "pip", "install", "-q", "--python", python, "--no-deps", "-r", requirements)
    return python


def venv_with_previous_release(work: Path) -> Path:
    """A throwaway venv holding the previous release's built wheel (checked file for file); its python."""
    uv = uv_binary()
    previous = previous_release_tree(work)
    python = throwaway_venv(work, uv)
    run_checked(uv, "build", "-q", "--wheel", "--out-dir", work / "dist", previous)
    (wheel,) = (work / "dist").glob("airflow_smart_ext-*.whl")
    run_checked(uv, "pip", "install", "-q", "--python", python, "--no-deps", wheel)
    assert package_digest(installed_package(python)) == package_digest(previous / "airflow_smart_ext")
    version = subprocess.run(
        [str(python), "-I", "-c", "import importlib.metadata as m; print(m.version('airflow-smart-ext'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (version, RELEASE_TAG) == ("0.1.0", "v0.1.0") and version != __version__, (version, __version__)
    return python
