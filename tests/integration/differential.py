"""The differential matrix (issue 23): how each mode ended each scenario, compared with poke mode.

* The scenarios (one table, one row each) live in ``tests/integration/dags/df_scenarios.py``, a module the
  DAG file imports by name; this module loads the same file by path (one table, two readers).
* ``record`` reads what Airflow recorded for one task instance into an ``Ending``: final state, tries, the
  exception classes in each try's log, the ``backoff_sensor_stats`` and ``return_value`` XComs, the number of
  checks the condition received (counted at the condition, df_sensors.record_check) and whether the task
  instance ended with ``end_date`` before ``start_date``.
* ``ALLOWED_DIFFERENCES``: the only differences from poke mode the promise allows, each with its reason.
  docs/sensors.md "Every mode ends a wait as poke mode does" renders this table (a unit test keeps the two
  equal); a difference listed here must be intended, never a known bug.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.integration.live import lost_by_executor, reset_by_scheduler

if TYPE_CHECKING:
    from airflow_harness.env import AirflowEnv

_DAGS_DIR = Path(__file__).resolve().parent / "dags"
_spec = importlib.util.spec_from_file_location("df_scenarios", _DAGS_DIR / "df_scenarios.py")
assert _spec is not None and _spec.loader is not None
df_scenarios = importlib.util.module_from_spec(_spec)
sys.modules["df_scenarios"] = df_scenarios  # dataclasses resolve annotations through sys.modules
_spec.loader.exec_module(df_scenarios)

MODES: list[str] = list(df_scenarios.MODES)
ORACLE: str = df_scenarios.ORACLE
SCENARIOS: list[Any] = list(df_scenarios.SCENARIOS)
GROUPS: dict[str, dict[str, Any]] = dict(df_scenarios.GROUPS)
STATS_XCOM_KEY = "backoff_sensor_stats"
DOCS_SENSORS = Path(__file__).resolve().parents[2] / "docs" / "sensors.md"
DOCS_SECTION = "## Every mode ends a wait as poke mode does"

# Exception classes that end a try (3.x JSON logs and 2.11 tracebacks both name the class).
_ERROR_RE = re.compile(
    r"\b(Airflow(?:SensorTimeout|TaskTimeout|SkipException|FailException|Exception|TaskTerminated)"
    r"|TaskDeferralError|TaskDeferralTimeout|ScriptedPermanentError)\b"
)


@dataclass(frozen=True)
class Ending:
    """How one task instance's wait ended (the tuple compared across modes)."""

    state: str | None
    tries: int
    errors: tuple[tuple[str, ...], ...]  # per try: exception classes named in its log, sorted
    stats_pokes: Any  # backoff_sensor_stats["pokes"] (None: no stats XCom)
    stats_mode: Any  # backoff_sensor_stats["mode"]
    return_value: Any
    checks: int  # checks the condition received, counted at the condition
    checks_after_run: (
        int  # checks made over RUN_END_GRACE_SECONDS after the DAG run ended (a wait outliving it)
    )
    negative_duration: bool  # end_date < start_date
    late_alerts: int  # ``on_late`` calls (a scenario with a due time: df_sensors.count_late)


FIELDS: list[str] = [f.name for f in fields(Ending)]


