"""A selector module that imports at DAG parse but not in the triggerer (tests/integration/
test_watcher_exactly_once_live.py): the test starts the triggerers with ``SMART_EXT_EO_TRIGGERER=1``, which
makes this module raise while importing there, as a module missing from the triggerer's image would."""

from __future__ import annotations

import os
from typing import Any

if os.environ.get("SMART_EXT_EO_TRIGGERER") == "1":
    raise ImportError("eo_triggerer_missing is not installed in this triggerer's image")


def first_cell(row: Any) -> Any:
    return row[0]
