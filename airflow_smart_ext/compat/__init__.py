"""Every difference between Airflow 2.11 and Airflow 3.x lives in this package, one module per difference.

No other module of this package looks at ``airflow.__version__`` or picks an import location by version: each
imports the concern it reads (``from airflow_smart_ext.compat import deferral``; ``compat.deferral.X``).
Keep each branch small and say which versions it serves. Compat imports nothing of ``airflow_smart_ext``
outside this package.

Importing this package loads no submodule (the plugin imports it in every scheduler / dag-processor parse
loop): a submodule loads on first use. A name read from the package itself (``compat.task``, as DAG files of
release 0.1.0 and its examples did) still resolves, from the submodule that owns it, with a
``DeprecationWarning`` naming that home (tests/unit/test_layout.py keeps our own code off that path).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import warnings
from typing import Any


@functools.cache
def submodules() -> tuple[str, ...]:
    """The concerns, one module each (``dag_access_3_0`` is ``dag_access``'s 3.0 branch, not a concern)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "dag_access_3_0"))


def home_of(name: str) -> str | None:
    """The submodule that exports ``name`` (its ``__all__``), or None."""
    for module_name in submodules():
        if name in getattr(importlib.import_module(f"{__name__}.{module_name}"), "__all__", ()):
            return module_name
    return None


def __getattr__(name: str) -> Any:
    if name in submodules():
        return importlib.import_module(f"{__name__}.{name}")
    home = None if name.startswith("__") else home_of(name)
    if home is None:  # also a helpful error for typos
        raise AttributeError(f"airflow_smart_ext.compat has no attribute {name!r}")
    warnings.warn(
        f"airflow_smart_ext.compat.{name} moved: import it from airflow_smart_ext.compat.{home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
