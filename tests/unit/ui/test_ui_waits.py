"""The Waits view's data (issue 26): grouping, next checks, filters, redaction, the DB source, the CLI."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet

from airflow_smart_ext import compat, secret_kwargs
from airflow_smart_ext.backoff import BackoffPolicy, aligned_start, condition_seed
from airflow_smart_ext.conditions import sharing_key
from airflow_smart_ext.triggers.worker_first import CLASSPATH as WORKER_FIRST
from airflow_smart_ext.triggers.zero_worker import CLASSPATH as ZERO_WORKER
from airflow_smart_ext.ui.query_params import InvalidQuery
from airflow_smart_ext.ui.serving import Triggerer, Triggerers
from airflow_smart_ext.ui.trigger_rows import LiveWait
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from airflow_smart_ext.wait_model import late_told
from tests.unit.helpers import KeyedFernet
from tests.unit.ui.helpers import NOW, POLICY, sensor_check, sql_check, worker_first

SECRET = "pw-4e1d-never-shown"  # a rendered password: sealed under a name the masker hides
MASKED = "reg-77c2-never-shown"  # registered with the masker (as a rendered connection password is)


def zero_worker(
    check: dict[str, Any],
    fields: dict[str, Any],
    *,
    dag_id: str = "z",
    started: float = NOW - 300,
    **extra: Any,
) -> LiveWait:
    in_spec = check["kwargs"] if check["type"] == "sensor" else check
    prefix = ["kwargs"] if check["type"] == "sensor" else []
    start = {
        "check": {**check, **({"kwargs": dict(in_spec)} if prefix else {})},
        "fields": {name: [*prefix, name] for name in fields},
        "policy": extra.pop("policy", POLICY),
        "timeout": extra.pop("timeout", 3600.0),
        "execution_timeout": None,
        "backstop_seconds": 3660.0,
        "share": True,
    }
    if "kwargs_due" in extra:
        start["due"] = extra.pop("kwargs_due")
    kwargs = {"start": start, **fields}
    return LiveWait(
        dag_id, "run", extra.pop("task_id", "t"), -1, 1, ZERO_WORKER, kwargs, started, started, **extra
    )


def report(*waits: LiveWait, **params: str) -> dict[str, Any]:
    return build_report(waits, WaitsQuery.from_params(params), NOW)


def by_task(result: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["dag_id"], row["task_id"]): row for row in result["waits"]}


# ---- grouping --------------------------------------------------------------------------------------------


def test_identical_conditions_share_one_group_and_different_ones_do_not() -> None:
    result = report(
        worker_first(sql_check(), task_id="a"),
        worker_first(sql_check(), task_id="b", started=NOW - 100),
        zero_worker(sql_check(), {}, dag_id="z", task_id="c"),  # the same check on the other path
        worker_first(sql_check("SELECT other FROM t"), task_id="d"),
        worker_first(sql_check(conn_id="lake"), task_id="e"),
    )
    rows = by_task(result)
    same = {rows[("d", "a")]["sharing_key_hash"], rows[("d", "b")]["sharing_key_hash"]}
    assert same == {rows[("z", "c")]["sharing_key_hash"]}
    assert rows[("d", "a")]["shared_with"] == 3
    assert rows[("d", "d")]["shared_with"] == rows[("d", "e")]["shared_with"] == 1
    assert len({row["sharing_key_hash"] for row in result["waits"]}) == 3
    groups = {group["sharing_key_hash"]: group for group in result["groups"]}
    shared = groups[rows[("d", "a")]["sharing_key_hash"]]
    assert shared["tasks"] == 3 and shared["condition"] == "SQL on warehouse: SELECT ok FROM t"
    # three waits on one check: one check serves them all
    assert shared["checks_per_hour_shared"] < shared["checks_per_hour_unshared"]
    summary = result["summary"]
    assert summary["groups"] == 3 and summary["waits"] == 5
    assert summary["checks_saved_per_hour"] == pytest.approx(
        summary["checks_per_hour_unshared"] - summary["checks_per_hour_shared"], abs=0.01
    )
    assert {item["conn_id"] for item in result["connections"]} == {"warehouse", "lake"}


def test_a_sensor_condition_names_its_class_and_connection() -> None:
    row = report(worker_first(sensor_check(filepath="/data/in.csv", fs_conn_id="nfs")))["waits"][0]
    assert row["check_type"] == "sensor" and row["conn_id"] == "nfs"
    assert row["sensor_class"] == "airflow.providers.standard.sensors.filesystem.FileSensor"
    assert row["condition"] == "FileSensor(filepath='/data/in.csv', fs_conn_id='nfs') for 2026-09-21"


# ---- the schedule ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("jitter", ["none", "full", "equal", "decorrelated"])
@pytest.mark.parametrize("elapsed", [5.0, 700.0, 3590.0, 3700.0])
def test_the_next_check_is_the_pure_schedule(jitter: str, elapsed: float) -> None:
    policy = {**POLICY, "jitter": jitter, "splay": 30.0}
    first = worker_first(sql_check(), started=NOW - elapsed, policy=policy)
    zero = zero_worker(
        sensor_check(fs_conn_id="nfs"), {"filepath": "/in"}, started=NOW - elapsed, policy=policy
    )
    rows = by_task(report(first, zero))
    pure = BackoffPolicy.from_dict(policy)

    kwargs = first.kwargs
    expected = pure.next_check(kwargs["seed"], kwargs["started_at"], NOW, kwargs["deadline"], after=0)
    assert rows[("d", "t")]["next_check_in"] == (None if expected is None else round(expected.at - NOW, 3))
    assert rows[("d", "t")]["deadline_in"] == round(kwargs["deadline"] - NOW, 3)

    # zero-worker: the triggerer's seed (the condition, run dates included), anchor and deadline
    check = sensor_check(fs_conn_id="nfs", filepath="/in")
    check["context"] = {"dag_id": "z", "task_id": "t", "run_id": "run", "map_index": -1, "try_number": 1}
    check["context"].update(
        dict.fromkeys(("ds", "ts", "logical_date", "data_interval_start", "data_interval_end"))
    )
    started = NOW - elapsed
    seed = condition_seed(sharing_key(check))
    expected = pure.next_check(seed, aligned_start(started, 60.0), NOW, started + 3600.0, after=0)
    row = rows[("z", "t")]
    assert row["next_check_in"] == (None if expected is None else round(expected.at - NOW, 3))
    assert row["next_check_exact"] is True and row["path"] == "zero-worker"
    if expected is not None:
        assert row["next_check"] == datetime.datetime.fromtimestamp(
            expected.at, datetime.timezone.utc
        ).isoformat(timespec="milliseconds")
        assert (
            row["checks_made"] >= 1
            and row["last_outcome"] == "none recorded yet"
            and row["last_check"] is None
        )


def test_checks_made_counts_the_scheduled_checks_due() -> None:
    policy = {**POLICY, "jitter": "none"}  # checks at 0, 60, 180, 420, 900, 1500, ... after the anchor
    started = 1_789_999_200.0  # on the minute grid: the anchor is the start itself
    rows = by_task(
        report(
            worker_first(sql_check(), started=started, policy=policy),
            zero_worker(sql_check(), {}, started=started, policy=policy),
        )
    )
    assert NOW - started == 800.0
    assert rows[("d", "t")]["checks_made"] == 4  # #0 (on the worker) .. #3
    assert rows[("z", "t")]["checks_made"] == 4  # #0 at the start, then #1 .. #3 in the triggerer


def test_a_decorrelated_schedule_is_replayed_only_within_the_reports_budget() -> None:
    policy: dict[str, Any] = {
        "initial": 1.0,
        "factor": 2.0,
        "cap": 10.0,
        "jitter": "decorrelated",
        "splay": 0.0,
    }
    long_wait = worker_first(sql_check(), task_id="long", started=NOW - 2_000_000, timeout=3e6, policy=policy)
    short_wait = worker_first(sql_check("SELECT 2"), task_id="short", started=NOW - 600, policy=policy)
    rows = by_task(report(long_wait, short_wait))
    # ~2,000,000 checks to replay: over the budget -- no next check, a cheap lower bound (each sleep <= cap)
    assert rows[("d", "long")]["next_check"] is None
    assert rows[("d", "long")]["checks_made"] == int((NOW - long_wait.kwargs["started_at"]) / 10.0)
    kwargs = short_wait.kwargs
    expected = BackoffPolicy.from_dict(policy).next_check(
        kwargs["seed"], kwargs["started_at"], NOW, kwargs["deadline"], after=0
    )
    assert expected is not None and rows[("d", "short")]["next_check_in"] == round(expected.at - NOW, 3)


def test_a_templated_zero_worker_field_is_marked_as_estimated() -> None:
    row = report(zero_worker(sql_check(), {"sql": "SELECT ok FROM t WHERE ds = '{{ ds }}'"}))["waits"][0]
    assert row["next_check_exact"] is False
    assert row["condition"] == "SQL on warehouse: SELECT ok FROM t WHERE ds = '{{ ds }}'"


# ---- filters, sort, limit, query errors ------------------------------------------------------------------


def waits_for_filters() -> list[LiveWait]:
    return [
        worker_first(sql_check(), dag_id="a", task_id="soon", started=NOW - 60, timeout=7200.0),
        worker_first(sql_check("SELECT 2"), dag_id="a", task_id="late", started=NOW - 3000, timeout=3100.0),
        worker_first(sensor_check(fs_conn_id="nfs"), dag_id="b", task_id="file", started=NOW - 2000),
    ]


def test_filters_by_dag_connection_sensor_class_and_due_within() -> None:
    waits = waits_for_filters()
    assert {r["task_id"] for r in build_report(waits, WaitsQuery(dag_id="a"), NOW)["waits"]} == {
        "soon",
        "late",
    }
    assert {r["task_id"] for r in build_report(waits, WaitsQuery(conn_id="nfs"), NOW)["waits"]} == {"file"}
    for name in ("FileSensor", "airflow.providers.standard.sensors.filesystem.FileSensor"):
        assert [r["task_id"] for r in build_report(waits, WaitsQuery(sensor_class=name), NOW)["waits"]] == [
            "file"
        ]
    everything = build_report(waits, WaitsQuery(), NOW)["waits"]
    cut = sorted(row["next_check_in"] for row in everything)[1]
    due = build_report(waits, WaitsQuery(due_within=cut), NOW)
    assert due["total"] == 2 and all(row["next_check_in"] <= cut for row in due["waits"])
    assert {g["tasks"] for g in due["groups"]} == {1} and due["summary"]["waits"] == 2


def test_sort_by_next_check_or_deadline_and_limit() -> None:
    waits = waits_for_filters()
    by_next = build_report(waits, WaitsQuery(), NOW)["waits"]
    assert [row["next_check_in"] for row in by_next] == sorted(row["next_check_in"] for row in by_next)
    by_deadline = build_report(waits, WaitsQuery(sort="deadline"), NOW)["waits"]
    assert [row["task_id"] for row in by_deadline] == ["late", "file", "soon"]
    limited = build_report(waits, WaitsQuery(sort="deadline", limit=2), NOW)
    assert limited["total"] == 3 and [row["task_id"] for row in limited["waits"]] == ["late", "file"]


def test_query_parameters_are_parsed_and_empty_ones_ignored() -> None:
    query = WaitsQuery.from_params(
        {"dag_id": "a", "conn_id": "", "due_within": "90.5", "sort": "deadline", "limit": "7"}
    )
    assert query == WaitsQuery(dag_id="a", due_within=90.5, sort="deadline", limit=7)


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"due_within": "-1"}, ["due_within", ">= 0"]),
        ({"due_within": "soon"}, ["due_within", "seconds"]),
        ({"due_within": "nan"}, ["due_within"]),
        *(
            ({"due_within": text}, ["due_within", "ASCII digits"])
            for text in ("٣٠", "５", "1_000", "1e3", "inf", ".5")
        ),
        *(({"limit": text}, ["limit", "whole number"]) for text in ("٣٠", "５", "1_000", "1e3", "2.0")),
        ({"sort": "name"}, ["sort", "next_check, deadline"]),
        ({"limit": "0"}, ["limit", "1 to 100000"]),
        ({"limit": "100001"}, ["limit", "1 to 100000"]),
        ({"limit": "ten"}, ["limit", "1 to 100000"]),
        ({"limit": "\u00b2"}, ["limit", "1 to 100000"]),  # a digit to str.isdigit, not to int()
        ({"limit": "9" * 5000}, ["limit", "1 to 100000"]),  # past int()'s digit limit
        ({"dag": "a"}, ["'dag'", "dag_id, conn_id, sensor_class, due_within, sort, limit"]),
    ],
)
def test_a_bad_parameter_is_named_with_its_accepted_values(params: dict[str, str], names: list[str]) -> None:
    with pytest.raises(InvalidQuery) as raised:
        WaitsQuery.from_params(params)
    assert isinstance(raised.value, ValueError)
    assert all(name in str(raised.value) for name in names), str(raised.value)


def test_an_unreadable_row_is_shown_without_breaking_the_report() -> None:
    broken = LiveWait("d", "r", "t", -1, 1, WORKER_FIRST, {"check": {"type": "sql"}}, NOW, NOW)
    result = report(broken, worker_first(sql_check(), task_id="ok"))
    rows = by_task(result)
    assert rows[("d", "t")]["condition"].startswith("unreadable trigger kwargs")
    assert rows[("d", "ok")]["next_check"] is not None


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({}, id="no-kwargs-at-all"),  # what the source gives a row it cannot decrypt
        pytest.param({"deadline": 1e13}, id="deadline-past-year-9999"),
        pytest.param({"deadline": float("inf"), "policy": {**POLICY, "jitter": "decorrelated"}}, id="inf"),
        pytest.param({"rate_limit": "fast"}, id="non-numeric-rate-limit"),
    ],
)
def test_no_row_breaks_the_report_whatever_its_kwargs(broken: dict[str, Any]) -> None:
    kwargs = {**worker_first(sql_check()).kwargs, **broken} if broken else {}
    odd = LiveWait("d", "r", "odd", -1, 1, WORKER_FIRST, kwargs, NOW, NOW)
    result = report(odd, worker_first(sql_check(), task_id="ok"))
    rows = by_task(result)
    assert rows[("d", "ok")]["next_check"] is not None
    json.dumps(result)  # and the JSON can be written
    if not broken:
        assert rows[("d", "odd")]["condition"].startswith("unreadable trigger kwargs")


def test_a_connection_without_its_own_rate_limit_shows_the_configured_one() -> None:
    waits = [worker_first(sql_check(conn_id="a")), worker_first(sql_check(conn_id="b"), rate_limit=0.5)]
    result = build_report(waits, WaitsQuery(), NOW, default_rate_limit=2.0)
    assert {c["conn_id"]: c["rate_limit"] for c in result["connections"]} == {"a": 2.0, "b": 0.5}


def test_a_long_decorrelated_wait_has_a_next_check_however_far_its_deadline() -> None:
    policy = {**POLICY, "initial": 5.0, "jitter": "decorrelated"}
    wait = worker_first(sql_check(), started=NOW - 60, timeout=7 * 86400.0, policy=policy)
    row = by_task(report(wait))[("d", "t")]
    kwargs = wait.kwargs
    expected = BackoffPolicy.from_dict(policy).next_check(
        kwargs["seed"], kwargs["started_at"], NOW, kwargs["deadline"], after=0
    )
    assert expected is not None and row["next_check_in"] == round(expected.at - NOW, 3)


# ---- who serves each wait ----------------------------------------------------------------------------------

LIVE = Triggerer(7, "host-a", NOW - 3.0)
THRESHOLD = 30.0  # Airflow's default [triggerer] triggerer_health_check_threshold


@pytest.mark.parametrize("path", ["worker-first", "zero-worker"])
@pytest.mark.parametrize(
    ("held", "live", "served_by", "reason"),
    [
        pytest.param(
            {"triggerer_id": 7, "holder": LIVE},
            (LIVE,),
            {"job_id": 7, "hostname": "host-a", "heartbeat_age": 3.0},
            None,
            id="live-holder",
        ),
        pytest.param(
            {"triggerer_id": 8, "holder": Triggerer(8, "host-b", NOW - THRESHOLD + 0.5)},
            (LIVE,),
            {"job_id": 8, "hostname": "host-b", "heartbeat_age": 29.5},
            None,
            id="holder-just-within-the-threshold",
        ),
        pytest.param(
            {},
            (LIVE,),
            None,
            "no triggerer holds its trigger yet: none of the 1 live triggerer(s) took it",
            id="no-holder",
        ),
        pytest.param(
            {},
            (),
            None,
            "no triggerer holds its trigger and none is alive (a heartbeat within 30s)",
            id="no-holder-no-triggerer-alive",
        ),
        pytest.param(
            {"trigger_queue": "gpu"},
            (LIVE,),
            None,
            "took it from queue 'gpu' (a triggerer takes it only when started with --queues gpu)",
            id="no-holder-for-its-queue",
        ),
        pytest.param(
            {"trigger_team": "sales"},
            (LIVE,),
            None,
            "took it from team 'sales' (only a triggerer of that team takes it)",
            id="no-holder-for-its-team",
        ),
        pytest.param(
            {"triggerer_id": 5, "holder": Triggerer(5, "host-c", NOW - THRESHOLD)},
            (LIVE,),
            None,
            "its triggerer (job 5 on host-c) is dead: last heartbeat 30s ago, over Airflow's 30s "
            "([triggerer] triggerer_health_check_threshold)",
            id="dead-holder-at-the-threshold",  # Airflow: alive only while newer than now - threshold
        ),
        pytest.param(
            {"triggerer_id": 5, "holder": Triggerer(5, None, NOW - 600)},
            (),
            None,
            "its triggerer (job 5) is dead: last heartbeat 600s ago",
            id="dead-holder",
        ),
        pytest.param(
            {"triggerer_id": 6, "holder": Triggerer(6, "host-d", NOW - 1.0, ended=True)},
            (LIVE,),
            None,
            "its triggerer (job 6 on host-d) has shut down",
            id="ended-holder",
        ),
        pytest.param(
            {"triggerer_id": 9},
            (LIVE,),
            None,
            "its triggerer (job 9) is gone from the job table",
            id="holder-gone",
        ),
    ],
)
def test_who_serves_a_wait(
    path: str, held: dict[str, Any], live: tuple[Triggerer, ...], served_by: Any, reason: str | None
) -> None:
    if path == "worker-first":
        wait = worker_first(sql_check(), **held)
    else:
        wait = zero_worker(sensor_check(fs_conn_id="nfs"), {"filepath": "/in"}, **held)
    unknown = by_task(report(wait))[(wait.dag_id, "t")]
    result = build_report([wait], WaitsQuery(), NOW, None, Triggerers(THRESHOLD, live))
    row = by_task(result)[(wait.dag_id, "t")]
    assert row["path"] == path
    assert row["served_by"] == served_by
    if reason is None:
        assert row["unserved_reason"] is None and result["summary"]["unserved"] == 0
    else:
        assert reason in row["unserved_reason"] and result["summary"]["unserved"] == 1
    assert result["summary"]["live_triggerers"] == len(live)
    assert (row["trigger_queue"], row["trigger_team"]) == (
        held.get("trigger_queue"),
        held.get("trigger_team"),
    )
    # the schedule is the wait's whoever serves it; without the triggerers nobody is said to serve it
    assert row["next_check"] == unknown["next_check"] is not None
    assert unknown["served_by"] is unknown["unserved_reason"] is None
    assert report(wait)["summary"]["live_triggerers"] is None


def test_an_unreadable_row_still_says_who_serves_it() -> None:
    broken = LiveWait("d", "r", "t", -1, 1, WORKER_FIRST, {}, NOW, NOW, triggerer_id=None)
    held = LiveWait("d", "r", "u", -1, 1, WORKER_FIRST, {}, NOW, NOW, triggerer_id=7, holder=LIVE)
    result = build_report([broken, held], WaitsQuery(), NOW, None, Triggerers(THRESHOLD, (LIVE,)))
    rows = by_task(result)
    assert rows[("d", "t")]["condition"].startswith("unreadable trigger kwargs")
    assert rows[("d", "t")]["unserved_reason"].startswith("no triggerer holds its trigger yet")
    assert rows[("d", "u")]["served_by"] == {"job_id": 7, "hostname": "host-a", "heartbeat_age": 3.0}
    assert result["summary"]["unserved"] == 1


def test_the_unserved_count_is_of_the_waits_shown() -> None:
    waits = [
        worker_first(sql_check(), dag_id="a", task_id="held", triggerer_id=7, holder=LIVE),
        worker_first(sql_check(), dag_id="a", task_id="free"),
        worker_first(sql_check(), dag_id="b", task_id="free"),
    ]
    triggerers = Triggerers(THRESHOLD, (LIVE,))
    assert build_report(waits, WaitsQuery(), NOW, None, triggerers)["summary"]["unserved"] == 2
    only_a = build_report(waits, WaitsQuery(dag_id="a"), NOW, None, triggerers)
    assert only_a["summary"]["unserved"] == 1 and only_a["summary"]["waits"] == 2


# ---- redaction -------------------------------------------------------------------------------------------


def test_a_connection_id_is_shown_as_its_shown_copy_says() -> None:
    check = sensor_check(secret_conn_id="prod-payments-db", filepath="/in")
    shown = {**check, "kwargs": {"secret_conn_id": "***", "filepath": "/in"}}
    wait = worker_first(check, shown_kwargs={**worker_first(shown).kwargs})
    result = report(wait)
    assert by_task(result)[("d", "t")]["conn_id"] == "***"
    assert "prod-payments-db" not in json.dumps(result)


def test_a_value_left_sealed_is_shown_as_stars() -> None:
    envelope = {secret_kwargs.SEALED: "gAAAA-not-openable-here"}
    result = report(worker_first(sensor_check(path="/in", token=envelope)))
    assert "gAAAA" not in json.dumps(result)
    assert "token='***'" in result["waits"][0]["condition"]


# ---- the metadata DB: waits_source and the CLI -----------------------------------------------------------


def _utc(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)


@pytest.fixture
def deferred_db(airflow_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Deferred task instances of both paths with their trigger rows, in a real migrated metadata DB: held by
    a live triggerer job (sealed_a), a dead one (sealed_b) and none (masked; 3.2+: in trigger queue "gpu")."""
    from airflow.jobs.job import Job
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import delete, insert

    keyed = KeyedFernet(Fernet.generate_key())
    monkeypatch.setattr(compat.locations, "get_fernet", lambda: keyed)
    compat.locations.mask_secret(MASKED)
    now = time.time()
    started = now - 600

    def sealed_check() -> dict[str, Any]:  # sealed as BackoffTrigger.serialize does: new tokens each time
        check = sensor_check(filepath="/in", token=SECRET)
        return {
            key: value if key == "type" else secret_kwargs.seal(value, "check")
            for key, value in check.items()
        }

    policy = dict(POLICY)
    rows: dict[str, tuple[str, dict[str, Any]]] = {
        "sealed_a": (WORKER_FIRST, {"check": sealed_check(), "policy": policy, "seed": "s1"}),
        "sealed_b": (WORKER_FIRST, {"check": sealed_check(), "policy": policy, "seed": "s1"}),
        "masked": (
            ZERO_WORKER,
            {
                "start": {
                    "check": sql_check(f"SELECT ok FROM t WHERE key = '{MASKED}'"),
                    "fields": {"parameters": ["parameters"]},
                    "policy": policy,
                    "timeout": 3600.0,
                    "execution_timeout": None,
                    "backstop_seconds": 3660.0,
                },
                "parameters": {"password": SECRET},
            },
        ),
    }
    for _classpath, kwargs in rows.values():
        if "check" in kwargs:
            kwargs.update(started_at=aligned_start(started, 60.0), deadline=started + 3600.0, after=0)
    assert SECRET not in json.dumps(rows["sealed_a"][1])
    run_columns = {
        "dag_id": "waits_db",
        "run_id": "run_1",
        "run_type": "manual",
        compat.metadata_db.dag_run_logical_date().key: _utc(now - 3600),
        "data_interval_start": _utc(now - 7200),
        "data_interval_end": _utc(now - 3600),
    }
    if "run_after" in DagRun.__table__.c:
        run_columns["run_after"] = _utc(now - 3600)
    holders = {"sealed_a": "live", "sealed_b": "dead", "masked": None}
    heartbeats = {"live": now - 2, "dead": now - 600}
    with create_session() as session:
        jobs = {
            name: session.execute(
                insert(Job.__table__).values(
                    job_type="TriggererJob",
                    state="running",
                    hostname=f"waits-db-{name}",
                    start_date=_utc(now - 3600),
                    latest_heartbeat=_utc(heartbeat),
                )
            ).inserted_primary_key[0]
            for name, heartbeat in heartbeats.items()
        }
        session.execute(insert(DagRun.__table__).values(**run_columns))
        for task_id, (classpath, kwargs) in rows.items():
            trigger = Trigger(classpath=classpath, kwargs=kwargs, created_date=_utc(started + 1))
            trigger.triggerer_id = jobs.get(holders[task_id])
            if task_id == "masked" and compat.versions.AIRFLOW_V_3_2_PLUS:
                trigger.queue = "gpu"
            session.add(trigger)
            session.flush()
            ti = {
                "dag_id": "waits_db",
                "run_id": "run_1",
                "task_id": task_id,
                "map_index": -1,
                "try_number": 1,
                "state": "deferred",
                "start_date": _utc(started),
                "trigger_id": trigger.id,
                "pool": "default_pool",
                "pool_slots": 1,
            }  # 3.x's ``id`` is left to its column default: a str on 3.0/3.1, a UUID from 3.2
            session.execute(insert(TaskInstance.__table__).values(**ti))
    yield {"now": now, "started": started, "jobs": jobs}
    with create_session() as session:
        session.execute(delete(Job.__table__).where(Job.id.in_(list(jobs.values()))))
        session.execute(delete(TaskInstance.__table__).where(TaskInstance.dag_id == "waits_db"))
        session.execute(delete(DagRun.__table__).where(DagRun.dag_id == "waits_db"))
        session.execute(delete(Trigger.__table__))


