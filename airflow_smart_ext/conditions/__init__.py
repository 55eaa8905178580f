"""What a wait is about — neutral ground for ``sensors/`` and ``triggers/`` (both import it, it imports
neither).

* ``spec``: the check types and their registry: validation, sharing key, concurrency key, the shared I/O
  half and the per-waiter interpreter of each;
* ``sensor`` / ``sql``: the two check types (a new type is one new module here, discovered);
* ``outcomes``: one outcome vocabulary and its two mappings (exception -> outcome, outcome -> task end);
* ``runtime``: where checks run in the triggerer (threads, per-connection slots, configuration, imports).
"""

from __future__ import annotations

from airflow_smart_ext.conditions.outcomes import (
    EVENT_STATUS,
    NEGATIVE,
    Ending,
    Outcome,
    outcome_from_exception,
    outcome_from_result,
    task_ending,
)
from airflow_smart_ext.conditions.spec import (
    CheckType,
    Interpreter,
    SharedCheck,
    check_types,
    concurrency_key,
    make_interpreter,
    make_shared_check,
    sharing_key,
    validate_check_spec,
)

__all__ = [
    "EVENT_STATUS",
    "NEGATIVE",
    "CheckType",
    "Ending",
    "Interpreter",
    "Outcome",
    "SharedCheck",
    "check_types",
    "concurrency_key",
    "make_interpreter",
    "make_shared_check",
    "outcome_from_exception",
    "outcome_from_result",
    "sharing_key",
    "task_ending",
    "validate_check_spec",
]
