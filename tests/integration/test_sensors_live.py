"""BackoffSensor and BackoffSqlSensor in a real Airflow (poke and reschedule mode).

DAGs: tests/integration/dags/sn_file_dags.py, sn_sql_dags.py (classes and criteria in sn_sensors.py).
The test process creates each condition (a file, a row) while the sensor is waiting, and checks the
outcome, the absence of retries, and that the pokes happened at the times of ``airflow_smart_ext.backoff``
for the task's seed (parsed from the task log).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from airflow_harness.env import AirflowEnv
from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from tests.integration.live import (
    SQLITE_CONN_ID,
    add_connection_fields,
    epoch,
    policy_for,
    seed_of,
    sensor_log,
    sqlite_db,
    sqlite_exec,
    start_run,
    ti_row,
    unique,
    wait_ti_state,
)

PG_CONN_ID = "sn_pg"

# "Poke #2 (check #1): condition not met; next check #2 in 1.234s at 2026-01-01T00:00:01.234+00:00"
NOT_MET_RE = re.compile(
    r"Poke #(?P<poke>\d+) \(check #(?P<index>\d+)\): condition not met; next check #(?P<next>\d+) "
    r"in [\d.]+s at (?P<at>\d{4}-\d\d-\d\dT[\d:.]+\+00:00)(?P<final> \(final check, at the timeout\))?"
)
POKE_RE = re.compile(r"sn-poke at=(?P<at>[\d.]+) where=(?P<where>\w+)")
TIMED_OUT_RE = re.compile(r"Sensor has timed out after (?P<pokes>\d+) poke\(s\) and (?P<waited>[\d.]+)s")


def implied_anchors(log: str, policy: BackoffPolicy, seed: str, timeout: float) -> list[float]:
    """``started_at`` implied by each announced check: ``at - offset(seed, index)``; the final check sits
    exactly at the timeout, ``at - timeout``."""
    return [
        epoch(m["at"]) - (timeout if m["final"] else policy.offset(seed, int(m["next"])))
        for m in NOT_MET_RE.finditer(log)
    ]


def assert_schedule(
    log: str,
    policy: BackoffPolicy,
    seed: str,
    slack_after: float,
    timeout: float,
    first_anchor_slack: float = 0.0,
) -> list[tuple[int, float]]:
    """Every announced next check is ``started_at + policy.offset(seed, index)`` for ONE ``started_at``
    (the final one ``started_at + timeout``), and each following poke happened at that time (not before,
    at most ``slack_after`` later).

    Returns [(index, scheduled epoch)]."""
    announced = [(int(m["next"]), epoch(m["at"])) for m in NOT_MET_RE.finditer(log)]
    assert announced, f"no 'condition not met' lines in the log:\n{log[-3000:]}"
    anchors = implied_anchors(log, policy, seed, timeout)
    if first_anchor_slack:
        # Reschedule mode: poke #1 predicts the first TaskReschedule row's start_date (3.x: when the
        # reschedule is reported, right after the run raises; 2.11: the TI's start_date) and later pokes
        # read it. Only the reporting latency may separate the first announcement from the others.
        assert abs(anchors[0] - anchors[-1]) <= first_anchor_slack, anchors
        anchors = anchors[1:] or anchors
    assert max(anchors) - min(anchors) < 0.01, (
        f"poke times do not follow one schedule of the policy for this seed: implied started_at {anchors}; "
        f"announced {announced}"
    )
    indices = [index for index, _ in announced]
    assert indices == sorted(set(indices)), f"check indices not strictly increasing: {indices}"
    pokes = [float(m["at"]) for m in POKE_RE.finditer(log)]
    assert len(pokes) == len(announced) + 1, f"{len(pokes)} pokes for {len(announced)} announced checks"
    for (index, scheduled), actual in zip(announced, pokes[1:], strict=True):
        assert scheduled - 0.05 <= actual <= scheduled + slack_after, (
            f"check #{index} scheduled at {scheduled:.3f} but poked at {actual:.3f} ({actual - scheduled:+.3f}s)"
        )
    return announced


def wait_log(env: AirflowEnv, dag_id: str, run_id: str, task_id: str, text: str, timeout: float = 120) -> str:
    """Until the task log contains ``text`` (the sensor really checked; task start-up can take seconds)."""
    deadline = time.monotonic() + timeout
    log = ""
    while time.monotonic() < deadline:
        log = env.task_log(dag_id, run_id, task_id)
        if text in log:
            return log
        env.check_components()
        time.sleep(0.3)
    raise AssertionError(f"{text!r} not in the log of {dag_id}.{task_id} within {timeout}s:\n{log[-3000:]}")


# ---------------------------------------------------------------------------- custom sensor
# As in sn_file_dags.py: mode -> (policy, max lateness of a poke, max shift of the first anchor, timeout of
# the *_timeout DAG).
MODES = {
    "poke": (policy_for(1.0, 4.0), 1.0, 0.0, 15),
    # a reschedule waits for a scheduler loop and a free executor slot (2.11 SQLite: one task at a time)
    "reschedule": (policy_for(3.0, 6.0, jitter="none", splay=0.0), 60.0, 2.5, 12),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_custom_sensor_succeeds_when_file_arrives_on_schedule(
    airflow_env: AirflowEnv, tmp_path: Path, mode: str
) -> None:
    env = airflow_env
    dag_id = f"sn_file_{mode}"
    target = tmp_path / "arrived.csv"
    run_id = start_run(env, dag_id, {"path": str(target)})
    wait_ti_state(env, dag_id, run_id, "wait", {"running", "up_for_reschedule"})
    time.sleep(12)  # several checks of the backoff schedule
    target.write_text("id\n1\n")
    assert env.wait_run(dag_id, run_id, timeout=120) == "success"

    row = ti_row(env, dag_id, run_id, "wait")
    assert row is not None and row["state"] == "success" and row["try_number"] == 1
    log = sensor_log(env, dag_id, run_id, "wait")
    assert "Success criteria met" in log
    policy, slack, first, _ = MODES[mode]
    announced = assert_schedule(log, policy, seed_of(dag_id, "wait", run_id), slack, 90, first)

    assert len(announced) >= 2, announced
    if mode == "reschedule":
        assert "up_for_reschedule" in env.state_history(dag_id, run_id, "wait")


LATE_RE = re.compile(
    r"Late: (?P<wait>\S+) was due at (?P<due>\S+) \((?P<rule>[^)]*)\) and is \S+ late; check #(?P<index>\d+)"
)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_late_wait_says_so_once_then_waits_on_and_succeeds(
    airflow_env: AirflowEnv, tmp_path: Path, mode: str
) -> None:
    env = airflow_env
    dag_id = f"sn_file_{mode}_late"  # due 8 s after the run's reference instant (sn_file_dags.py)
    target, told_path = tmp_path / "late.csv", tmp_path / "late.jsonl"
    run_id = start_run(env, dag_id, {"path": str(target), "late_path": str(told_path)})
    wait_log(env, dag_id, run_id, "wait", "Late: ")
    time.sleep(10)  # more checks after the one that said it: none says it again
    target.write_text("id\n1\n")
    assert env.wait_run(dag_id, run_id, timeout=120) == "success"

    row = ti_row(env, dag_id, run_id, "wait")
    assert row is not None and row["state"] == "success" and row["try_number"] == 1, row
    told = [json.loads(line) for line in told_path.read_text().splitlines()]
    log = sensor_log(env, dag_id, run_id, "wait")
    said = list(LATE_RE.finditer(log))
    assert len(told) == 1 and len(said) == 1, (told, [m.group(0) for m in said])
    (late,) = told
    assert late["wait"] == f"{dag_id}.wait" and late["try_number"] == 1
    assert said[0]["due"] == late["due"] and said[0]["rule"] == "8s after data_interval_end"
    due = epoch(late["due"])
    run = env.dag_run(dag_id, run_id)  # a 3.x manual run may have no data interval: its run_after then
    reference = (run["data_interval_end"] or run["run_after"]).timestamp()
    assert abs(due - 8 - reference) < 0.002, (late, run)  # due is in ms
    assert late["at"] >= due and late["late_by_seconds"] >= 0
    announced = {int(m["next"]): epoch(m["at"]) for m in NOT_MET_RE.finditer(log)}
    index = int(late["check"])
    assert index == int(said[0]["index"]) and any(i > index for i in announced), announced  # it waited on
    if mode == "poke":
        # The check that said it is the first one scheduled at or after the due time (as the log announced
        # them). Reschedule mode numbers a try's runs, which a reschedule Airflow brings back late may skip
        # ahead of: it says it once, at or after the due time (above).
        assert index == 0 or announced[index] >= due, (index, announced, due)
        assert all(at < due for i, at in announced.items() if i < index), (index, announced, due)


#: A due time of day on three calendars (a DAG file written by the test: the due day is today's, or tomorrow's
#: when LEAD_SECONDS cross midnight UTC). ``every_day`` and ``make_up`` (its weekday is the calendar's weekend,
#: but the day is a make-up working day) are due then; ``holiday`` (the day made a holiday) is due a day later.
DUE_DAYS_DAG = """
import datetime as dt