@pytest.mark.parametrize("multi_team", [False, True])
def test_the_columns_that_place_a_trigger_are_this_versions(
    monkeypatch: pytest.MonkeyPatch, multi_team: bool
) -> None:
    """3.2+ a trigger queue, 3.3+ a team that counts only with [core] multi_team (Trigger.ids_for_triggerer)."""
    from airflow.models.trigger import Trigger

    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", str(multi_team))
    columns = compat.trigger_placement.trigger_placement_columns()
    expected = {"queue"} if compat.versions.AIRFLOW_V_3_2_PLUS else set()
    if compat.versions.AIRFLOW_V_3_3_PLUS and multi_team:
        expected.add("team")
    assert set(columns) == expected
    if expected:
        assert columns["queue"] is Trigger.queue
    if "team" in expected:
        assert columns["team"] is Trigger.team_name


def test_the_source_reads_deferred_waits_of_both_paths(deferred_db: dict[str, Any]) -> None:
    from airflow.utils.session import create_session

    from airflow_smart_ext.ui.waits_source import load_live_waits, load_triggerers

    with create_session() as session:
        waits = load_live_waits(session, None)
        assert load_live_waits(session, []) == []
        assert load_live_waits(session, ["other_dag"]) == []
        assert len(load_live_waits(session, ["waits_db"])) == 3
        many = [f"other_{number}" for number in range(600)]  # past the IN-list limit: filtered in Python
        assert load_live_waits(session, many) == []
        assert len(load_live_waits(session, [*many, "waits_db"])) == 3
        triggerers = load_triggerers(session, deferred_db["now"])
    jobs = deferred_db["jobs"]
    assert jobs["live"] in {job.job_id for job in triggerers.live}
    assert jobs["dead"] not in {job.job_id for job in triggerers.live}
    result = build_report(waits, WaitsQuery(), deferred_db["now"], None, triggerers)
    rows = {row["task_id"]: row for row in result["waits"]}
    assert set(rows) == {"sealed_a", "sealed_b", "masked"}
    assert rows["sealed_a"]["served_by"] == {
        "job_id": jobs["live"],
        "hostname": "waits-db-live",
        "heartbeat_age": pytest.approx(2.0, abs=0.1),
    }
    assert rows["sealed_a"]["unserved_reason"] is None
    assert rows["sealed_b"]["served_by"] is None
    assert rows["sealed_b"]["unserved_reason"].startswith(
        f"its triggerer (job {jobs['dead']} on waits-db-dead) is dead: last heartbeat 600s ago"
    )
    assert rows["masked"]["served_by"] is None
    # 3.2+: a row in a trigger queue is taken only by a triggerer started with --queues naming it
    assert rows["masked"]["trigger_queue"] == ("gpu" if compat.versions.AIRFLOW_V_3_2_PLUS else None)
    queue_words = (
        "took it from queue 'gpu'"
        if compat.versions.AIRFLOW_V_3_2_PLUS
        else "no triggerer holds its trigger yet"
    )
    assert queue_words in rows["masked"]["unserved_reason"]
    assert result["summary"]["unserved"] == 2
    # different tokens, one secret: one condition once opened
    assert rows["sealed_a"]["sharing_key_hash"] == rows["sealed_b"]["sharing_key_hash"]
    assert rows["sealed_a"]["shared_with"] == 2 and rows["masked"]["shared_with"] == 1
    assert rows["sealed_a"]["path"] == "worker-first" and rows["masked"]["path"] == "zero-worker"
    assert rows["sealed_a"]["condition"] == "FileSensor(filepath='/in', token='***') for 2026-09-21"
    assert rows["masked"]["condition"] == (
        "SQL on warehouse: SELECT ok FROM t WHERE key = '***' with parameters {'password': '***'}"
    )
    assert rows["masked"]["started_at"] == _utc(deferred_db["started"]).isoformat(timespec="milliseconds")
    text = json.dumps(result)
    assert SECRET not in text and MASKED not in text


