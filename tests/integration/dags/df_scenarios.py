"""The differential matrix's scenario table (issue 23): one row per scenario, every mode runs every row.

Plain data, no Airflow: imported by name (``df_scenarios``) by the DAG file ``df_matrix_dags.py`` and by
path from ``tests/integration/differential.py`` (the recorder and the allowed differences). Adding a
scenario is adding one row; ``df_matrix_dags.py`` builds its task in every mode's DAG.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

#: Every mode a wait can run in; ``poke`` is the oracle. Keyword arguments added to every sensor.
MODES: dict[str, dict[str, Any]] = {
    "poke": {"mode": "poke"},
    "reschedule": {"mode": "reschedule"},
    "deferrable": {"deferrable": True, "start_from_trigger": False},  # worker-first: check #0 on a worker
    "zero_worker": {"deferrable": True},  # start_from_trigger default: in the triggerer where allowed
}
ORACLE = "poke"
#: The suffix of a cell's late-alert counter (``<key>`` + it, beside its checks): one line per ``on_late`` call.
LATE_SUFFIX = ".late"

#: Defaults of every scenario's sensor (a row's ``kwargs`` override them). Seconds.
#: ``timeout`` 90: a wait that succeeds must not meet its deadline on a loaded machine. Reschedule mode needs a
#: free worker slot for every check (at least 10 s apart in the matrix on Airflow 3: df_dags_reschedule), and
#: the poke-mode sensors of the same phase hold slots for up to 30 s: on 2.11 a 30 s timeout ended
#: `true_after_3` after 2 checks. The scenarios that time out set their own.
COMMON: dict[str, Any] = {"poke_interval": 1, "max_wait": 2, "timeout": 90, "retries": 0, "retry_delay": 1}

#: DAG groups: each mode runs one DAG run per group. ``phase`` 1 groups run together (all modes at once);
#: phase 2 groups afterwards (their actions touch the whole Airflow, e.g. kill the triggerer).
GROUPS: dict[str, dict[str, Any]] = {
    "dagrun": {"phase": 1, "dag_kwargs": {"dagrun_timeout": 25}},
    "main": {"phase": 1, "dag_kwargs": {}},
    "kill": {"phase": 2, "dag_kwargs": {}},
}


@dataclass(frozen=True)
class Scenario:
    """One way a wait can end.

    ``script``: the condition's answer per check (df_sensors.ScriptedSensor; the last step repeats; ``W``:
    not yet until the test has cleared the task, then true).
    ``mapped``: one script per map index (a mapped sensor). ``sensor="sql"``: BackoffSqlSensor on the
    ``df_status`` table (status ``error`` from the start) with a failure criterion. ``action``: what the
    test does mid-wait (``clear``: clear the task after its first check; ``kill_triggerer``: SIGKILL the
    triggerer after two checks of the deferrable modes and restart it).
    """

    name: str
    script: str = "T"
    kwargs: dict[str, Any] = field(default_factory=dict)
    group: str = "main"
    sensor: str = "scripted"
    mapped: tuple[str, ...] = ()
    action: str | None = None

    @property
    def cells(self) -> list[int]:
        """Map indexes of this scenario's task instances (-1: not mapped)."""
        return list(range(len(self.mapped))) if self.mapped else [-1]


SCENARIOS: list[Scenario] = [
    Scenario("true_at_once", "T"),
    Scenario("true_after_3", "FFFT"),
    Scenario("timeout", "F", {"timeout": 8}),
    Scenario("timeout_soft_fail", "F", {"timeout": 8, "soft_fail": True}),
    Scenario("timeout_never_fail", "F", {"timeout": 8, "never_fail": True}),
    Scenario("timeout_silent_fail", "F", {"timeout": 8, "silent_fail": True}),
    Scenario("execution_timeout", "F", {"timeout": 30, "execution_timeout": 6, "retries": 1}),
    # priority_weight: queued before the other scenarios, so the wait starts well before the run times out.
    # timeout 600: a loaded scheduler enforced the 25 s dagrun_timeout only after 35-60 s; a sensor timeout
    # at the same moment raced it (3.3.2 left the zero-worker task `scheduled` in the failed run).
    Scenario("dagrun_timeout", "F", {"timeout": 600, "priority_weight": 100}, group="dagrun"),
    Scenario("transient_3_then_true", "EEET"),
    Scenario("permanent_error", "P", {"retries": 1}),
    Scenario("skip", "S"),
    Scenario("poke_return_value", "FX"),
    Scenario("sql_failure", sensor="sql", kwargs={"retries": 1}),
    Scenario("hung_check", "HT", {"check_timeout": 3}),
    # One check at once (no splay, no jitter), the next 40 s later in poke and reschedule mode: the clear lands
    # between the two (3.3's clear of a deferred task took 20-30 s on a loaded machine). The condition turns
    # true once the clear is done (``W``), so no try ends before it, and try 2's first check is true.
    Scenario(
        "clear_mid_wait",
        "W",
        {"poke_interval": 40, "max_wait": 40, "jitter": "none", "splay": 0, "timeout": 90},
        action="clear",
    ),
    # A due time 2 s after the run's start instant (run_after; 2.11: its logical date) passes mid-wait or before
    # the first check: the wait says once that it is late (``on_late`` counted: ``late_alerts``), then succeeds.
    Scenario("late_then_true", "FFFT", {"due": {"after": 2}}),
    Scenario("kill_triggerer", "FFFFFT", {"timeout": 120}, group="kill", action="kill_triggerer"),
    Scenario("mapped", mapped=("T", "FFX")),
]

#: A targeted run (comma-separated names; unset: everything). The DAG files and the test read this one table
#: in their own processes (Airflow's components inherit the environment), so both see the same subset; poke
#: mode, the oracle, is always kept. An unknown name is an error, not an empty matrix.
ONLY_SCENARIOS_ENV = "SMART_EXT_DF_SCENARIOS"
ONLY_MODES_ENV = "SMART_EXT_DF_MODES"


def _only(env_name: str, known: list[str], keep: tuple[str, ...] = ()) -> list[str]:
    wanted = [name.strip() for name in os.environ.get(env_name, "").split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise ValueError(f"{env_name}: unknown name(s) {unknown}; known: {known}")
    return [name for name in known if not wanted or name in wanted or name in keep]


_scenarios = _only(ONLY_SCENARIOS_ENV, [s.name for s in SCENARIOS])
SCENARIOS = [s for s in SCENARIOS if s.name in _scenarios]
MODES = {m: MODES[m] for m in _only(ONLY_MODES_ENV, list(MODES), keep=(ORACLE,))}
GROUPS = {g: spec for g, spec in GROUPS.items() if any(s.group == g for s in SCENARIOS)}