def infra_failures(env: AirflowEnv, mode: str, scenario: Any, run_id: str) -> int:
    """How many of this cell's task processes (in this DAG run) the executor lost before they ran, plus its
    task instances an ended DAG run left ``up_for_reschedule``: a poke was running when the run timed out and
    its reschedule was written after Airflow 2.11 skipped the task (seen once in CI on 2.11.2, PostgreSQL),
    plus the times the scheduler reset one as an orphan (a new try of a task with no retries for it:
    live.reset_by_scheduler), plus a reschedule-mode clear that landed while a poke ran (the task went
    ``restarting``) instead of between pokes: Airflow 2.11 let that poke's reschedule overwrite the clear, so
    the cleared try never ended and try 2 never started (seen in a rehearsal under load: the poke started 9 s
    late, at the clear). The clear's timing, not the mode, made that ending. Plus the times Airflow ran one of
    its triggers again (the same trigger ID started twice) where the scenario kills no triggerer: a triggerer
    that lost its trigger under load (its runner silent, its heartbeat withheld) before Airflow stored the
    event; the other triggerer started it afresh, so checks and pokes count Airflow's failover, not the mode
    (seen in a rehearsal of the distributed pass: a zero-worker wait fired after 4 checks, then again after 1).
    Plus, in poke and reschedule mode, a try whose next check ran past the deadline
    (:func:`checked_past_the_deadline`), where a check could still change the ending: not in a row whose
    condition is never met (``never_met``: it ends by its deadline, and the table lets its count of checks
    differ)."""
    dag_id = f"df_{scenario.group}_{mode}"
    stranded = env.query(
        "SELECT count(*) FROM task_instance ti JOIN dag_run dr ON dr.dag_id = ti.dag_id AND dr.run_id = ti.run_id "
        "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.task_id = %s AND ti.state = 'up_for_reschedule' "
        "AND dr.state IN ('success', 'failed')",
        (dag_id, run_id, scenario.name),
    )[0][0]
    reset = reset_by_scheduler(env, dag_id, run_id, scenario.name)
    cleared_mid_poke = (
        mode == "reschedule"
        and scenario.action == "clear"
        and "restarting" in env.state_history(dag_id, run_id, scenario.name)
    )
    rerun = (
        0 if scenario.action == "kill_triggerer" else triggers_started_again(env, dag_id, run_id, scenario)
    )
    late = (
        checked_past_the_deadline(env, dag_id, run_id, scenario)
        if mode in ("poke", "reschedule") and not never_met(scenario)
        else 0
    )
    return (
        lost_by_executor(env, dag_id, run_id, scenario.name)
        + int(stranded)
        + reset
        + int(cleared_mid_poke)
        + rerun
        + late
    )


_TRIGGER_START_RE = re.compile(r"\(ID (\d+)\) starting")
# A worker's announcement of its next check (sensors/poke_mode.log_not_yet) and what may follow it.
_ANNOUNCED_RE = re.compile(r"condition not met; next check #\d+ in [\d.]+s at \S+(?P<final> \(final check)?")
_DELAYED_BY_US_RE = re.compile(r"Check #\d+ runs [\d.]+s late: Airflow reschedules no sooner than")
_SENSOR_TIMEOUT = "Sensor has timed out after"


def try_logs(env: AirflowEnv, dag_id: str, run_id: str, scenario: Any) -> Iterator[tuple[int, int, str]]:
    """``(map index, try number, log)`` of every try of every task instance of the cell."""
    for map_index in scenario.cells:
        rows = env.query(
            "SELECT try_number FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s "
            "AND map_index = %s",
            (dag_id, run_id, scenario.name, map_index),
        )
        for n in range(1, int(rows[0][0] or 0) + 1 if rows else 1):
            yield map_index, n, env.task_log(dag_id, run_id, scenario.name, n, map_index)


def triggers_started_again(env: AirflowEnv, dag_id: str, run_id: str, scenario: Any) -> int:
    """How many times one of the cell's triggers started again (its ID in a second "starting" line of the
    try's trigger log): Airflow re-ran it on another triggerer."""
    again = 0
    for _, _, log in try_logs(env, dag_id, run_id, scenario):
        again += sum(count - 1 for count in Counter(_TRIGGER_START_RE.findall(log)).values())
    return again


def checked_past_the_deadline(env: AirflowEnv, dag_id: str, run_id: str, scenario: Any) -> int:
    """How many of the cell's worker tries timed out after announcing a check before the deadline that was
    not the final one: the check after it can only find no time left when it ran past the deadline. A
    sensor's schedule never does that (its last check is placed at the deadline); a starved machine does (the
    scheduler brought a reschedule-mode sensor back 60 s late: seen on 2.11.2 in a rehearsal at load 8-12; a
    poke-mode poke before the deadline ran past it). Not counted when our own minimum reschedule gap delayed
    that check."""
    late = 0
    for _, _, log in try_logs(env, dag_id, run_id, scenario):
        announced = list(_ANNOUNCED_RE.finditer(log))
        if _SENSOR_TIMEOUT not in log or not announced or announced[-1]["final"]:
            continue
        late += not _DELAYED_BY_US_RE.search(log, announced[-1].end())
    return late


