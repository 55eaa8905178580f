"""The deferrable wing's shape (issue 14): data flows one way — conditions <- sensors, conditions <- triggers."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def _modules_after_import(module: str) -> set[str]:
    code = (
        f"import sys, {module}; from airflow_smart_ext.conditions import check_types; check_types(); "
        "print('\\n'.join(m for m in sys.modules if m.startswith('airflow_smart_ext')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_conditions_import_neither_sensors_nor_triggers() -> None:
    loaded = _modules_after_import("airflow_smart_ext.conditions")
    assert {"airflow_smart_ext.conditions.sensor_poke", "airflow_smart_ext.conditions.sql"} <= loaded
    assert not {
        m for m in loaded if m.startswith(("airflow_smart_ext.sensors", "airflow_smart_ext.triggers"))
    }


def test_triggers_do_not_import_sensors() -> None:
    loaded = _modules_after_import("airflow_smart_ext.triggers")
    assert not {m for m in loaded if m.startswith("airflow_smart_ext.sensors")}


def test_importing_the_plugin_loads_no_view() -> None:
    """Every Airflow component imports the plugin: the views (their model, pages and web glue) load only in
    the server that serves them."""
    code = "import sys, airflow_smart_ext.plugin; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = {m for m in out.split() if m.startswith("airflow_smart_ext.ui.")}
    assert loaded <= {
        "airflow_smart_ext.ui.pages",
        "airflow_smart_ext.ui.web_asgi",
        "airflow_smart_ext.ui.web_blueprint",
    }


def test_check_types_are_discovered_from_their_modules() -> None:
    from airflow_smart_ext.conditions import check_types

    assert set(check_types()) == {"sensor", "sql", "sql_values"}


def test_no_trigger_or_condition_source_imports_sensors_even_lazily() -> None:
    """Import-time checks miss an import inside a function; read every import statement instead."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "airflow_smart_ext"
    offenders = []
    for folder in ("triggers", "conditions"):
        for path in sorted((package / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                offenders += [
                    f"{path.name}:{node.lineno} {name}"
                    for name in names
                    if name.startswith("airflow_smart_ext.sensors")
                ]
    assert offenders == []


PACKAGE = "airflow_smart_ext"


def _sources(folder: str = "") -> list[Any]:
    """(path relative to the repository, parsed module) of every module of the package (or of one folder)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return [
        (path.relative_to(root), ast.parse(path.read_text()))
        for path in sorted((root / PACKAGE / folder).rglob("*.py"))
    ]


def _imported_modules(node: Any) -> list[str]:
    import ast

    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return []


def test_compat_imports_nothing_of_the_package_above_it_even_lazily() -> None:
    """compat is the ground floor: it may import Airflow, third-party code, its own modules and ``units`` (the
    pure module below every floor) only."""
    import ast

    offenders = [
        f"{path}:{node.lineno} {name}"
        for path, tree in _sources("compat")
        for node in ast.walk(tree)
        for name in _from_package(node)
        if not name.startswith((f"{PACKAGE}.compat", f"{PACKAGE}.units"))
    ]
    assert offenders == []
    units = ast.parse((Path(__file__).resolve().parents[2] / PACKAGE / "units.py").read_text())
    assert [name for node in ast.walk(units) for name in _from_package(node)] == []  # units imports nothing


def test_units_have_one_home() -> None:
    """Issue 44: every conversion between epoch seconds, datetimes, timedeltas and ISO text is ``units.py``'s
    (one precision in every log line and JSON), as every wall-clock read is ``clock.py``'s."""
    root = Path(__file__).resolve().parents[2]
    offenders = [
        hit
        for path, _tree in _sources()
        if path.name != "units.py"
        for hit in _unit_conversions(path.name, (root / path).read_text())
    ]
    assert offenders == []
    assert _unit_conversions("x.py", "t = moment.timestamp()\n") == ["x.py:1: t = moment.timestamp()"]


def _unit_conversions(name: str, text: str) -> list[str]:
    calls = ("fromtimestamp", ".timestamp()", "total_seconds()")
    return [
        f"{name}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if any(call in line for call in calls)
    ]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_reads_another_modules_private_names() -> None:
    """``from m import _x`` and ``m._x`` (``m`` one of our modules) couple a module to another's internals; give
    the owner a public name or accessor instead."""
    import ast

    offenders = []
    for path, tree in _sources():
        modules = set()  # local names bound to a module (or a name) of this package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                for alias in node.names:
                    if _private(alias.name):
                        offenders.append(f"{path}:{node.lineno} from {node.module} import {alias.name}")
                    modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules |= {alias.asname or PACKAGE for alias in node.names if alias.name.startswith(PACKAGE)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in modules:
                    offenders.append(f"{path}:{node.lineno} {ast.unparse(node)}")
    assert offenders == []


def test_every_compat_module_says_what_it_exports() -> None:
    """Each compat module has a literal ``__all__``, every name in it is bound by the module, and the package
    finds its home (``compat.home_of``: the deprecated ``compat.X`` of release 0.1.0 resolves through it)."""
    import ast
    import importlib

    from airflow_smart_ext import compat

    problems = []
    for path, tree in _sources("compat"):
        if path.name == "__init__.py":
            continue
        declared = [
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
        ]
        if len(declared) != 1 or not isinstance(declared[0], (ast.List, ast.Tuple)):
            problems.append(f"{path}: no literal __all__")
            continue
        exported = [ast.literal_eval(item) for item in declared[0].elts]
        bound = set()
        for node in ast.walk(tree):  # module level and its if/try blocks (functions bind nothing here)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.Assign):
                bound |= {target.id for target in node.targets if isinstance(target, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                bound.add(node.target.id)
        problems += [f"{path}: {name} in __all__ is not bound" for name in exported if name not in bound]
        if hasattr(
            compat, path.stem
        ):  # not dag_access_3_0: only 3.0 can import it (its api-server's modules)
            module = importlib.import_module(f"{PACKAGE}.compat.{path.stem}")
            problems += [f"{path}: {name} does not resolve" for name in exported if not hasattr(module, name)]
            problems += [
                f"compat.{name}: not at home" for name in exported if compat.home_of(name) != path.stem
            ]
    assert problems == []


def _from_package(node: Any) -> list[str]:
    """Modules of the package an import statement names (``from airflow_smart_ext import sensors`` too)."""
    import ast

    names = _imported_modules(node)
    if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
        names = [f"{PACKAGE}.{alias.name}" for alias in node.names]
    return [name for name in names if name == PACKAGE or name.startswith(PACKAGE + ".")]


def test_the_wait_model_and_the_views_import_no_sensor_or_trigger_even_lazily() -> None:
    """The wait model is what every face asks; the views show what it computes: neither reaches into the
    sensors or the triggers (a rule of a wait restated there would be a second copy)."""
    import ast

    faces = (f"{PACKAGE}.sensors", f"{PACKAGE}.triggers")
    offenders = [
        f"{path}:{node.lineno} {name}"
        for folder in ("wait_model", "ui")
        for path, tree in _sources(folder)
        for node in ast.walk(tree)
        for name in _from_package(node)
        if name.startswith(faces)
    ]
    offenders += [
        f"waits.py:{node.lineno} {name}"
        for path, tree in _sources()
        if path.name == "waits.py" and path.parent.name == PACKAGE
        for node in ast.walk(tree)
        for name in _from_package(node)
        if name.startswith(faces)
    ]
    assert offenders == []


def test_a_previous_releases_trigger_path_is_only_an_alias() -> None:
    """``triggers/start.py`` is the classpath rows name (0.1.0's too): it re-exports, it defines nothing."""
    import ast

    [(path, tree)] = [(path, tree) for path, tree in _sources("triggers") if path.name == "start.py"]
    assert not [
        node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
    ]
    from airflow_smart_ext.triggers.start import BackoffStartTrigger
    from airflow_smart_ext.triggers.zero_worker import BackoffStartTrigger as Moved

    assert BackoffStartTrigger is Moved


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports when it is imported (module level, ``TYPE_CHECKING`` blocks
    left out; ``from pkg import mod`` names ``pkg.mod``, and ``pkg`` itself only for a name that is no module)."""
    import ast

    modules = {}
    for path, tree in _sources():
        parts = list(path.with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (path, tree)

    def imports(body: list[Any]) -> list[Any]:
        found: list[Any] = []
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, (ast.If, ast.Try)):
                found += imports(node.body) + imports(node.orelse)
                for handler in getattr(node, "handlers", []):
                    found += imports(handler.body)
        return found

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, tree) in modules.items():
        for node in imports(tree.body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the module's package
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(
                        package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
                    )
                submodules = [
                    f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules
                ]
                targets = submodules + ([base] if len(submodules) < len(node.names) else [])
            graph[name].update(target for target in targets if target in modules and target != name)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle() -> None:
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = _import_graph()
    graph[f"{PACKAGE}.compat"].add(f"{PACKAGE}.wait_model.timeline")  # compat importing a floor above it
    graph[f"{PACKAGE}.wait_model.timeline"].add(f"{PACKAGE}.compat")
    assert [f"{PACKAGE}.compat", f"{PACKAGE}.wait_model.timeline"] in _circles(graph)


def test_one_clock_seam() -> None:
    """Every wall-clock read and every wait on time goes through ``airflow_smart_ext/clock.py``, the one seam the
    unit tier's ``clock`` fixture fakes (compat, the ground floor, keeps its own short retry pause)."""
    import ast

    seams = {("time", "time"), ("time", "sleep"), ("asyncio", "sleep")}
    offenders = [
        f"{path}:{node.lineno} {node.value.id}.{node.attr}"
        for path, tree in _sources()
        if path.name != "clock.py" and "compat" not in path.parts
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and (node.value.id, node.attr) in seams
    ]
    # gc_tuning paces CPython's garbage collector on the loop's own clock: no wait's time
    offenders += [
        f"{path}:{node.lineno} call_later"
        for path, tree in _sources()
        if path.name not in ("clock.py", "gc_tuning.py")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "call_later"
        and not (isinstance(node.value, ast.Name) and node.value.id == "clock")
    ]
    assert offenders == []


def _imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in helper and conftest modules (e.g. tests/integration/live.py), never in a test
    module another one imports (running one file must not depend on another's tests)."""
    tests = Path(__file__).resolve().parents[1]
    offenders = []
    for path in sorted(tests.rglob("test_*.py")):
        for module in _imports_of(path):
            if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_"):
                offenders.append(f"{path.relative_to(tests.parent)} imports {module}")
    assert offenders == []


def test_the_test_import_rule_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "test_x.py"
    path.write_text("from tests.integration.test_sensors_live import start_run\n")
    assert "tests.integration.test_sensors_live" in _imports_of(path)


# How code asks which Airflow it runs on: the version string, the version flags, a version parser.
_VERSION_CHECK = ("airflow.__version__", "AIRFLOW_V_", "packaging.version", "AIRFLOW_VERSION")


def _version_checks(path: Path) -> list[str]:
    return [
        f"{path.name}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if any(check in line for check in _VERSION_CHECK)
    ]


def test_only_compat_checks_the_airflow_version() -> None:
    """Every Airflow-version branch lives in compat/ (README, Development): other modules ask compat for a
    feature (``compat.asset_watchers.ASSET_WATCHERS_SUPPORTED``), never for a version."""
    package = Path(__file__).resolve().parents[2] / "airflow_smart_ext"
    offenders = [
        hit
        for path in sorted(package.rglob("*.py"))
        if "compat" not in path.relative_to(package).parts
        for hit in _version_checks(path)
    ]
    assert offenders == []
    assert _version_checks(package / "compat" / "versions.py")  # the rule sees a check where there is one


def test_the_version_rule_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text(
        "from airflow_smart_ext import compat\nif compat.versions.AIRFLOW_V_3_3_PLUS:\n    pass\n"
    )
    assert _version_checks(path) == ["x.py:2: if compat.versions.AIRFLOW_V_3_3_PLUS:"]


def _class_sizes(folder: Path) -> dict[str, int]:
    """Every class below ``folder`` (``path::name``) and its length in lines."""
    return {
        f"{path.relative_to(folder)}::{node.name}": node.end_lineno - node.lineno + 1
        for path in folder.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }


def test_the_harness_keeps_one_concern_per_module_and_no_class_over_300_lines() -> None:
    """Issue 44: ``AirflowEnv`` is composed of one class per concern (airflow_harness/state.py lists them), none
    of them, nor any other class of the harness, over 300 lines."""
    from airflow_harness.env import AirflowEnv
    from airflow_harness.state import EnvState

    sizes = _class_sizes(Path(__file__).resolve().parents[2] / "airflow_harness")
    assert sizes and max(sizes.values()) <= 300, {name: size for name, size in sizes.items() if size > 300}
    concerns = [base for base in AirflowEnv.__bases__ if base is not EnvState]
    assert len({base.__module__ for base in concerns}) == len(concerns) >= 6
    assert all(issubclass(base, EnvState) for base in concerns)


def test_no_class_of_the_package_is_over_300_lines() -> None:
    """No class of ``airflow_smart_ext`` over ~300 lines (the guide's rule; ConditionWatcher was ~400 before its
    edge became ``triggers/watcher_edge.WatcherEdge``)."""
    sizes = _class_sizes(Path(__file__).resolve().parents[2] / "airflow_smart_ext")
    assert len(sizes) > 50
    assert max(sizes.values()) <= 300, {name: size for name, size in sizes.items() if size > 300}


def _compat_reads(text: str) -> list[str]:
    """What a source reads from compat itself: ``compat.X`` and ``from airflow_smart_ext.compat import X``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "compat":
            found.append(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == f"{PACKAGE}.compat":
            found += [alias.name for alias in node.names]
    return found


def test_compat_is_read_by_concern_and_loads_nothing_eagerly() -> None:
    """Issue 44: callers import the concern (``compat.deferral.X``, ``from airflow_smart_ext.compat import
    deferral``), never a name of the package itself; importing compat loads none of its modules."""
    from airflow_smart_ext import compat

    concerns = set(compat.submodules())
    root = Path(__file__).resolve().parents[2]
    offenders = [
        f"{path.relative_to(root)}: compat.{name}"
        for folder in ("airflow_smart_ext", "airflow_harness", "tests", "bench", "scripts", "example_dags")
        for path in sorted((root / folder).rglob("*.py"))
        if "compat" not in path.relative_to(root).parts[1:2]
        for name in _compat_reads(path.read_text())
        if name not in concerns | {"submodules", "home_of"}
    ]
    assert offenders == []
    assert _compat_reads("from airflow_smart_ext import compat\ncompat.task\n") == [
        "task"
    ]  # the rule can fail
    code = "import sys, airflow_smart_ext.compat; print([m for m in sys.modules if '.compat.' in m])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_name_of_release_0_1_0s_compat_still_resolves_with_a_warning_naming_its_home() -> None:
    """DAG files written for 0.1.0 (its examples read ``from airflow_smart_ext.compat import task``)."""
    import warnings

    from airflow_smart_ext import compat
    from airflow_smart_ext.compat import locations

    old_name, missing = "task", "no_such_name"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = getattr(compat, old_name)
    assert task is locations.task
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        "airflow_smart_ext.compat.task moved: import it from airflow_smart_ext.compat.locations"
    ]
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        getattr(compat, missing)


# Names imported from a module that only imports them: the documented faces (a package's __init__, compat's
# wrappers of Airflow's names) and the aliases users or stored rows rely on.
_KEPT_ALIASES = {
    ("airflow_smart_ext.retries", "RETRY_POLICIES_SUPPORTED"),  # example_dags/retry_policy_http.py shows it
    ("airflow_smart_ext.triggers.start", "BackoffStartTrigger"),  # the classpath 0.1.0's trigger rows hold
    ("airflow_smart_ext.triggers.backoff", "BackoffTrigger"),  # the classpath 0.1.0's trigger rows hold
    ("airflow_smart_ext.triggers.watcher", "ConditionWatcher"),  # the classpath 0.1.0's watcher rows hold
    ("airflow_smart_ext.watchers", "ConditionWatcher"),  # the authoring API's documented home (README)
}


@functools.cache
def _bound_names(source: Path) -> frozenset[str]:
    """The names a module defines itself (assignments, functions, classes), not those it imports."""
    tree = ast.parse(source.read_text())
    return frozenset(
        {
            target.id
            for item in ast.walk(tree)
            if isinstance(item, (ast.Assign, ast.AnnAssign))
            for target in (item.targets if isinstance(item, ast.Assign) else [item.target])
            if isinstance(target, ast.Name)
        }
        | {
            item.name
            for item in ast.walk(tree)
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
    )


def _re_exports(root: Path, paths: list[Path], shown_from: Path | None = None) -> list[str]:
    """``from M import N`` where module ``M`` of the package only imports ``N`` (a re-export hub)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            if not node.module.startswith((PACKAGE + ".", "airflow_harness.")):
                continue
            source = root / (node.module.replace(".", "/") + ".py")
            if not source.exists() or node.module.startswith(f"{PACKAGE}.compat."):
                continue  # a package's __init__ (a documented face), or compat (it wraps Airflow's names)
            bound = _bound_names(source)
            for alias in node.names:
                if alias.name not in bound and (node.module, alias.name) not in _KEPT_ALIASES:
                    shown = path.relative_to(shown_from or root)
                    found.append(f"{shown}:{node.lineno}: {alias.name} from {node.module}")
    return found


def test_every_name_is_imported_from_its_home() -> None:
    """Issue 44: no re-export hubs (``sensors/arguments.py`` handed on 22 names of the parameter table,
    ``sensors/base.py`` 8): a name is imported from the module that defines it."""
    root = Path(__file__).resolve().parents[2]
    paths = [
        path
        for folder in ("airflow_smart_ext", "airflow_harness", "tests", "bench", "scripts", "example_dags")
        for path in sorted((root / folder).rglob("*.py"))
    ]
    assert _re_exports(root, paths) == []


def test_the_home_rule_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "x.py"
    probe.write_text("from airflow_smart_ext.sensors.arguments import DEFAULT_JITTER, backoff_policy_for\n")
    root = Path(__file__).resolve().parents[2]
    assert _re_exports(root, [probe], shown_from=tmp_path) == [
        "x.py:1: DEFAULT_JITTER from airflow_smart_ext.sensors.arguments"
    ]


def test_only_the_wait_model_asks_the_policy_for_a_check() -> None:
    """Issue 44: the sensor's modes, both triggers, the watcher and the Waits view ask a try's timeline
    (``wait_model/timeline.py``) for a check; none calls ``BackoffPolicy.next_check`` / ``offset`` itself."""
    package = Path(__file__).resolve().parents[2] / "airflow_smart_ext"
    owners = {package / "backoff.py", package / "wait_model" / "timeline.py"}
    calls = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("next_check", "offset")
                and "policy" in ast.unparse(node.func.value)
            ):
                calls.setdefault(path, []).append(f"{path.relative_to(package)}:{node.lineno}")
    assert set(calls) == owners, calls
