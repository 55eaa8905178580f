"""The differential matrix's tables (issue 23) are well-formed and docs/sensors.md shows the allowed
differences exactly as the matrix applies them (tests/integration/differential.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration import differential as df
from tests.integration import live

SCRIPT_STEPS = set("FTXEPSHW")
ACTIONS = {None, "clear", "kill_triggerer"}


def test_docs_table_equals_the_allowed_differences() -> None:
    assert df.docs_table_in(df.DOCS_SENSORS.read_text()) == df.docs_rows()


@pytest.mark.parametrize("allowed", df.ALLOWED_DIFFERENCES, ids=lambda a: f"{a.field}")
def test_allowed_difference_names_real_cells(allowed: df.AllowedDifference) -> None:
    names = {s.name for s in df.SCENARIOS}
    assert allowed.field in df.FIELDS
    assert allowed.modes and set(allowed.modes) <= set(df.MODES) - {df.ORACLE}
    assert allowed.scenarios == ("*",) or set(allowed.scenarios) <= names
    assert len(allowed.reason) > 30 and "|" not in allowed.reason


@pytest.mark.parametrize("scenario", df.SCENARIOS, ids=lambda s: s.name)
def test_scenario_row_is_valid(scenario: df.Any) -> None:
    assert [s.name for s in df.SCENARIOS].count(scenario.name) == 1
    assert scenario.group in df.GROUPS and scenario.action in ACTIONS
    assert set(scenario.script) <= SCRIPT_STEPS and all(set(m) <= SCRIPT_STEPS for m in scenario.mapped)
    assert scenario.sensor in {"scripted", "sql"}
    # W (true once cleared) without a clear would wait to its timeout; a clear without W could end try 1 first
    assert ("W" in scenario.script) == (scenario.action == "clear")


def test_a_bounded_allowed_difference_allows_only_a_bounded_excess() -> None:
    """kill_triggerer's `checks`: one more than poke mode (a check repeated after the crash), never fewer."""
    assert df.allowed("checks", "zero_worker", "kill_triggerer", 6, 7)
    assert not df.allowed("checks", "zero_worker", "kill_triggerer", 6, 8)
    assert not df.allowed("checks", "zero_worker", "kill_triggerer", 6, 5)
    assert not df.allowed("checks", "reschedule", "kill_triggerer", 6, 7)
    assert not df.allowed("state", "zero_worker", "kill_triggerer", "success", "failed")


class _Log:
    """The scheduler's log, the task instances an ended DAG run left ``up_for_reschedule`` (per DAG id), and
    the cell's task's state history."""

    scheduler_names = ("scheduler",)  # one scheduler: its log is ``text``

    def __init__(
        self,
        text: str,
        stranded: dict[str, int] | None = None,
        states: list[str] | None = None,
        trigger_log: str = "",
    ) -> None:
        self.text = text
        self.stranded = stranded or {}
        self.states = states or []
        self.trigger_log = trigger_log

    def state_history(self, dag_id: str, run_id: str, task_id: str) -> list[str]:
        return self.states

    def component_log(self, name: str) -> str:
        assert name == "scheduler"
        return self.text

    def query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[int]]:
        if "SELECT try_number" in sql:  # the cell's try: its trigger log is ``trigger_log``
            return [(1,)] if self.trigger_log else []
        assert "up_for_reschedule" in sql and "dr.state IN ('success', 'failed')" in sql
        return [(self.stranded.get(params[0], 0),)]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int) -> str:
        return self.trigger_log


@pytest.mark.parametrize("state", ["queued", "scheduled", "running"])
def test_a_late_executor_event_is_recognised_whatever_state_it_met(state: str) -> None:
    """The scheduler's "finished with state success, but ... is <state>" (apache/airflow #71172 and kin) for
    this cell's task instance counts as an infrastructure loss; other tasks' and runs' lines do not."""
    run = "manual__2026-11-26T05:11:08.296056+00:00"
    line = (
        "[error    ] Executor LocalExecutor(parallelism=10) reported that the task instance <TaskInstance: "
        f"df_main_reschedule.{{task}} {{run}} [{state}] ti_id=01a2> finished with state success, but the task "
        f"instance's state attribute is {state}. Learn more\n"
    )
    scenario = next(s for s in df.SCENARIOS if s.name == "true_after_3")
    text = line.format(task="true_after_3", run=run) + line.format(task="true_at_once", run=run)
    text += line.format(task="true_after_3", run=run.replace("05:11", "06:11"))
    assert df.infra_failures(_Log(text), "reschedule", scenario, run) == 1  # type: ignore[arg-type]
    assert df.infra_failures(_Log(text), "poke", scenario, run) == 0  # type: ignore[arg-type]