def never_met(scenario: Any) -> bool:
    """Whether the row's condition answers "not yet" at every check (a scripted sensor's ``F``, repeated): it
    ends by its deadline however many checks fit before it, so a check that came late changes no ending."""
    return scenario.sensor == "scripted" and not scenario.mapped and set(scenario.script) == {"F"}


@dataclass(frozen=True)
class AllowedDifference:
    """A field that may differ from poke mode in these modes (``*``: every scenario), and why."""

    field: str
    modes: tuple[str, ...]
    scenarios: tuple[str, ...]  # ("*",) = all
    reason: str
    more_by_at_most: int | None = None  # set: the value may only exceed poke mode's, by up to this
    exactly: tuple[Any, Any] | None = None  # set: only this (poke mode's value, this mode's value)

    def covers(self, field: str, mode: str, scenario: str, want: Any, got: Any) -> bool:
        if field != self.field or mode not in self.modes:
            return False
        if "*" not in self.scenarios and scenario not in self.scenarios:
            return False
        if self.exactly is not None:
            return (want, got) == self.exactly
        return self.more_by_at_most is None or (
            isinstance(want, int) and isinstance(got, int) and 0 < got - want <= self.more_by_at_most
        )


ALLOWED_DIFFERENCES: list[AllowedDifference] = [
    AllowedDifference(
        "stats_mode",
        ("reschedule", "deferrable", "zero_worker"),
        ("*",),
        "The stats XCom names the mode that waited (`poke`, `reschedule`, `deferrable`): that is its "
        "purpose, not an ending.",
    ),
    AllowedDifference(
        "checks",
        ("reschedule", "deferrable", "zero_worker"),
        (
            "timeout",
            "timeout_soft_fail",
            "timeout_never_fail",
            "timeout_silent_fail",
            "execution_timeout",
            "dagrun_timeout",
        ),
        "A wait ended by a deadline made as many checks as its schedule fitted before it: the triggerer "
        "follows the condition's shared grid (the condition's seed, the start moved onto the poke_interval "
        "grid), reschedule mode keeps at least 5 s between checks on Airflow 3 (10 s in the matrix), and a mode that starts a "
        "process per check spends part of the window starting it. `dagrun_timeout` counts from the start "
        "of the run, not of the wait: a zero-worker wait starts with the run, a task process may start "
        "seconds later (under load after the run timed out: Airflow stops it at its next heartbeat). The "
        "ending itself (state, tries, exception) must still agree, and `checks_after_run` bounds the checks "
        "made after the run ended.",
    ),
    AllowedDifference(
        "errors",
        ("reschedule", "deferrable", "zero_worker"),
        ("clear_mid_wait",),
        "Cleared between two checks, poke mode's try 1 is a running process that the clear stops (2.11 logs "
        "`AirflowTaskTerminated`); a reschedule-mode or deferred try 1 has no process then, so nothing is "
        "stopped and nothing logged. Both end try 1 there and both succeed in try 2.",
    ),
    AllowedDifference(
        "checks",
        ("reschedule", "deferrable", "zero_worker"),
        ("clear_mid_wait",),
        "When the clear lands is the test's timing, not the mode's: try 1 makes the checks that fit before it "
        "(check #1 comes 40 s after check #0 in poke and reschedule mode, anywhere in the first 40 s on a "
        "trigger's `poke_interval` grid), and try 2 may check once before the test marks the clear done (the "
        "condition turns true then). Every such check is answered not yet; the ending (state, tries, value, "
        "no negative duration, no check after the run) must agree.",
    ),
    AllowedDifference(
        "stats_pokes",
        ("reschedule", "deferrable", "zero_worker"),
        ("clear_mid_wait",),
        "Try 2's checks: one, or two when its first check came before the test marked the clear done (see "
        "`checks` above).",
    ),
    AllowedDifference(
        "stats_pokes",
        ("deferrable", "zero_worker"),
        ("kill_triggerer",),
        "Airflow rebuilds a trigger from its kwargs only (a triggerer restart), so the checks its killed "
        "predecessor made are not known to it: `pokes` is then a lower bound, and the task log says so "
        '("checks made before it are not counted"). The checks the condition received, counted at the '
        "condition, must still agree.",
    ),
    AllowedDifference(
        "checks",
        ("deferrable", "zero_worker"),
        ("kill_triggerer",),
        "One more check, never more: a check whose answer died with the SIGKILLed triggerer (made, answer not "
        "yet stored as the trigger's event) is made again by the rebuilt trigger. Checks are at least once "
        "across a triggerer crash, never lost; the ending must agree.",
        more_by_at_most=1,
    ),
    AllowedDifference(
        "state",
        ("deferrable", "zero_worker"),
        ("timeout_never_fail",),
        "As on Airflow's base: from 3.1 its sensor skips whatever a resumed deferral raises when `never_fail` "
        "is set, its timeout included, while its poke mode fails a timeout with `never_fail` (2.11 and 3.0 "
        "fail both). The try count must still agree.",
        exactly=("failed", "skipped"),
    ),
    AllowedDifference(
        "errors",
        ("deferrable", "zero_worker"),
        ("timeout_never_fail",),
        "The skip above: the try logs `AirflowSkipException` where poke mode logs `AirflowSensorTimeout`.",
    ),
]


