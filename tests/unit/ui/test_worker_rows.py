"""The Waits view's worker-side waits: a poke or reschedule sensor with a due time is a row, late or not."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.timetables import DueTime
from airflow_smart_ext.ui import waits_page, worker_rows
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from airflow_smart_ext.ui.watchers_report import add_watchers
from airflow_smart_ext.ui.worker_rows import RESCHEDULE, WORKER, WorkerWait
from airflow_smart_ext.wait_model import late_told
from airflow_smart_ext.waits import render_text
from tests.unit.ui.helpers import NOW, sql_check, worker_first

UTC = datetime.timezone.utc


def _utc(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, UTC)


def _iso(epoch: float) -> str:
    return _utc(epoch).isoformat(timespec="milliseconds")


def worker_wait(
    task_id: str = "w", path: str = RESCHEDULE, due_after: float = 600.0, **extra: Any
) -> WorkerWait:
    """A wait whose run's data interval ended an hour before ``NOW``, due ``due_after`` seconds after that."""
    fields: dict[str, Any] = {
        "dag_id": "d",
        "run_id": "run",
        "task_id": task_id,
        "map_index": -1,
        "try_number": 1,
        "path": path,
        "sensor_class": "BackoffSqlSensor",
        "due": DueTime(after=due_after),
        "instants": {"data_interval_end": _utc(NOW - 3600)},
        "try_started_at": NOW - 3500,
        "hostname": None,
    }
    return WorkerWait(**{**fields, **extra})


def report(*workers: WorkerWait, waits: tuple[Any, ...] = (), **params: str) -> dict[str, Any]:
    return build_report(waits, WaitsQuery.from_params(params), NOW, workers=workers)


def test_a_rescheduled_wait_past_its_due_time_is_a_late_row_with_its_reschedule_as_next_check() -> None:
    late = worker_wait(next_check=NOW + 30)
    result = report(late)
    [row] = result["waits"]
    assert row["path"] == "reschedule" and row["checks_made"] is None  # not known (a splayed first run)
    assert row["due"] == _iso(NOW - 3000) and row["late_by"] == 3000.0 and row["due_in"] == -3000.0
    assert row["late_alerted"] is None  # said by a check in the worker: not known here
    assert row["next_check"] == _iso(NOW + 30) and row["next_check_in"] == 30.0
    assert row["deadline"] is None and row["shared_with"] == 1 and row["sharing_key_hash"] is None
    assert row["worker_host"] is None and row["served_by"] is None and row["unserved_reason"] is None
    assert row["started_at"] == _iso(NOW - 3500) and row["last_check"] is None
    assert result["groups"] == [] and result["summary"]["late"] == 1 and result["summary"]["waits"] == 1
    assert report(late, late="true")["total"] == 1


def test_a_running_check_not_yet_due_is_a_row_the_late_filter_leaves_out() -> None:
    running = worker_wait(path=WORKER, due_after=7200.0, hostname="worker-7")
    [row] = report(running)["waits"]
    assert row["path"] == "worker" and row["worker_host"] == "worker-7"
    assert row["due_in"] == 3600.0 and row["late_by"] is None and row["late_alerted"] is None
    assert row["next_check"] is None and row["checks_made"] is None
    assert report(running, late="true")["total"] == 0 and report(running)["summary"]["late"] == 0


def test_a_worker_wait_sorts_by_due_time_among_trigger_rows_and_filters_by_dag_and_class() -> None:
    deferred = worker_first(sql_check(), task_id="deferred")
    trigger_row = dataclasses.replace(deferred, kwargs={**deferred.kwargs, "due_at": NOW - 1000.0})
    workers = (worker_wait("early", due_after=100.0), worker_wait("later", due_after=5000.0))
    rows = report(*workers, waits=(trigger_row,), sort="due")["waits"]
    assert [row["task_id"] for row in rows] == ["early", "deferred", "later"]
    assert report(*workers, sensor_class="BackoffSqlSensor")["total"] == 2
    assert report(*workers, dag_id="other")["total"] == 0
    assert report(*workers, conn_id="warehouse")["total"] == 0  # a worker-side wait names no connection