def test_a_task_left_up_for_reschedule_by_an_ended_run_counts_as_an_infrastructure_loss() -> None:
    """A poke running when its run timed out wrote its reschedule after Airflow 2.11 skipped the task: the
    cell proves nothing either way and is run again (counted with the late executor events)."""
    scenario = next(s for s in df.SCENARIOS if s.name == "true_after_3")
    run = "manual__2026-11-28T01:07:47+00:00"
    log = _Log("", {"df_main_reschedule": 1})
    assert df.infra_failures(log, "reschedule", scenario, run) == 1  # type: ignore[arg-type]
    assert df.infra_failures(log, "poke", scenario, run) == 0  # type: ignore[arg-type]


def test_a_task_instance_the_scheduler_reset_as_an_orphan_counts_as_an_infrastructure_loss() -> None:
    """The scheduler's "Reset the following N orphaned TaskInstances" naming this cell's task instance (a new
    try of a task with no retries for it) counts; other tasks' and runs' instances in the block do not."""
    run = "manual__2026-11-30T06:03:30+00:00"
    scenario = next(s for s in df.SCENARIOS if s.name == "mapped")
    text = (
        "2026-11-30T07:16:39.579106Z [info     ] Reset the following 3 orphaned TaskInstances:\n"
        f"\t<TaskInstance: df_main_poke.true_after_3 {run} [running] ti_id=019a>\n"
        f"\t<TaskInstance: df_main_zero_worker.mapped {run} map_index=1 [queued] ti_id=019b>\n"
        f"\t<TaskInstance: df_main_poke.mapped {run.replace('06:03', '07:03')} map_index=0 [running] ti_id=019c>"
        " [airflow.jobs.scheduler_job_runner.SchedulerJobRunner] loc=scheduler_job_runner.py:3377\n"
    )
    assert df.infra_failures(_Log(text), "zero_worker", scenario, run) == 1  # type: ignore[arg-type]
    assert df.infra_failures(_Log(text), "poke", scenario, run) == 0  # type: ignore[arg-type]


def test_a_late_executor_event_is_told_per_map_index() -> None:
    """``lost_by_executor(map_index=…)`` counts that mapped instance's line only; -1 an unmapped one's."""
    run = "manual__2026-11-30T07:53:33.783088+00:00"
    line = (
        "[error    ] Executor CeleryExecutor(parallelism=32) reported that the task instance <TaskInstance: "
        f"ds_modes.{{task}} {run} {{index}}[queued] ti_id=01a2> finished with state failed, but the task "
        "instance's state attribute is queued. Learn more\n"
    )
    log = _Log(line.format(task="mapped", index="map_index=1 ") + line.format(task="plain", index=""))
    counts = [live.lost_by_executor(log, "ds_modes", run, "mapped", i) for i in (None, 0, 1, -1)]  # type: ignore[arg-type]
    assert counts == [1, 0, 1, 0]
    assert [live.lost_by_executor(log, "ds_modes", run, "plain", i) for i in (None, -1, 0)] == [1, 1, 0]  # type: ignore[arg-type]


def test_a_reschedule_clear_that_hit_a_running_poke_counts_as_an_infrastructure_loss() -> None:
    """clear_mid_wait's clear is meant to land between reschedule pokes; one that hit a running poke (the task
    went ``restarting``; Airflow 2.11 then let the poke's reschedule overwrite it, on try 1) proves nothing.
    Poke mode is always running when cleared: its history never counts, nor a clear between pokes."""
    run = "manual__2026-11-30T08:16:16.455757+00:00"
    cleared = next(s for s in df.SCENARIOS if s.action == "clear")
    hit = [
        "scheduled",
        "queued",
        "running",
        "up_for_reschedule",
        "queued",
        "running",
        "restarting",
        "success",
    ]
    between = ["scheduled", "queued", "running", "up_for_reschedule", None, "scheduled", "running", "success"]
    assert df.infra_failures(_Log("", states=hit), "reschedule", cleared, run) == 1  # type: ignore[arg-type]
    assert df.infra_failures(_Log("", states=hit), "poke", cleared, run) == 0  # type: ignore[arg-type]
    assert df.infra_failures(_Log("", states=between), "reschedule", cleared, run) == 0  # type: ignore[arg-type]
    other = next(s for s in df.SCENARIOS if s.name == "true_after_3")
    assert df.infra_failures(_Log("", states=hit), "reschedule", other, run) == 0  # type: ignore[arg-type]


