"""The parameter table's examples: for every row and rule of ``airflow_smart_ext/wait_model/parameters.py``, values
it accepts and values it refuses. Every entry point's tests are generated from these (a new row is a new entry:
``test_every_row_has_examples``)."""

from __future__ import annotations

import datetime
from typing import Any

from airflow_smart_ext import compat
from airflow_smart_ext.timetables import DueTime

SECONDS = datetime.timedelta(seconds=5)
REQUIRED = {"conn_id": "my_db", "sql": "select 1"}

#: name -> (accepted values, refused values)
EXAMPLES: dict[str, tuple[list[Any], list[Any]]] = {
    "mode": (["poke", "reschedule"], ["bogus", None, "deferrable"]),
    "soft_fail": ([True, False], ["yes", 1, None]),
    "never_fail": ([True, False], ["yes", 0]),
    "silent_fail": ([True, False], ["no", 1]),
    "exponential_backoff": ([True, False], ["yes", None]),
    # 0 as in Airflow (the schedule starts at 1 s: ZERO_POKE_INTERVAL_START)
    "poke_interval": ([5, 2.5, SECONDS, 0], [-1, -0.5, "5", None, True, float("inf")]),
    "timeout": (
        [
            3600,
            datetime.timedelta(hours=1),
            *([None] if compat.sensor_timeouts.SENSOR_TIMEOUT_ACCEPTS_NONE else []),
        ],
        [-1, "1h", float("nan"), *([] if compat.sensor_timeouts.SENSOR_TIMEOUT_ACCEPTS_NONE else [None])],
    ),
    "max_wait": ([None, 600, datetime.timedelta(minutes=10)], [-1, "10m"]),
    "backoff_factor": ([None, 1, 2.5, 10], [0.5, 11, "2", True, float("inf")]),
    "jitter": ([None, "none", "full", "equal", "decorrelated"], ["random", 1]),
    "splay": ([None, 0, 5, SECONDS], [-1, "soon"]),
    "deferrable": ([None, False, True], ["yes", 1]),
    "deferrable_fallback": ([None, "reschedule"], ["poke", True]),
    "transient_errors": (
        [None, [LookupError], ["builtins.LookupError"], "builtins.LookupError"],
        [["no.such.Error"], [int], 5],
    ),
    "check_timeout": ([None, 5, SECONDS], [0, -1, "5"]),
    "rate_limit": ([None, 0.5, 2], [0, -1, "fast", True]),
    "start_from_trigger": ([None, True, False], ["yes", 1]),
    "due": (
        [None, DueTime("09:30", market="NYSE", timezone="America/New_York"), DueTime(after=60).to_dict()],
        ["09:30", {"at": "25:00"}, {"when": "09:30"}, 5],
    ),
    "on_late": ([None, print, [print, len]], ["slack", [print, 3], 5]),
    "conn_id": (["my_db", "{{ var.value.conn }}"], [None, 5, "", "  "]),
    "sql": (["select 1", "query.sql"], [None, "", 5]),
    "parameters": ([None, {"a": 1}, [1, 2], "{{ dag_run.conf['params'] }}"], ["a=1", 5]),
    "success": ([None, "builtins.bool", bool], [5, "no.such.criterion"]),
    "failure": ([None, "builtins.bool"], [5, "no.such.criterion"]),
    "selector": ([None, "builtins.len"], [5, "no_dots"]),
    "fail_on_empty": ([True, False], ["yes", None]),
    "hook_params": ([None, {"a": 1}, "{{ params.hook }}"], [[1], "x"]),
}

#: What an accepted example of a row needs beside it (a rule across rows would refuse it alone).
COMPANIONS: dict[str, dict[str, Any]] = {"on_late": {"due": DueTime(after=60).to_dict()}}

#: rule names -> (accepted combinations, refused combinations)
RULE_EXAMPLES: dict[tuple[str, ...], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    ("on_late", "due"): (
        [{"on_late": print, "due": DueTime(after=60)}, {"on_late": [], "due": None}, {"on_late": None}],
        [{"on_late": [print, len], "due": None}],  # without due=: .partial() leaves it to .expand()
    ),
    ("soft_fail", "never_fail"): (
        [{"soft_fail": True, "never_fail": False}, {"soft_fail": False, "never_fail": True}],
        [{"soft_fail": True, "never_fail": True}],
    ),
    ("max_wait", "poke_interval"): (
        [{"max_wait": 10, "poke_interval": 10}],
        [{"max_wait": 5, "poke_interval": 10}, {"max_wait": SECONDS, "poke_interval": 10}],
    ),
    # the default splay (one poke_interval) is never held against a shorter timeout: only a given one
    ("splay", "timeout"): (
        [{"splay": 60, "timeout": 60}, {"poke_interval": 60, "timeout": 10}, {"timeout": 10}],
        [{"splay": 61, "timeout": 60}],
    ),
    ("jitter", "backoff_factor"): (
        [{"jitter": "decorrelated", "backoff_factor": 2}, {"jitter": "none", "backoff_factor": 1}],
        [{"jitter": "decorrelated", "backoff_factor": 1}],
    ),
    ("jitter", "timeout", "poke_interval"): (
        [{"jitter": "decorrelated", "timeout": 86400, "poke_interval": 60}],
        [{"jitter": "decorrelated", "timeout": 7 * 86400, "poke_interval": 0.01}],
    ),
}