def test_a_wait_read_deferred_and_then_running_is_one_row() -> None:
    """The two reads are not one snapshot: a wait resumed between them is its trigger row's alone."""
    deferred = worker_first(sql_check(), task_id="w")
    rows = report(worker_wait(path=WORKER, hostname="worker-7"), waits=(deferred,))["waits"]
    assert [row["path"] for row in rows] == ["worker-first"]


def test_a_due_time_its_calendar_cannot_compute_still_shows_the_wait() -> None:
    far = worker_wait(
        due=DueTime("09:30", market="NYSE"), instants={"data_interval_end": _utc(4_200_000_000)}
    )
    [row] = report(far)["waits"]
    assert row["task_id"] == "w" and row["due"] is None and row["late_by"] is None


def test_the_page_and_the_cli_say_a_worker_wait_checks_in_a_worker() -> None:
    result = report(
        worker_wait("poking", path=WORKER, hostname="worker-7"),
        worker_wait("resched", next_check=NOW + 30),
    )
    page = waits_page.render_waits(result, WaitsQuery(), lambda row: "/task")
    assert "a worker on worker-7" in page and "in the worker (its own poke_interval)" in page
    assert "its timeout (not known here)" in page and "alert: see the task&#x27;s log" in page
    assert 'id="late-alert"' in page
    text = render_text(add_watchers(result, [], None, NOW))
    lines = {line.split()[2]: line for line in text.splitlines() if line.startswith("d ")}
    assert "worker@worker-7" in lines["poking"] and "LATE by" in lines["poking"]
    assert "alert: see its log" in lines["resched"] and "worker@" not in lines["resched"]
    header = text.splitlines()[0]
    shared, checks, served = (header.index(name) for name in ("SHARED", "CHECKS", "SERVED BY"))
    row = lines["resched"]
    assert (row[shared:checks].strip(), row[checks:served].strip()) == ("1", "-")  # checks made: not known


@pytest.mark.parametrize(
    ("record", "try_number", "alerted", "words"),
    [
        ({"due": _iso(NOW - 3000), "telling": False, "try": 1}, 1, True, "alert sent"),
        ({"due": _iso(NOW - 3000), "telling": False, "try": 1}, 2, True, "alert sent"),  # a retry's: told
        (
            {"due": _iso(NOW - 3000), "telling": True, "try": 2},
            2,
            True,
            "alert sent",
        ),  # said, "told" not kept
        (
            {"due": _iso(NOW - 3000), "telling": True, "try": 1},
            2,
            False,
            "alert at its next check",
        ),  # cut short
        (
            {"due": _iso(NOW - 9000), "telling": False, "try": 1},
            1,
            False,
            "alert at its next check",
        ),  # another due
        (None, 1, False, "alert at its next check"),  # none written yet
        ({"__airflow_state_ref__": "s3://x"}, 1, None, "alert: see the task&#x27;s log"),  # kept by reference
        (late_told.NOT_READ, 1, None, "alert: see the task&#x27;s log"),  # the store could not give it
    ],
)
def test_a_worker_wait_s_alert_is_as_its_task_state_store_record_says(
    record: Any, try_number: int, alerted: bool | None, words: str
) -> None:
    late = worker_wait(store_read=True, late_record=record, try_number=try_number)
    result = report(late)
    [row] = result["waits"]
    assert row["late_by"] == 3000.0 and row["late_alerted"] is alerted
    assert f"({words})" in waits_page.render_waits(result, WaitsQuery(), lambda row: "/task")
    cli = {True: "(alerted)", False: "(alert due)", None: "(alert: see its log)"}[alerted]
    assert cli in render_text(add_watchers(result, [], None, NOW))


def test_a_worker_wait_not_yet_due_has_no_alert_to_tell_whatever_its_store() -> None:
    [row] = report(worker_wait(due_after=7200.0, store_read=True))["waits"]
    assert row["late_by"] is None and row["late_alerted"] is False
    [row] = report(worker_wait(due_after=7200.0))["waits"]
    assert row["late_alerted"] is None  # before 3.3: not known