from airflow import DAG
from sn_sensors import LATE_WAIT, FileArrivedSensor, record_late

from airflow_smart_ext.calendars import BusinessCalendar
from airflow_smart_ext.timetables import DueTime

CALENDARS = {
    "every_day": None,
    "holiday": BusinessCalendar(weekend=[], extra_holidays=["<day>"]),
    "make_up": BusinessCalendar(weekend=[<weekday>], extra_business_days=["<day>"]),
}
with DAG("sn_due_days", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), catchup=False):
    for name, calendar in CALENDARS.items():
        FileArrivedSensor(
            task_id=name, mode="reschedule", due=DueTime("<at>", calendar=calendar), on_late=record_late, **LATE_WAIT
        )
"""
#: Seconds from writing that DAG file to its due time: parsing it and starting the run on a loaded machine.
LEAD_SECONDS = 75.0


def test_a_due_time_of_day_moves_with_a_holiday_and_stays_on_a_make_up_day(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    env = airflow_env
    due = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=LEAD_SECONDS)).replace(microsecond=0)
    source = tmp_path / "sn_due_days.py"
    text = DUE_DAYS_DAG.replace("<at>", due.strftime("%H:%M:%S")).replace("<day>", due.date().isoformat())
    source.write_text(text.replace("<weekday>", str(due.weekday())))
    env.add_dag_file(source)
    target, told_path = tmp_path / "due.csv", tmp_path / "due.jsonl"
    run_id = start_run(env, "sn_due_days", {"path": str(target), "late_path": str(told_path)})
    run = env.dag_run("sn_due_days", run_id)  # a 3.x manual run may have no data interval: its run_after then
    reference = (run["data_interval_end"] or run["run_after"]).timestamp()
    assert reference < due.timestamp(), f"the run began after its due time: raise LEAD_SECONDS={LEAD_SECONDS}"

    def told() -> list[dict[str, Any]]:
        return [json.loads(line) for line in told_path.read_text().splitlines()] if told_path.exists() else []

    deadline = due.timestamp() + 90
    while {late["wait"] for late in told()} != {"sn_due_days.every_day", "sn_due_days.make_up"}:
        assert time.time() < deadline, ("no alert of every_day and make_up", told())
        time.sleep(1)
    time.sleep(
        12
    )  # two more checks of each (max_wait 6 s): the holiday still says nothing, nor again the others
    target.write_text("id\n1\n")
    assert env.wait_run("sn_due_days", run_id, timeout=120) == "success"

    alerts = {late["wait"].split(".")[1]: late for late in told()}
    assert sorted(alerts) == ["every_day", "make_up"] and len(told()) == 2, told()
    for name, late in alerts.items():
        assert epoch(late["due"]) == due.timestamp(), (name, late, due)
        assert late["at"] >= due.timestamp() and late["try_number"] == 1, (name, late)
        said = sensor_log(env, "sn_due_days", run_id, name).count(f"Late: sn_due_days.{name} was due at ")
        assert said == 1, (name, said)  # (its rule names the calendar, in parentheses of its own)
    assert "Late: " not in sensor_log(env, "sn_due_days", run_id, "holiday")
    for name in ("every_day", "holiday", "make_up"):
        row = ti_row(env, "sn_due_days", run_id, name)
        assert row is not None and row["state"] == "success" and row["try_number"] == 1, row


#: Two reschedule-mode sensors due at one time (a DAG file the test writes). ``early``'s try 1 fails at once,
#: before the due time, and its retry starts after it; ``told``'s try 1 says it is late, then fails.
DUE_RETRY_DAG = """
import datetime as dt