def test_the_cli_prints_the_table_and_the_json(
    deferred_db: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_smart_ext.waits import main

    assert main(["--dag-id", "waits_db", "--sort", "deadline"]) == 0
    table = capsys.readouterr().out
    assert "sealed_a" in table and "zero-worker" in table and "worker-first" in table
    assert "FileSensor(filepath='/in', token='***')" in table and "3 waits in 2 groups" in table
    jobs = deferred_db["jobs"]
    lines = {line.split()[2]: line for line in table.splitlines() if line.startswith("waits_db ")}
    assert f"job {jobs['live']}@waits-db-live (" in lines["sealed_a"]
    for unserved in ("sealed_b", "masked"):
        assert "NOT SERVED !" in lines[unserved] and "when a triggerer picks it up" in lines[unserved]
    assert (
        f"NOT SERVED: waits_db run_1 sealed_b: its triggerer (job {jobs['dead']} on waits-db-dead) is dead"
        in table
    )
    assert "!! 2 waits no live triggerer serves !!" in table
    assert main(["--json", "--conn-id", "warehouse"]) == 0
    printed = capsys.readouterr().out
    assert [row["task_id"] for row in json.loads(printed)["waits"]] == ["masked"]
    assert SECRET not in table + printed and MASKED not in table + printed
    assert main(["--limit", "0"]) == 2
    assert "limit must be a whole number from 1 to 100000" in capsys.readouterr().err


def test_python_m_waits_runs_against_the_metadata_db(deferred_db: dict[str, Any]) -> None:
    """The module entry point, in a process of its own: without the Fernet key the worker sealed with, the
    sealed values cannot be opened -- they stay hidden, and the two waits stay apart. (``MASKED`` is known
    only to this test process's masker, as a connection password is to a process that loaded it.)"""
    # The process judges the fixture's heartbeats (2 s and 600 s old when written) by the clock when it reads
    # them: at Airflow's 30 s threshold a slow start-up (33 s under CI's load) made the live triggerer dead.
    # 300 s keeps the live one alive and the dead one dead whatever the machine's load.
    env = {**os.environ, "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "300"}
    done = subprocess.run(
        [sys.executable, "-m", "airflow_smart_ext.waits", "--json"],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    rows = {row["task_id"]: row for row in json.loads(done.stdout)["waits"]}
    assert set(rows) == {"sealed_a", "sealed_b", "masked"}
    assert rows["sealed_a"]["condition"] == "FileSensor(filepath='/in', token='***') for 2026-09-21"
    assert rows["sealed_a"]["sharing_key_hash"] != rows["sealed_b"]["sharing_key_hash"]
    assert "{'password': '***'}" in rows["masked"]["condition"]  # a sensitive name, in any process
    assert rows["sealed_a"]["served_by"]["job_id"] == deferred_db["jobs"]["live"]
    assert rows["sealed_b"]["unserved_reason"] is not None and rows["masked"]["unserved_reason"] is not None
    assert SECRET not in done.stdout + done.stderr


# ---- the last check's outcome (issue 35 part 2) ---------------------------------------------------------------


class _Supervisor:
    """3.x's ``SUPERVISOR_COMMS`` in the triggerer's runner: a ``SetXCom`` stored as the execution API's route
    stores it (the JSON value as sent, in the task's run)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def asend(self, msg: Any) -> None:
        from airflow.models.dagrun import DagRun
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        self.sent.append(msg)
        with create_session() as session:
            run = session.query(DagRun.id).filter_by(dag_id=msg.dag_id, run_id=msg.run_id).scalar()
            session.query(XComModel).filter_by(
                dag_run_id=run, task_id=msg.task_id, map_index=msg.map_index, key=msg.key
            ).delete()
            session.add(
                XComModel(
                    dag_run_id=run,
                    key=msg.key,
                    value=msg.value,
                    run_id=msg.run_id,
                    task_id=msg.task_id,
                    dag_id=msg.dag_id,
                    map_index=msg.map_index,
                )
            )


async def test_a_member_shows_its_groups_newest_last_check(
    deferred_db: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triggerer writes one record per check group, as one member's XCom (2.11: the ORM; 3.x: through the
    supervisor channel); the view reads them in its one query. sealed_a and sealed_b share a condition but
    are held by two triggerers (two check groups): each shows its own record."""
    from types import SimpleNamespace

    from airflow.utils.session import create_session

    from airflow_smart_ext.ui.waits_source import load_live_waits
    from airflow_smart_ext.wait_model.last_check import XCOM_KEY, LastCheck

    supervisor = _Supervisor()
    now = deferred_db["now"]

    def ti(task_id: str) -> Any:
        return SimpleNamespace(dag_id="waits_db", run_id="run_1", task_id=task_id, map_index=-1)

    async def write(task_id: str, record: dict[str, Any]) -> None:
        with monkeypatch.context() as patch:  # only while writing: the view's own process has no supervisor
            if compat.versions.AIRFLOW_V_3_0_PLUS:
                from airflow.sdk.execution_time import task_runner

                patch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
            await compat.task_xcoms.aset_task_xcom(ti(task_id), XCOM_KEY, record)

    older = LastCheck("not met", now - 120, now - 300).to_record()
    newer = LastCheck("transient error", now - 30, now - 90, 4, "OperationalError", "OperationalError (x)")
    await write("sealed_a", older)
    await write("sealed_b", newer.to_record())
    assert len(supervisor.sent) == (2 if compat.versions.AIRFLOW_V_3_0_PLUS else 0)
    with create_session() as session:
        waits = load_live_waits(session, None)
    result = build_report(waits, WaitsQuery(), now)
    rows = {row["task_id"]: row for row in result["waits"]}
    assert rows["sealed_b"]["last_check"] == {
        "outcome": "transient error",
        "error_class": "OperationalError",
        "reason": "OperationalError (x)",
        "errors": 4,
        "since": _utc(now - 90).isoformat(timespec="milliseconds"),
        "at": _utc(now - 30).isoformat(timespec="milliseconds"),
    }
    assert rows["sealed_b"]["last_outcome"] == (
        f"transient error (OperationalError) x4 since {_utc(now - 90).isoformat(timespec='milliseconds')}"
    )
    # held by the other triggerer (another check group): its own record
    assert rows["sealed_a"]["last_check"]["outcome"] == "not met"
    assert rows["sealed_a"]["last_check"]["at"] == _utc(now - 120).isoformat(timespec="milliseconds")
    assert rows["masked"]["last_check"] is None and rows["masked"]["last_outcome"] == "none recorded yet"
    # rewritten in place (one XCom per task), and the page says it in the UI's timezone
    await write("sealed_b", LastCheck("not met", now, now).to_record())
    with create_session() as session:
        rows = {
            row["task_id"]: row
            for row in build_report(load_live_waits(session, None), WaitsQuery(), now)["waits"]
        }
    assert rows["sealed_b"]["last_check"]["outcome"] == "not met"
    from airflow_smart_ext.ui.waits_page import render_waits

    page = render_waits(build_report(waits, WaitsQuery(), now), WaitsQuery(), lambda row: "#")
    assert "transient error (OperationalError) x4" in page
    assert f'<time class="ui-zone" datetime="{_utc(now - 90).isoformat(timespec="milliseconds")}"' in page


@pytest.mark.parametrize(
    ("holders", "shares", "expected"),
    [
        ((1, 1), (True, True), ("newer", "newer")),  # one check group: both show its newest record
        ((1, 2), (True, True), ("older", "newer")),  # two triggerers, two groups: each its own
        ((1, 1), (True, False), ("older", "newer")),  # share=False checks alone: its own record
        ((1, 1), (False, False), ("older", "newer")),
    ],
)
def test_a_member_shows_the_newest_record_of_those_sharing_its_check(
    holders: tuple[int, int], shares: tuple[bool, bool], expected: tuple[str, str]
) -> None:
    from airflow_smart_ext.wait_model.last_check import LastCheck

    records = {
        "older": LastCheck("not met", NOW - 120, NOW - 300).to_record(),
        "newer": LastCheck("transient error", NOW - 30, NOW - 90, 2, "OperationalError", "x").to_record(),
    }
    waits = []
    for task_id, holder, share, record in zip(("a", "b"), holders, shares, ("older", "newer"), strict=True):
        wait = worker_first(sql_check(), task_id=task_id, triggerer_id=holder, last_check=records[record])
        wait.kwargs["share"] = share
        waits.append(wait)
    rows = {row["task_id"]: row for row in build_report(waits, WaitsQuery(), NOW)["waits"]}
    assert (rows["a"]["last_check"], rows["b"]["last_check"]) == tuple(records[name] for name in expected)


# ---- due times (``due=``): due, late by, the late filter, the page ---------------------------------------


def due_waits() -> list[LiveWait]:
    def due(wait: LiveWait, due_at: float, told: bool) -> LiveWait:
        wait.kwargs.update(due_at=due_at, late_told=told)  # as a deferral with ``due=`` ships them
        return wait

    interval_end = datetime.datetime.fromtimestamp(NOW - 600, datetime.timezone.utc).isoformat()
    rule = {"after": 120.0, "reference": "data_interval_end"}
    return [
        due(worker_first(sql_check(), task_id="told"), NOW - 90, True),
        due(worker_first(sql_check("SELECT 2"), task_id="not_yet_told"), NOW - 5, False),
        due(worker_first(sql_check("SELECT 3"), task_id="on_time"), NOW + 300, False),
        worker_first(sql_check("SELECT 4"), task_id="no_due"),
        zero_worker(
            sql_check("SELECT 5"),
            {},
            task_id="zero_worker",
            run_dates={"data_interval_end": interval_end},
            **{"kwargs_due": rule},
        ),
    ]


def test_a_waits_due_time_and_how_late_it_is_while_it_still_waits() -> None:
    rows = {row["task_id"]: row for row in build_report(due_waits(), WaitsQuery(), NOW)["waits"]}
    assert (rows["told"]["due_in"], rows["told"]["late_by"], rows["told"]["late_alerted"]) == (
        -90.0,
        90.0,
        True,
    )
    assert (rows["not_yet_told"]["late_by"], rows["not_yet_told"]["late_alerted"]) == (5.0, False)
    assert (rows["on_time"]["due_in"], rows["on_time"]["late_by"]) == (300.0, None)
    assert rows["no_due"]["due"] is None and rows["no_due"]["late_alerted"] is None
    # a zero-worker wait's due time, as its trigger computes it: 120 s after the run's data interval end
    assert rows["zero_worker"]["due_in"] == -480.0 and rows["zero_worker"]["late_by"] == 480.0
    assert rows["zero_worker"]["late_alerted"] is False


@pytest.mark.parametrize(
    ("store_read", "record", "alerted"),
    [
        (False, None, True),  # before 3.3: a retry after the due time takes it as said, as its trigger does
        (True, None, False),  # 3.3: no earlier try said it: its late event's worker will
        (True, {"due": "<due>", "telling": False, "try": 1}, True),  # try 1 said it
        (True, {"due": "<due>", "telling": True, "try": 1}, False),  # try 1's cut short: said again
        (True, late_told.NOT_READ, None),  # the store could not give it: not known
    ],
)
def test_a_zero_worker_retry_s_alert_is_as_its_task_state_store_says(
    store_read: bool, record: Any, alerted: bool | None
) -> None:
    from airflow_smart_ext.ui.waits_page import render_waits

    interval_end = datetime.datetime.fromtimestamp(NOW - 600, datetime.timezone.utc)
    retry = zero_worker(
        sql_check("SELECT 5"),
        {},
        task_id="zero_worker",
        run_dates={"data_interval_end": interval_end.isoformat()},
        kwargs_due={"after": 120.0, "reference": "data_interval_end"},
    )
    due = (interval_end + datetime.timedelta(seconds=120)).isoformat(timespec="milliseconds")
    stored = record if record is None or record is late_told.NOT_READ else {**record, "due": due}
    retry = dataclasses.replace(retry, try_number=2, store_read=store_read, late_record=stored)
    report = build_report([retry], WaitsQuery(), NOW)
    [row] = report["waits"]
    assert row["late_by"] == 480.0 and row["late_alerted"] is alerted, row
    words = {
        True: "(alert sent)",
        False: "(alert at its next check)",
        None: "(alert: see the task&#x27;s log)",
    }
    assert words[alerted] in render_waits(report, WaitsQuery(), lambda row: "#")


def test_the_late_filter_the_late_count_and_the_due_sort() -> None:
    late = build_report(due_waits(), WaitsQuery.from_params({"late": "true"}), NOW)
    assert {row["task_id"] for row in late["waits"]} == {"told", "not_yet_told", "zero_worker"}
    everything = build_report(due_waits(), WaitsQuery(sort="due"), NOW)
    assert everything["summary"]["late"] == 3
    assert [row["task_id"] for row in everything["waits"]][:4] == [
        "zero_worker",
        "told",
        "not_yet_told",
        "on_time",
    ]
    with pytest.raises(InvalidQuery, match="late must be true or false; got 'maybe'"):
        WaitsQuery.from_params({"late": "maybe"})


def test_the_page_shows_the_due_time_how_late_and_the_late_count() -> None:
    from airflow_smart_ext.ui import airflow_style
    from airflow_smart_ext.ui.waits_page import json_link, render_waits

    report = build_report(due_waits(), WaitsQuery(), NOW)
    page = render_waits(report, WaitsQuery(), lambda row: "#")
    assert '<p id="late-alert" class="alert" role="alert">3 waits are past the due time' in page
    told = page[page.index('data-task-id="told"') :].split("</tr>")[0]
    assert 'data-late-by="90.0"' in told and "late by 90s" in told and "(alert sent)" in told
    on_time = page[page.index('data-task-id="on_time"') :].split("</tr>")[0]
    due = next(row["due"] for row in report["waits"] if row["task_id"] == "on_time")
    assert airflow_style.ui_time(due) in on_time and "late by" not in on_time
    assert json_link(WaitsQuery(late=True)).endswith("late=true") and "late" not in json_link(WaitsQuery())