def test_reschedule_mode_is_read_from_an_unmapped_and_a_mapped_serialized_task() -> None:
    dag = {
        "tasks": [
            {"__var": {"task_id": "flag", "reschedule": True}, "__type": "operator"},
            {"__var": {"task_id": "mapped", "partial_kwargs": {"mode": "reschedule"}}, "__type": "operator"},
            {"__var": {"task_id": "poke", "reschedule": False}, "__type": "operator"},
            {"__var": {"task_id": "mapped_poke", "partial_kwargs": {"mode": "poke"}}, "__type": "operator"},
        ]
    }
    assert worker_rows.reschedule_task_ids(dag) == {"flag", "mapped"}


# ---- from the metadata DB ---------------------------------------------------------------------------------


@pytest.fixture(params=["up_for_reschedule", "queued"])
def worker_db(calendars_db: Any, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Task instances of ``cal_business``'s run ``scheduled__2`` (its data interval ended 2026-11-19 05:00
    UTC): ``trades`` (reschedule mode, due 09:30 New York) up for reschedule, or queued for its next check, on
    try 2 after two reschedules (and one of try 1 on 2.11, whose rows carry the try), ``prices[1]`` running on a worker,
    ``no_due`` (no due time) running, ``prices[0]`` deferred (a trigger row's, not a worker's), ``prices[2]``
    scheduled for its try's first check (not waiting yet). A reschedule of another try: on 2.11 try 1's, on
    3.x one of another TI id (``no_due``'s): not counted."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import delete, insert, select

    base = datetime.datetime(2026, 11, 19, 12, tzinfo=UTC)
    tis = [
        ("trades", -1, request.param, 2, "worker-3"),  # the host of its last check: not serving it now
        ("prices", 1, "running", 1, "worker-7"),
        ("prices", 0, "deferred", 1, None),
        ("prices", 2, "scheduled", 1, None),
        ("no_due", -1, "running", 1, "worker-7"),
        ("fx", 1, "running", 1, "worker-7"),  # its own due time, from .expand(due=[...])
    ]
    with create_session() as session:
        for task_id, map_index, state, try_number, host in tis:
            ti = {
                "dag_id": "cal_business",
                "run_id": "scheduled__2",
                "task_id": task_id,
                "map_index": map_index,
                "try_number": try_number,
                "state": state,
                "start_date": base,
                "hostname": host or "",
                "operator": "BackoffSqlSensor",
                "pool": "default_pool",
                "pool_slots": 1,
            }
            session.execute(insert(TaskInstance.__table__).values(**ti))
        hour = datetime.timedelta(hours=1)
        reschedules = [
            (1, base - hour, base - hour + datetime.timedelta(minutes=10)),  # another try's
            (2, base, base + datetime.timedelta(minutes=5)),
            (2, base + datetime.timedelta(minutes=5), base + datetime.timedelta(minutes=15)),
        ]
        for try_number, start, until in reschedules:
            row: dict[str, Any] = {"start_date": start, "end_date": start, "duration": 0}
            row["reschedule_date"] = until
            key = {"dag_id": "cal_business", "run_id": "scheduled__2", "task_id": "trades", "map_index": -1}
            if compat.versions.AIRFLOW_V_3_0_PLUS:  # a try's rows carry its TI id (new per try on 3.x)
                if try_number == 1:
                    key["task_id"] = "no_due"  # an id that is not trades' try 2's
                row["ti_id"] = session.scalar(select(TaskInstance.id).filter_by(**key))
            else:
                row.update(key, try_number=try_number)
            session.execute(insert(TaskReschedule.__table__).values(**row))
        told = {"due": "2026-11-19T14:30:00.000+00:00", "telling": False, "try": 1}
        if compat.task_state.TASK_STATE_STORE_SUPPORTED:  # try 1 said it was late (as late_record writes it)
            from airflow.state import TaskScope, get_state_backend

            scope = TaskScope(dag_id="cal_business", run_id="scheduled__2", task_id="trades", map_index=-1)
            get_state_backend().set(scope, "smart_ext_late", json.dumps(told), session=session)
            scope = TaskScope(dag_id="cal_business", run_id="scheduled__2", task_id="prices", map_index=1)
            get_state_backend().set(scope, "smart_ext_late", "not JSON", session=session)  # not ours to read
    yield {"base": base, "told": told}
    with create_session() as session:
        if compat.task_state.TASK_STATE_STORE_SUPPORTED:
            from airflow.models.task_state_store import TaskStateStoreModel

            session.execute(delete(TaskStateStoreModel.__table__))
        session.execute(delete(TaskReschedule.__table__))
        session.execute(delete(TaskInstance.__table__).where(TaskInstance.dag_id == "cal_business"))


def test_the_source_reads_worker_waits_with_a_due_time_and_their_tries_reschedules(
    worker_db: dict[str, Any],
) -> None:
    from airflow.utils.session import create_session

    from airflow_smart_ext.ui.waits_source import load_worker_waits

    base = worker_db["base"].timestamp()
    with create_session() as session:
        waits = {(wait.task_id, wait.map_index): wait for wait in load_worker_waits(session, None)}
        assert load_worker_waits(session, []) == []
        assert load_worker_waits(session, ["cal_cron"]) == []
        assert len(load_worker_waits(session, ["cal_business"])) == 3
    # no due time, deferred, or not waiting yet: not a worker-side row
    assert set(waits) == {("trades", -1), ("prices", 1), ("fx", 1)}
    trades, prices = waits["trades", -1], waits["prices", 1]
    assert trades.path == RESCHEDULE and trades.try_number == 2 and trades.hostname is None
    assert trades.next_check == base + 900  # this try's last reschedule date
    assert trades.try_started_at == base  # this try's first reschedule's start (not try 1's)
    assert prices.path == RESCHEDULE and prices.next_check is None and prices.hostname == "worker-7"
    assert prices.try_started_at == base
    rows = {row["task_id"]: row for row in report(*waits.values())["waits"]}
    # 09:30 New York on the first NYSE session at or after the data interval's end (Thu 2026-11-19 05:00 UTC)
    assert rows["trades"]["due"] == "2026-11-19T14:30:00.000+00:00"
    assert rows["trades"]["next_check"] == _iso(base + 900)
    # T+1 UK business day at 07:00 London: Fri 2026-11-20
    assert rows["prices"]["due"] == "2026-11-20T07:00:00.000+00:00"
    assert (
        rows["fx"]["due"] == "2026-11-19T07:00:00.000+00:00"
    )  # fx[1]'s 16:00 Tokyo, not fx[0]'s 08:00 London
    assert json.dumps(rows)  # JSON-ready
    # before 3.3 no store: not known; on 3.3 the record the try wrote, or not read (prices[1]'s is not JSON)
    store = compat.task_state.TASK_STATE_STORE_SUPPORTED
    assert trades.store_read is store and prices.store_read is store
    assert trades.late_record == (worker_db["told"] if store else None)
    assert prices.late_record is (late_told.NOT_READ if store else None)
    assert (
        rows["trades"]["late_alerted"] is (True if store else None) and rows["prices"]["late_alerted"] is None
    )
    assert waits["fx", 1].late_record is None  # none written: not told yet


def test_a_state_backend_of_its_own_is_read_per_task_instance_and_one_read_that_fails_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``[state_store] backend`` other than the metadata DB's: one read per task instance, each in a session
    of its own; one that fails is logged and left out (its row: not known), the others read."""
    wanted = [("d", "r", "told", -1), ("d", "r", "none", -1), ("d", "r", "broken", -1)]
    if not compat.task_state.TASK_STATE_STORE_SUPPORTED:  # before 3.3: no store
        assert compat.task_state.task_state_values(wanted, late_told.KEY) == {}
        return
    import airflow.state
    from airflow import settings

    sessions = []

    class Backend:  # not MetastoreBackend
        def get(self, scope: Any, key: str, *, session: Any = None) -> str | None:
            sessions.append(session)
            assert key == late_told.KEY
            if scope.task_id == "broken":
                raise RuntimeError("the store is away")
            return None if scope.task_id == "none" else json.dumps({"due": "x", "telling": False, "try": 1})

    monkeypatch.setattr(airflow.state, "get_state_backend", Backend)
    values = compat.task_state.task_state_values(wanted, late_told.KEY)
    assert values == {wanted[0]: {"due": "x", "telling": False, "try": 1}, wanted[1]: None}
    # each read in a session of its own, not the thread's (which a caller may hold)
    assert len(sessions) == 3 and None not in sessions and settings.Session() not in sessions