from airflow import DAG
from sn_sensors import LATE_WAIT, FailingTryFileSensor, record_late

from airflow_smart_ext.timetables import DueTime

WAIT = {**LATE_WAIT, "retries": 1, "mode": "reschedule", "due": DueTime("<at>"), "on_late": record_late}
with DAG("sn_due_retry", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), catchup=False):
    FailingTryFileSensor(task_id="early", **{**WAIT, "retry_delay": <retry_delay>})
    FailingTryFileSensor(task_id="told", fail_when_told=True, **WAIT)
"""


def test_a_retry_says_late_once_for_the_task_instance_as_its_task_state_store_says(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    """Airflow 3.3 keeps what a try said in the task state store, which its retries read: ``early``'s retry,
    after the due time, says it (try 1 ended before it, saying nothing); ``told``'s retry does not say it
    again. Before 3.3 there is no such store: a retry that starts after the due time takes it as said, so
    ``early`` says nothing (docs/late-data.md, "Not yet")."""
    env = airflow_env
    due = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=LEAD_SECONDS)).replace(microsecond=0)
    source = tmp_path / "sn_due_retry.py"
    text = DUE_RETRY_DAG.replace("<at>", due.strftime("%H:%M:%S"))
    source.write_text(text.replace("<retry_delay>", str(LEAD_SECONDS + 10)))
    env.add_dag_file(source)
    target, told_path = tmp_path / "retry.csv", tmp_path / "retry.jsonl"
    run_id = start_run(env, "sn_due_retry", {"path": str(target), "late_path": str(told_path)})
    run = env.dag_run("sn_due_retry", run_id)  # a 3.x manual run may have no data interval: its run_after
    reference = (run["data_interval_end"] or run["run_after"]).timestamp()
    assert reference < due.timestamp(), f"the run began after its due time: raise LEAD_SECONDS={LEAD_SECONDS}"

    def told() -> list[dict[str, Any]]:
        return [json.loads(line) for line in told_path.read_text().splitlines()] if told_path.exists() else []

    def retries_checked() -> bool:
        """Both tasks' try 2 made two checks (the first of each is the one that would say it is late)."""
        for task in ("early", "told"):
            row = ti_row(env, "sn_due_retry", run_id, task)
            if row is None or row["try_number"] != 2:
                return False
            if len(POKE_RE.findall(env.task_log("sn_due_retry", run_id, task, 2))) < 2:
                return False
        return True

    env.poll(retries_checked, LEAD_SECONDS + 300, lambda: f"two checks of both retries ({told()})")
    target.write_text("id\n1\n")
    assert env.wait_run("sn_due_retry", run_id, timeout=120) == "success"
    said = sorted((late["wait"].split(".")[1], late["try_number"]) for late in told())
    expected = [("early", 2), ("told", 1)] if compat.task_state.TASK_STATE_STORE_SUPPORTED else [("told", 1)]
    assert said == expected, told()
    for late in told():
        assert epoch(late["due"]) == due.timestamp() and late["resent"] is False, late
    for task in ("early", "told"):
        row = ti_row(env, "sn_due_retry", run_id, task)
        assert row is not None and row["state"] == "success" and row["try_number"] == 2, row


