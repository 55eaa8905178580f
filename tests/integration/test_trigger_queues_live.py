"""Trigger queues by condition (issue 25): identical waits meet in one triggerer across the cluster.

One Airflow of its own (PostgreSQL, two triggerers, ``[triggerer] queues_enabled``, ``[smart_ext]
trigger_queues = smart-ext-0,smart-ext-1``; ``triggerer`` serves ``smart-ext-0``, ``triggerer-2`` serves
``smart-ext-1``): 16 worker-first waits on 4 conditions (tests/integration/dags/tq_dags.py), a fixed 3 s
interval. Asserted from the trigger rows and the checks themselves (each check appends its time and process to
its condition's file): every trigger row carries its condition's queue and is held by that queue's
triggerer, every condition is checked by one triggerer process only, about once per cycle, and every wait
succeeds on its first try when its condition comes true.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import PG_DSN_ENV, TEST_DAGS_DIR
from airflow_smart_ext import compat

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get(PG_DSN_ENV),
        reason="two triggerers need PostgreSQL: this runs in the PostgreSQL pass (set SMART_EXT_TEST_PG_DSN)",
    ),
    pytest.mark.skipif(
        not compat.versions.AIRFLOW_V_3_2_PLUS, reason="trigger queues are an Airflow 3.2+ feature"
    ),
    pytest.mark.timeout(600),
]

DAG_ID = "tq_waits"
WAITS, CONDITIONS, INTERVAL = 16, 4, 3.0  # as in tq_dags.py
QUEUES = ["smart-ext-0", "smart-ext-1"]
SERVES = {"triggerer": QUEUES[0], "triggerer-2": QUEUES[1]}
STEADY_CYCLES = 5


def _checks(work: Path, condition: int) -> list[dict[str, Any]]:
    path = work / f"c{condition}.checks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_identical_waits_meet_in_their_conditions_triggerer(tmp_path: Path) -> None:
    work = tmp_path / "tq"
    work.mkdir()
    settings = {
        "SMART_EXT_TQ_DIR": str(work),
        "AIRFLOW__TRIGGERER__QUEUES_ENABLED": "True",
        "AIRFLOW__SMART_EXT__TRIGGER_QUEUES": ",".join(QUEUES),
    }
    env = AirflowEnv(
        [TEST_DAGS_DIR / "tq_dags.py", TEST_DAGS_DIR / "ha_sensors.py"],
        extra_env=settings,
        triggerers=2,
        triggerer_args={name: [f"--queues={queue}"] for name, queue in SERVES.items()},
        parallelism=4,
    )
    with env:
        env.start()
        env.wait_for_dag(DAG_ID)
        env.unpause(DAG_ID)
        run_id = env.trigger(DAG_ID)

        def all_deferred() -> bool:
            states = [ti["state"] for ti in env.task_instances(DAG_ID, run_id)]
            return len(states) == WAITS and set(states) == {"deferred"}

        env.poll(all_deferred, 240, "every wait deferred")
        owners = env.poll(
            lambda: (rows := env.trigger_owners()) and all(r["component"] for r in rows) and rows,
            120,
            "every trigger assigned",
        )
        queues = dict(env.query('SELECT id, queue FROM "trigger"'))
        for row in owners:
            condition = int(row["task_id"].split("_")[1][1:])
            key_queue = queues[row["trigger_id"]]
            assert key_queue in QUEUES, row
            assert SERVES[row["component"]] == key_queue, (row, key_queue)
            # one queue per condition, whichever task waits on it
            same = {queues[r["trigger_id"]] for r in owners if f"_c{condition}_" in r["task_id"]}
            assert same == {key_queue}, (condition, same)
        steady_from = time.time()
        time.sleep(INTERVAL * STEADY_CYCLES + 1)
        steady_to = time.time()
        for condition in range(CONDITIONS):
            (work / f"c{condition}.marker").touch()
        assert env.wait_run(DAG_ID, run_id, timeout=180) == "success"
        tis = env.task_instances(DAG_ID, run_id)
        assert [ti["task_id"] for ti in tis if ti["try_number"] != 1] == []

    per_cycle = {}
    for condition in range(CONDITIONS):
        checks = [c for c in _checks(work, condition) if c["where"] == "triggerer"]
        pids = collections.Counter(c["pid"] for c in checks)
        assert len(pids) == 1, (condition, pids)  # one triggerer (one trigger runner) checked it
        steady = [c for c in checks if steady_from <= c["at"] < steady_to]
        per_cycle[condition] = len(steady) / ((steady_to - steady_from) / INTERVAL)
    print(f"checks per condition per {INTERVAL:g} s cycle with routing: {per_cycle}")
    assert max(per_cycle.values()) <= 1.2, per_cycle
