"""The dependency floors in pyproject.toml are true: CI's lowest leg (``scripts/dev.py test --lowest``, uv's
``--resolution lowest-direct``) installs every direct dependency at its declared floor and runs the unit tier;
this test makes the floors and what that leg installed agree, so a floor cannot silently drift false again
(a floor the resolver could not reach, an unpinned dependency, a stale venv). On every other leg the
installed versions must satisfy the declared ranges.

One row per direct dependency, read from pyproject.toml: a new dependency is tested the day it is declared.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11 (CI runs 3.11)")

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# The groups the lowest leg installs (dev is tooling: ruff/mypy/vulture run once, in the main leg).
GROUPS = ("dependencies", "test", "postgres")
LOWEST_LEG = os.environ.get("SMART_EXT_LOWEST_LEG") == "1"


def _declared() -> list[tuple[str, Requirement]]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    rows = [("dependencies", Requirement(line)) for line in project["dependencies"]]
    for group in GROUPS[1:]:
        rows += [(group, Requirement(line)) for line in project["optional-dependencies"][group]]
    return rows


DECLARED = _declared()


def _floor(requirement: Requirement) -> Version:
    floors = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
    assert len(floors) == 1, f"{requirement}: declare exactly one floor (>=), the lowest version that passes"
    return floors[0]


def test_the_table_holds_every_runtime_dependency():
    names = {req.name for group, req in DECLARED if group == "dependencies"}
    assert {"apache-airflow", "holidays", "pendulum", "apache-airflow-providers-common-sql"} <= names


@pytest.mark.parametrize(("group", "requirement"), DECLARED, ids=[str(req) for _group, req in DECLARED])
def test_installed_version_agrees_with_declared_floor(group: str, requirement: Requirement):
    floor = _floor(requirement)
    installed = Version(metadata.version(requirement.name))
    if LOWEST_LEG:
        assert installed == floor, (
            f"[{group}] {requirement}: the lowest leg installed {installed}, not the declared floor {floor}"
        )
    else:
        assert requirement.specifier.contains(installed, prereleases=True), (
            f"[{group}] {requirement}: installed {installed} is outside the declared range"
        )