#: The zero-worker twin of ``DUE_RETRY_DAG``: each check runs in the triggerer, where no try is known, so a
#: try fails at a check while the test's marker file exists; arguments are literal (2.11 renders none there).
DUE_RETRY_ZERO_WORKER_DAG = """
import datetime as dt

from airflow import DAG
from sn_sensors import LATE_WAIT, FailingTryFileSensor, record_late

from airflow_smart_ext.timetables import DueTime

WAIT = {**LATE_WAIT, "path": "<path>", "retries": 1, "deferrable": True, "due": DueTime("<at>"), "on_late": record_late}
with DAG("sn_due_retry_zw", schedule=None, start_date=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), catchup=False):
    for name, delay in (("early", <retry_delay>), ("told", 10)):
        FailingTryFileSensor(task_id=name, fail_marker=f"<dir>/{name}.fail", counter_path=f"<dir>/{name}.checks",
                             **{**WAIT, "retry_delay": delay})
"""


def test_a_zero_worker_retry_says_late_once_as_its_task_state_store_says(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    """A zero-worker retry after the due time: its trigger cannot read the task state store, so on 3.3 its first
    check past the due time resumes the task on a worker, which says it only if no earlier try did (``early``,
    whose try 1 failed before the due time) and not again for ``told`` (its try 1 said it, then failed). Before
    3.3 such a retry takes it as said (docs/late-data.md). Both retries run in the triggerer from their start."""
    env = airflow_env
    due = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=LEAD_SECONDS)).replace(microsecond=0)
    source = tmp_path / "sn_due_retry_zw.py"
    target, told_path = tmp_path / "retry_zw.csv", tmp_path / "retry_zw.jsonl"
    text = DUE_RETRY_ZERO_WORKER_DAG.replace("<at>", due.strftime("%H:%M:%S")).replace("<dir>", str(tmp_path))
    source.write_text(text.replace("<path>", str(target)).replace("<retry_delay>", str(LEAD_SECONDS + 10)))
    env.add_dag_file(source)
    early_fail, told_fail = tmp_path / "early.fail", tmp_path / "told.fail"
    early_fail.touch()  # early's try 1 fails at its first check, before the due time
    run_id = start_run(env, "sn_due_retry_zw", {"late_path": str(told_path)})
    run = env.dag_run("sn_due_retry_zw", run_id)
    reference = (run["data_interval_end"] or run["run_after"]).timestamp()
    assert reference < due.timestamp(), f"the run began after its due time: raise LEAD_SECONDS={LEAD_SECONDS}"

    def told() -> list[dict[str, Any]]:
        return [json.loads(line) for line in told_path.read_text().splitlines()] if told_path.exists() else []

    def waiting_to_retry(task: str) -> bool:
        row = ti_row(env, "sn_due_retry_zw", run_id, task)
        assert row is None or row["state"] != "failed", sensor_log(env, "sn_due_retry_zw", run_id, task)
        return row is not None and row["state"] == "up_for_retry"

    env.poll(lambda: waiting_to_retry("early"), 120, lambda: "early's try 1 to fail at its first check")
    retried = {"early": time.time()}
    env.poll(lambda: any(late["wait"].endswith(".told") for late in told()), LEAD_SECONDS + 120, told)
    told_fail.touch()  # told's try 1 fails at its next check, after its alert
    env.poll(lambda: waiting_to_retry("told"), 120, lambda: "told's try 1 to fail after its alert")
    retried["told"] = time.time()
    assert not early_fail.exists() and not told_fail.exists()  # each removed by the check that failed

    def retry_checks(task: str) -> list[dict[str, Any]]:
        """The checks made since its try 1 failed: the retry's."""
        checks = tmp_path / f"{task}.checks"  # a check that failed wrote none
        lines = checks.read_text().splitlines() if checks.exists() else []
        return [check for check in map(json.loads, lines) if check["at"] > retried[task]]

    def retries_checked_twice() -> bool:
        return all(len(retry_checks(task)) >= 2 for task in retried)

    env.poll(retries_checked_twice, LEAD_SECONDS + 300, lambda: f"two checks of both retries ({told()})")
    for task in retried:  # each retry began in the triggerer (no worker made its check #0)
        assert retry_checks(task)[0]["where"] == "triggerer", retry_checks(task)
        row = ti_row(env, "sn_due_retry_zw", run_id, task)
        assert row is not None and row["try_number"] == 2, row
        # 3.3: its first check past the due time resumed it on a worker, which read the record (told's: said)
        resumed = "Trigger finished: status=late" in env.task_log("sn_due_retry_zw", run_id, task, 2)
        assert resumed is compat.task_state.TASK_STATE_STORE_SUPPORTED, sensor_log(
            env, "sn_due_retry_zw", run_id, task
        )
    target.write_text("id\n1\n")
    assert env.wait_run("sn_due_retry_zw", run_id, timeout=120) == "success"
    said = sorted((late["wait"].split(".")[1], late["try_number"]) for late in told())
    expected = [("early", 2), ("told", 1)] if compat.task_state.TASK_STATE_STORE_SUPPORTED else [("told", 1)]
    assert said == expected, told()
    for late in told():
        assert epoch(late["due"]) == due.timestamp() and late["resent"] is False, late