def test_a_trigger_airflow_started_again_counts_as_an_infrastructure_loss() -> None:
    """The same trigger ID starting twice in a try's log (another triggerer re-ran it after the first lost
    it) counts, once per extra start; a second deferral's new trigger does not, nor a scenario that kills a
    triggerer on purpose (its differences are allowed by name)."""
    run = "manual__2026-11-30T09:44:43.041435+00:00"
    line = "[2026-11-30T09:44:47Z] INFO - trigger df_main_zero_worker/{run}/true_after_3/-1/1 (ID {id}) starting\n"
    twice = line.format(run=run, id=34) * 2
    scenario = next(s for s in df.SCENARIOS if s.name == "true_after_3")
    assert df.infra_failures(_Log("", trigger_log=twice), "zero_worker", scenario, run) == 1  # type: ignore[arg-type]
    two_deferrals = line.format(run=run, id=34) + line.format(run=run, id=35)
    assert df.infra_failures(_Log("", trigger_log=two_deferrals), "deferrable", scenario, run) == 0  # type: ignore[arg-type]
    killed = next(s for s in df.SCENARIOS if s.action == "kill_triggerer")
    assert df.infra_failures(_Log("", trigger_log=twice), "zero_worker", killed, run) == 0  # type: ignore[arg-type]


def test_a_worker_try_whose_next_check_ran_past_the_deadline_counts_as_an_infrastructure_loss() -> None:
    """A worker try that timed out right after announcing a check that was not the final one: the check ran
    past the deadline (a starved scheduler or process). Not when the last announced check was the final one
    (the schedule ran out, as it should), nor when our own minimum reschedule gap made that check late, nor
    in the deferrable modes."""
    run = "manual__2026-11-30T12:33:23.690155+00:00"
    scenario = next(s for s in df.SCENARIOS if s.name == "true_after_3")
    announce = "Poke #{n} (check #{n}): condition not met; next check #{k} in 9.000s at 2026-11-30T12:34:{k}0.000+00:00"
    timeout = "AirflowSensorTimeout: Sensor has timed out after 3 poke(s) and 96.1s (timeout 90s)."
    starved = "\n".join([announce.format(n=1, k=2), announce.format(n=2, k=3), timeout])
    for mode in ("reschedule", "poke"):
        assert df.infra_failures(_Log("", trigger_log=starved), mode, scenario, run) == 1  # type: ignore[arg-type]
    assert df.infra_failures(_Log("", trigger_log=starved), "deferrable", scenario, run) == 0  # type: ignore[arg-type]
    ran_out = "\n".join([announce.format(n=1, k=2) + " (final check, at the timeout)", timeout])
    ours = "\n".join(
        [
            announce.format(n=1, k=2),
            "Check #2 runs 2.000s late: Airflow reschedules no sooner than 3s",
            timeout,
        ]
    )
    met = "\n".join([announce.format(n=1, k=2), "Success criteria met"])
    for log in (ran_out, ours, met):
        assert df.infra_failures(_Log("", trigger_log=log), "reschedule", scenario, run) == 0  # type: ignore[arg-type]
    # A row whose condition is never met ends by its deadline whatever checks fit: a late check changes no
    # ending (a rehearsal at load 6-11 saw 2 reschedule checks in 8 s in all 3 DAG runs of these rows).
    never = [s for s in df.SCENARIOS if df.never_met(s)]
    assert {s.name for s in never} >= {
        "timeout",
        "timeout_soft_fail",
        "timeout_never_fail",
        "timeout_silent_fail",
    }
    for ended_by_deadline in never:
        for mode in ("reschedule", "poke"):
            assert df.infra_failures(_Log("", trigger_log=starved), mode, ended_by_deadline, run) == 0  # type: ignore[arg-type]
    assert not any(
        df.never_met(s) for s in df.SCENARIOS if s.name in ("true_after_3", "clear_mid_wait", "mapped")
    )