def cell_key(key: str, map_index: int) -> str:
    return key if map_index < 0 else f"{key}.{map_index}"


def _json(value: Any) -> Any:
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _xcom(env: AirflowEnv, dag_id: str, run_id: str, task_id: str, map_index: int, key: str) -> Any:
    rows = env.query(
        "SELECT value FROM xcom WHERE dag_id = %s AND run_id = %s AND task_id = %s AND map_index = %s "
        "AND key = %s",
        (dag_id, run_id, task_id, map_index, key),
    )
    return _json(rows[0][0]) if rows else None


def checks_dir(env: AirflowEnv) -> Path:
    return env.home / "df_checks"


def cleared_dir(env: AirflowEnv) -> Path:
    return env.home / "df_cleared"


def forget_cell(env: AirflowEnv, mode: str, scenario: Any) -> None:
    """Remove the checks and the clear mark of a cell (before it runs again in a new DAG run)."""
    for map_index in scenario.cells:
        key = cell_key(f"{mode}.{scenario.name}", map_index)
        (checks_dir(env) / key).unlink(missing_ok=True)
        (checks_dir(env) / (key + df_scenarios.LATE_SUFFIX)).unlink(missing_ok=True)
        (cleared_dir(env) / key).unlink(missing_ok=True)


def checks_made(env: AirflowEnv, key: str) -> int:
    path = checks_dir(env) / key
    return len(path.read_text().splitlines()) if path.exists() else 0


#: How long after its DAG run ended a wait may still check: Airflow stops a running task at its next
#: heartbeat and a trigger once the triggerer sees it unused (10-15 s after a dagrun_timeout on a loaded
#: 2-core machine, poke mode included); a wait that keeps checking to its own deadline (dagrun_timeout's
#: sensor: 600 s) exceeds this by far.
RUN_END_GRACE_SECONDS = 30.0


def checks_after(env: AirflowEnv, key: str, moment: Any) -> int:
    """Checks of ``key`` made more than ``RUN_END_GRACE_SECONDS`` after ``moment`` (a datetime, or None)."""
    path = checks_dir(env) / key
    if moment is None or not path.exists():
        return 0
    limit = moment.timestamp() + RUN_END_GRACE_SECONDS
    return sum(1 for line in path.read_text().splitlines() if json.loads(line)["at"] > limit)


def errors_per_try(
    env: AirflowEnv, dag_id: str, run_id: str, task_id: str, tries: int, map_index: int = -1
) -> tuple[tuple[str, ...], ...]:
    """Per try, the exception classes its log names (sorted, once each)."""
    return tuple(
        tuple(sorted(set(_ERROR_RE.findall(env.task_log(dag_id, run_id, task_id, n, map_index)))))
        for n in range(1, tries + 1)
    )