def test_mapped_sensor_runs_each_expanded_instance(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    env = airflow_env
    target = tmp_path / "mapped.csv"
    run_id = start_run(env, "sn_file_mapped", {"path": str(target)})
    Path(f"{target}.a").write_text("a\n")
    Path(f"{target}.b").write_text("b\n")
    assert env.wait_run("sn_file_mapped", run_id, timeout=120) == "success"
    rows = [row for row in env.task_instances("sn_file_mapped", run_id) if row["task_id"] == "wait"]
    assert sorted((row["map_index"], row["state"]) for row in rows) == [(0, "success"), (1, "success")]
    for map_index, suffix in ((0, ".a"), (1, ".b")):
        log = env.task_log("sn_file_mapped", run_id, "wait", map_index=map_index)
        assert "equal jitter" in log and "Success criteria met" in log, log[-2000:]
        assert f"path={target}{suffix}" in log  # the expanded, rendered argument


@pytest.mark.parametrize("mode", list(MODES))
def test_custom_sensor_times_out_without_retry_or_skips_with_soft_fail(
    airflow_env: AirflowEnv, tmp_path: Path, mode: str
) -> None:
    env = airflow_env
    dag_id = f"sn_file_{mode}_timeout"
    run_id = start_run(env, dag_id, {"path": str(tmp_path / "never.csv")})
    assert env.wait_run(dag_id, run_id, timeout=180) == "failed"

    hard = ti_row(env, dag_id, run_id, "wait")
    soft = ti_row(env, dag_id, run_id, "wait_soft")
    assert hard is not None and soft is not None
    # retries=2 on both: a sensor timeout is never retried.
    assert (hard["state"], hard["try_number"]) == ("failed", 1), hard
    assert (soft["state"], soft["try_number"]) == ("skipped", 1), soft
    hard_log = sensor_log(env, dag_id, run_id, "wait")
    assert "Sensor has timed out" in hard_log and "AirflowSensorTimeout" in hard_log
    assert "Skipping (soft_fail=True)" in sensor_log(env, dag_id, run_id, "wait_soft")
    policy, slack, first, timeout = MODES[mode]
    announced = assert_schedule(hard_log, policy, seed_of(dag_id, "wait", run_id), slack, timeout, first)
    if mode == "poke":
        assert_final_check_at_the_timeout(
            hard_log, policy, seed_of(dag_id, "wait", run_id), timeout, announced
        )


def assert_final_check_at_the_timeout(
    log: str, policy: BackoffPolicy, seed: str, timeout: float, announced: Sequence[tuple[int, float]]
) -> None:
    """Poke mode places the last check exactly at the timeout -- unless the check before it, scheduled
    before the deadline, ran past it (a late start or a slow poke under load: seen in CI), which leaves no
    time for another check. (In reschedule mode a slow scheduler -- 2.11's SequentialExecutor runs one
    task at a time -- may bring the sensor back only after the deadline, so it is not asserted there.)"""
    if "(final check, at the timeout)" in log:
        return
    deadline = implied_anchors(log, policy, seed, timeout)[0] + timeout
    last_scheduled = announced[-1][1]
    ended = TIMED_OUT_RE.search(log)
    assert ended is not None, log[-3000:]
    pokes = len(POKE_RE.findall(log))
    # The message's wait is measured after the last poke: past the timeout (to its one decimal), the poke
    # ran past the deadline.
    assert last_scheduled < deadline and int(ended["pokes"]) == pokes and float(ended["waited"]) >= timeout, (
        f"no final check at the timeout, yet the last check (#{announced[-1][0]}, scheduled "
        f"{last_scheduled:.3f}, deadline {deadline:.3f}) did not end past the deadline:\n{log[-3000:]}"
    )


# ---------------------------------------------------------------------------- SQL sensor
def sql_conf(conn_id: str, sql: str, params: Any) -> dict[str, Any]:
    return {"conn_id": conn_id, "sql": sql, "params": params}


def test_sql_sensor_detects_row_that_appears_later(airflow_env: AirflowEnv) -> None:
    env = airflow_env
    db = sqlite_db(env)
    table = unique("batches")
    sqlite_exec(db, f"CREATE TABLE {table} (name TEXT, status TEXT)")
    sqlite_exec(db, f"INSERT INTO {table} VALUES ('other', 'done')")
    conf = sql_conf(SQLITE_CONN_ID, f"SELECT status FROM {table} WHERE name = :name", {"name": "evening"})
    run_id = start_run(env, "sn_sql_poke", conf)
    wait_log(env, "sn_sql_poke", run_id, "wait", "No rows returned yet")
    sqlite_exec(db, f"INSERT INTO {table} VALUES ('evening', 'pending')")  # a row, but not done yet
    wait_log(env, "sn_sql_poke", run_id, "wait", "success('pending') returned False")
    sqlite_exec(db, f"UPDATE {table} SET status = 'done' WHERE name = 'evening'")
    assert env.wait_run("sn_sql_poke", run_id, timeout=120) == "success"
    log = sensor_log(env, "sn_sql_poke", run_id, "wait")
    assert "No rows returned yet" in log
    assert "success('pending') returned False" in log
    assert "Success criteria met: success('done') returned True" in log
    assert_schedule_sql(log, "sn_sql_poke", run_id)


def assert_schedule_sql(log: str, dag_id: str, run_id: str) -> None:
    anchors = implied_anchors(log, policy_for(1.0, 3.0), seed_of(dag_id, "wait", run_id), 90)
    assert anchors, log[-3000:]
    assert max(anchors) - min(anchors) < 0.01, anchors


def test_sql_sensor_failure_criterion_fails_fast_without_retry(airflow_env: AirflowEnv) -> None:
    env = airflow_env
    db = sqlite_db(env)
    table = unique("jobs")
    sqlite_exec(db, f"CREATE TABLE {table} (id INTEGER, status TEXT)")
    sqlite_exec(db, f"INSERT INTO {table} VALUES (7, 'error')")
    conf = sql_conf(SQLITE_CONN_ID, f"SELECT status FROM {table} WHERE id = ?", [7])
    started = time.monotonic()
    run_id = start_run(env, "sn_sql_poke", conf)
    assert env.wait_run("sn_sql_poke", run_id, timeout=120) == "failed"
    row = ti_row(env, "sn_sql_poke", run_id, "wait")
    assert row is not None and (row["state"], row["try_number"]) == ("failed", 1), row  # retries=2 unused
    assert row["duration"] is not None and row["duration"] < 30, row  # not the 90 s timeout
    log = sensor_log(env, "sn_sql_poke", run_id, "wait")
    assert "Failure criteria met: failure('error') returned True" in log
    assert "AirflowFailException" in log
    assert time.monotonic() - started < 90


def test_sql_sensor_binds_malicious_parameter(airflow_env: AirflowEnv) -> None:
    env = airflow_env
    db = sqlite_db(env)
    table = unique("items")
    sqlite_exec(db, f"CREATE TABLE {table} (name TEXT)")
    sqlite_exec(db, f"INSERT INTO {table} VALUES ('innocent')")
    # Formatted into the SQL this would match every row at once (and try to drop the table).
    evil = f"nope' OR '1'='1'; DROP TABLE {table}; --"
    conf = sql_conf(SQLITE_CONN_ID, f"SELECT COUNT(*) FROM {table} WHERE name = :name", {"name": evil})
    run_id = start_run(env, "sn_sql_poke", conf)
    # The injected OR does not match anything: the sensor keeps waiting.
    wait_log(env, "sn_sql_poke", run_id, "wait", "success(0) returned False")
    sqlite_exec(db, f"INSERT INTO {table} VALUES (?)", [evil])  # the literal value arrives
    assert env.wait_run("sn_sql_poke", run_id, timeout=120) == "success"
    assert "success(1) returned True" in sensor_log(env, "sn_sql_poke", run_id, "wait")
    assert sqlite_exec(db, f"SELECT COUNT(*) FROM {table}") == [(2,)]  # table intact


def test_sql_sensor_against_postgres(airflow_env: AirflowEnv) -> None:
    env = airflow_env
    if not env.uses_postgres:
        pytest.skip("the env runs on SQLite (set SMART_EXT_TEST_PG_DSN for the PostgreSQL variant)")
    import psycopg2

    dsn = env.sql_alchemy_conn.replace("postgresql+psycopg2://", "postgresql://", 1)
    table = unique("sn_pg_batches")

    def pg(sql: str, params: Sequence[Any] = ()) -> None:
        conn = psycopg2.connect(dsn)
        try:
            with conn, conn.cursor() as cur:
                cur.execute(sql, tuple(params))
        finally:
            conn.close()

    pg(f"CREATE TABLE {table} (name TEXT, status TEXT)")
    if not getattr(env, "_sn_pg_ready", False):
        url = urlsplit(dsn)
        add_connection_fields(
            env,
            PG_CONN_ID,
            "postgres",
            host=url.hostname,
            port=url.port,
            login=url.username and unquote(url.username),
            password=url.password and unquote(url.password),
            schema=url.path.lstrip("/"),
        )
        env._sn_pg_ready = True  # type: ignore[attr-defined]
    evil = "x' OR '1'='1"
    conf = sql_conf(PG_CONN_ID, f"SELECT status FROM {table} WHERE name = %(name)s", {"name": evil})
    run_id = start_run(env, "sn_sql_poke", conf)
    pg(f"INSERT INTO {table} VALUES ('innocent', 'done')")
    wait_log(env, "sn_sql_poke", run_id, "wait", "No rows returned yet")
    pg(f"INSERT INTO {table} VALUES (%s, 'done')", [evil])
    assert env.wait_run("sn_sql_poke", run_id, timeout=120) == "success"
    log = sensor_log(env, "sn_sql_poke", run_id, "wait")
    assert "No rows returned yet" in log and "success('done') returned True" in log
    pg(f"DROP TABLE {table}")