def record(env: AirflowEnv, mode: str, scenario: Any, run_id: str, map_index: int) -> Ending:
    dag_id = f"df_{scenario.group}_{mode}"
    rows = env.query_dicts(
        "SELECT state, try_number, start_date, end_date FROM task_instance WHERE dag_id = %s AND run_id = %s "
        "AND task_id = %s AND map_index = %s",
        (dag_id, run_id, scenario.name, map_index),
    )
    row = rows[0] if rows else {"state": "missing", "try_number": 0, "start_date": None, "end_date": None}
    tries = int(row["try_number"] or 0)
    errors = errors_per_try(env, dag_id, run_id, scenario.name, tries, map_index)
    stats = _xcom(env, dag_id, run_id, scenario.name, map_index, STATS_XCOM_KEY)
    stats = stats if isinstance(stats, dict) else {}
    start, end = row["start_date"], row["end_date"]
    run = env.query_dicts("SELECT end_date FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
    key = cell_key(f"{mode}.{scenario.name}", map_index)
    return Ending(
        state=row["state"],
        tries=tries,
        errors=errors,
        stats_pokes=stats.get("pokes"),
        stats_mode=stats.get("mode"),
        return_value=_xcom(env, dag_id, run_id, scenario.name, map_index, "return_value"),
        checks=checks_made(env, key),
        checks_after_run=checks_after(env, key, run[0]["end_date"] if run else None),
        negative_duration=bool(start and end and end < start),
        late_alerts=checks_made(env, key + df_scenarios.LATE_SUFFIX),
    )


Matrix = dict[tuple[str, int, str], Ending]  # (scenario, map index, mode) -> Ending


def allowed(field: str, mode: str, scenario: str, want: Any, got: Any) -> bool:
    """Whether an allowed difference covers this field's value in this cell (poke mode: ``want``)."""
    return any(a.covers(field, mode, scenario, want, got) for a in ALLOWED_DIFFERENCES)


def differences(matrix: Matrix, scenario: Any, mode: str) -> list[tuple[int, str, Any, Any, bool]]:
    """(map index, field, oracle value, this mode's value, allowed?) for every field that differs."""
    out = []
    for map_index in scenario.cells:
        oracle = asdict(matrix[(scenario.name, map_index, ORACLE)])
        seen = asdict(matrix[(scenario.name, map_index, mode)])
        for name in FIELDS:
            if oracle[name] != seen[name]:
                ok = allowed(name, mode, scenario.name, oracle[name], seen[name])
                out.append((map_index, name, oracle[name], seen[name], ok))
    return out


def render(matrix: Matrix, scenarios: list[Any] | None = None) -> str:
    """A readable table: one line per (scenario cell, mode); ``*`` marks a field that differs from poke
    mode without an allowed difference covering it."""
    lines = [" | ".join(["scenario", "mode", *FIELDS])]
    for scenario in scenarios or SCENARIOS:
        for map_index in scenario.cells:
            oracle = asdict(matrix[(scenario.name, map_index, ORACLE)])
            for mode in MODES:
                ending = asdict(matrix[(scenario.name, map_index, mode)])
                cells = []
                for name in FIELDS:
                    bad = ending[name] != oracle[name] and not allowed(
                        name, mode, scenario.name, oracle[name], ending[name]
                    )
                    cells.append(("*" if bad else "") + repr(ending[name]))
                lines.append(" | ".join([cell_key(scenario.name, map_index), mode, *cells]))
    return "\n".join(lines)


def docs_rows() -> list[tuple[str, ...]]:
    """The allowed-differences table as docs/sensors.md must show it: (field, modes, scenarios, reason)."""
    return [
        (
            f"`{a.field}`"
            + ("" if a.more_by_at_most is None else f" (+{a.more_by_at_most} at most)")
            + ("" if a.exactly is None else f" ({a.exactly[0]} → {a.exactly[1]})"),
            ", ".join(a.modes),
            ", ".join(a.scenarios),
            a.reason,
        )
        for a in ALLOWED_DIFFERENCES
    ]


def docs_table_in(text: str) -> list[tuple[str, ...]]:
    """The rows of the first Markdown table under ``DOCS_SECTION`` (header and rule dropped)."""
    section = text.split(DOCS_SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [tuple(cell.strip() for cell in row.strip("|").split(" | ")) for row in rows[2:]]
