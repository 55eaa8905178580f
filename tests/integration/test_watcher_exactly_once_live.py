"""Every value exactly once through SIGTERM, kill -9 and a triggerer fail-over (issue 34, part 6), in a real
Airflow 3.3 on PostgreSQL.

DAGs: tests/integration/dags/eo_exactly_once_dags.py. One story in the session's Airflow, driven by a seeded
``random.Random`` (the seed is printed; ``SMART_EXT_EO_SEED`` replays one):

* the values 1..6 land by INSERT into the watched (SQLite) table in bursts of 1-3 (seeded sizes, and a seeded
  pause after each burst's last value is taken up), watched by an ``every_value=True`` watcher;
* three stops of the triggerer running the watcher, each a seeded moment inside the commit window of a value
  (``COMMIT_DELAY_SECONDS`` after its intent is written; one of the kill -9 as soon as the intent is seen):
  a SIGTERM and a kill -9 of the only triggerer, each started again, then, with a second triggerer running,
  a kill -9 of the one holding the watcher (``trigger.triggerer_id``): the other takes it over;
* the restart lookup reads asset events through the api-server (``[smart_ext] watcher_api_conn_id``).

Asserted: the asset's events are the values 1..6 in order, each in exactly one event (copies counted and
reported), flagged ``redelivered`` only when not stored before the stop; the consumer (``every_new_value``,
``max_active_runs=1``) processed each of the six exactly once, in order (its own table). Alongside, a watcher
whose selector module does not import in the triggerer logs at most what its backoff allows, per triggerer
process (lines per minute measured over the whole story, at least two minutes).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import PG_DSN_ENV, TEST_DAGS_DIR
from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.triggers.watcher_edge import COMMIT_DELAY_SECONDS
from airflow_smart_ext.wait_model.watcher_state import STATE_KEY_PREFIX
from tests.integration.live import event_payload

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get(PG_DSN_ENV),
        reason="two triggerers need PostgreSQL: this runs in the PostgreSQL pass (set SMART_EXT_TEST_PG_DSN)",
    ),
    pytest.mark.skipif(
        not compat.consumers.CONSUMERS_SUPPORTED,
        reason="the watermark (asset state store) and every_new_value need Airflow >= 3.3",
    ),
    pytest.mark.timeout(900),
]

SEED_ENV = "SMART_EXT_EO_SEED"
ASSET, BROKEN = "eo_values", "eo_broken"
CONSUMER, BROKEN_CONSUMER = "eo_consumer", "eo_broken_consumer"
STATE_KEY = f"{STATE_KEY_PREFIX}:{ASSET}"
VALUES = list(range(1, 7))
# Seconds: a killed triggerer's watcher moves once its heartbeat (every 2 s) is this old. Right after starting
# its triggers a triggerer's loop sent no heartbeat for up to ~20 s here ("Heartbeat recovered after 14.64
# seconds"); with 8 s the other, live triggerer took the watcher over and back (both ran it a while).
HEALTH_THRESHOLD = 20
HEARTBEAT_FRESH = 5.0  # seconds: a triggerer heartbeating every 2 s (the harness's setting) is this fresh
# A stop lands this long after the intent is seen at most: inside the commit window with room for the 50 ms
# polling and the stop itself.
STOP_WITHIN = COMMIT_DELAY_SECONDS - 1.5
MEASURED_AT_LEAST = 120.0  # seconds of the broken watcher's log


@dataclass(frozen=True)
class Stop:
    how: (
        str  # "SIGTERM", "kill -9" (the only triggerer, started again) or "kill -9 HA" (the other takes over)
    )
    value: int  # the stop lands ``offset`` seconds after this value's intent is seen
    offset: float


@dataclass(frozen=True)
class Plan:
    seed: int
    bursts: list[list[int]]
    pauses: list[float]  # before each burst: seconds after the previous burst's last value was taken up
    stops: list[Stop]

    @property
    def ha_burst(self) -> int:
        """The burst whose values the second triggerer is started before (the HA stop's)."""
        value = next(stop.value for stop in self.stops if stop.how == "kill -9 HA")
        return next(n for n, burst in enumerate(self.bursts) if value in burst)


def make_plan(seed: int) -> Plan:
    rng = random.Random(seed)
    sizes: list[int] = []
    while sum(sizes) < len(VALUES):
        sizes.append(rng.randint(1, min(3, len(VALUES) - sum(sizes))))
    bursts, start = [], 0
    for size in sizes:
        bursts.append(VALUES[start : start + size])
        start += size
    burst_of = {value: n for n, burst in enumerate(bursts) for value in burst}
    # The HA stop's value is in a later burst than the other two (its second triggerer starts before it).
    while True:
        first, second, ha = sorted(rng.sample(VALUES, 3))
        if burst_of[ha] > burst_of[second]:
            break
    single = ["SIGTERM", "kill -9"]
    rng.shuffle(single)
    offsets = [rng.uniform(0, STOP_WITHIN) for _ in range(3)]
    kills = [n for n, how in enumerate([*single, "kill -9 HA"]) if how.startswith("kill")]
    offsets[rng.choice(kills)] = 0.0  # one kill -9 as soon as the intent is seen: before the event is stored
    stops = [
        Stop(how, value, round(offset, 2))
        for how, value, offset in zip([*single, "kill -9 HA"], [first, second, ha], offsets, strict=True)
    ]
    pauses = [0.0] + [round(rng.uniform(0, COMMIT_DELAY_SECONDS + 2), 2) for _ in bursts[1:]]
    return Plan(seed, bursts, pauses, stops)


def dag_objects() -> Any:
    """The DAG file, imported here: the broken watcher's policy is the one the watcher built from it."""
    sys.path.insert(0, str(TEST_DAGS_DIR))
    try:
        spec = importlib.util.spec_from_file_location(
            "eo_exactly_once_dags", TEST_DAGS_DIR / "eo_exactly_once_dags.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(TEST_DAGS_DIR))


def most_checks(policy: BackoffPolicy, seconds: float) -> int:
    """The most checks a fresh schedule of ``policy`` (no jitter) makes within ``seconds`` of its start: its
    first check is on the ``poke_interval`` grid, at most one interval before the start."""
    assert policy.jitter == "none" and not policy.splay, policy
    count = 0
    while policy.offset("", count) < seconds + policy.initial:
        count += 1
    return count


@dataclass
class Segment:
    """One triggerer process of the story: its log bytes and its lifetime (wall clock)."""

    name: str
    log_from: int
    started: float
    log_to: int | None = None
    ended: float | None = None


@dataclass
class Story:
    env: AirflowEnv
    db: Path
    plan: Plan
    segments: list[Segment] = field(default_factory=list)
    stops: list[dict[str, Any]] = field(default_factory=list)
    began: float = 0.0
    ended: float = 0.0

    # -- what Airflow and the consumer recorded --

    def watermark(self) -> dict[str, Any]:
        rows = self.env.query(
            "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id WHERE a.name = %s "
            "AND s.key = %s",
            (ASSET, STATE_KEY),
        )
        return json.loads(rows[0][0]) if rows else {}

    def taken_up(self, value: int) -> bool:
        """The watcher wrote ``value``'s intent, or committed it or a later one."""
        mark = self.watermark()
        return mark.get("pending") == value or (mark.get("value") or 0) >= value

    def events(self) -> list[dict[str, Any]]:
        rows = self.env.query_dicts(
            "SELECT e.id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = %s "
            "ORDER BY e.id",
            (ASSET,),
        )
        return [{"id": row["id"], **event_payload(row["extra"])} for row in rows]

    def stored(self, value: int) -> bool:
        return any(event.get("value") == value for event in self.events())

    def processed(self) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(
                "SELECT run_id, value, seq, event_id, redelivered FROM processed ORDER BY at"
            ).fetchall()

    def consumer_idle(self) -> bool:
        busy = self.env.query(
            "SELECT count(*) FROM dag_run WHERE dag_id = %s AND state IN ('queued', 'running')", (CONSUMER,)
        )[0][0]
        queued = self.env.query(
            "SELECT count(*) FROM asset_dag_run_queue WHERE target_dag_id = %s", (CONSUMER,)
        )[0][0]
        return busy == 0 and queued == 0

    def holder(self) -> str | None:
        """The harness's name of the triggerer holding the watcher (None: no live one holds it)."""
        rows = self.env.query(
            'SELECT t.triggerer_id FROM asset a JOIN asset_watcher w ON w.asset_id = a.id JOIN "trigger" t '
            "ON t.id = w.trigger_id WHERE a.name = %s",
            (ASSET,),
        )
        jobs = {
            c.job_id: name for name, c in self.env.components.items() if c.job_id is not None and c.running
        }
        return jobs.get(rows[0][0]) if rows else None

    # -- the triggerers --

    def log_size(self, name: str) -> int:
        path = self.env.component_log_folder / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def start(self, name: str) -> None:
        self.segments.append(Segment(name, self.log_size(name), time.time()))
        self.env.start_component(name)

    def stop(self, name: str, *, crash: bool) -> None:
        self.env.stop_component(name, crash=crash)
        for segment in self.segments:
            if segment.name == name and segment.ended is None:
                segment.ended, segment.log_to = time.time(), self.log_size(name)

    def watcher_settled(self) -> bool:
        """The watcher checks again on a triggerer whose heartbeat is fresh. A triggerer's loop sends no
        heartbeat while it serves its triggers' first requests (up to ~20 s here); a second triggerer started
        then would take the watcher from the live one."""
        holder = self.holder()
        if holder is None:
            return False
        segment = [s for s in self.segments if s.name == holder][-1]
        checking = any(
            f"watcher {ASSET!r}" in line and ": check #" in line for line in self.log_of(segment).splitlines()
        )
        job_id = self.env.components[holder].job_id
        age = self.env.query(
            "SELECT extract(epoch FROM now() - latest_heartbeat) FROM job WHERE id = %s", (job_id,)
        )[0][0]
        return checking and float(age) < HEARTBEAT_FRESH

    def log_of(self, segment: Segment) -> str:
        data = (self.env.component_log_folder / f"{segment.name}.log").read_bytes()
        return data[segment.log_from : segment.log_to].decode(errors="replace")

    def lines_of(self, watcher: str) -> list[str]:
        return [
            line
            for segment in self.segments
            for line in self.log_of(segment).splitlines()
            if f"watcher {watcher!r}" in line
        ]


def until(what: str, predicate: Callable[[], Any], timeout: float = 180.0, interval: float = 0.05) -> None:
    """Poll fast (a commit window is 5 s wide) until ``predicate`` holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(interval)


def make_db(env: AirflowEnv) -> Path:
    db = env.home / "eo_values.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS vals (v INTEGER)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS processed (run_id TEXT, value INTEGER, seq INTEGER, event_id INTEGER, "
            "redelivered INTEGER, at REAL)"
        )
    # Rows, not `airflow connections add` (seconds per CLI call); the sqlite hook reads the path from host.
    for conn_id, conn_type, host in (("eo_values", "sqlite", str(db)), ("eo_api", "http", env.api_url)):
        env.execute("DELETE FROM connection WHERE conn_id = %s", (conn_id,))
        env.execute(
            "INSERT INTO connection (conn_id, conn_type, host, is_encrypted, is_extra_encrypted) "
            "VALUES (%s, %s, %s, %s, %s)",
            (conn_id, conn_type, host, False, False),
        )
    return db


def committed(mark: dict[str, Any], value: int) -> bool:
    return mark.get("value") == value and mark.get("seq") == value and "pending" not in mark


def run_story(story: Story) -> None:
    plan = story.plan
    stops = {stop.value: stop for stop in plan.stops}
    for n, burst in enumerate(plan.bursts):
        if n == plan.ha_burst:
            until("the watcher settled on the first triggerer", story.watcher_settled, interval=0.5)
            story.start("triggerer-2")
        if n:
            last = plan.bursts[n - 1][-1]
            until(f"value {last} taken up", lambda v=last: story.taken_up(v))
            time.sleep(plan.pauses[n])
        with sqlite3.connect(story.db) as conn:
            conn.executemany("INSERT INTO vals VALUES (?)", [(value,) for value in burst])
        for value in burst:
            stop = stops.get(value)
            if stop is None:
                continue
            until(f"value {value} pending", lambda v=value: story.watermark().get("pending") == v)
            intent = time.monotonic()
            time.sleep(stop.offset)
            holder = story.holder()
            assert holder is not None, f"no running triggerer holds the watcher at value {value}"
            stored_before = story.stored(value)
            stopped_after = time.monotonic() - intent  # seconds after the intent was seen, as the signal goes
            story.stop(holder, crash=stop.how.startswith("kill"))
            story.stops.append(
                {
                    "how": stop.how,
                    "value": value,
                    "holder": holder,
                    "stopped_after": round(stopped_after, 2),
                    "stored_before": stored_before,
                    "pending_at_stop": story.watermark().get("pending"),
                    "stored_at_stop": story.stored(value),
                }
            )
            if stop.how != "kill -9 HA":
                story.start(holder)
    until("value 6 committed", lambda: committed(story.watermark(), VALUES[-1]))
    until(
        "the consumer processed value 6",
        lambda: any(row[1] == VALUES[-1] for row in story.processed()),
        timeout=240,
    )
    until("the consumer idle", story.consumer_idle, timeout=120, interval=0.5)
    time.sleep(3)  # a late copy would show within three checks


@pytest.fixture(scope="module")
def story(airflow_env: AirflowEnv) -> Iterator[Story]:
    env = airflow_env
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    plan = make_plan(seed)
    print(f"\n[eo] seed {seed} ({SEED_ENV}={seed} replays it): {plan}")
    story = Story(env, make_db(env), plan)
    added = {
        "AIRFLOW__SMART_EXT__WATCHER_API_CONN_ID": "eo_api",
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEALTH_THRESHOLD),
        "SMART_EXT_EO_TRIGGERER": "1",  # eo_triggerer_missing.py raises while importing in the triggerers
    }
    env.env.update(added)
    env.triggerers = 2  # the harness then knows "triggerer-2" (started before the HA stop's burst)
    try:
        story.began = time.time()
        env.stop_component("triggerer")  # started again with the settings above
        story.start("triggerer")
        for dag_id in (CONSUMER, BROKEN_CONSUMER):
            env.wait_for_dag(dag_id)
            env.unpause(dag_id)
        # Until the watcher checked the empty table (it starts after the next parse of the file).
        until(
            "a check of the eo_values watcher",
            lambda: any(": negative" in line for line in story.lines_of(ASSET)),
            timeout=240,
            interval=0.5,
        )
        run_story(story)
        # The broken watcher's log over at least MEASURED_AT_LEAST seconds.
        time.sleep(max(0.0, story.began + MEASURED_AT_LEAST - time.time()))
        story.ended = time.time()
        for segment in story.segments:
            if segment.ended is None:
                segment.ended, segment.log_to = story.ended, story.log_size(segment.name)
        print(f"[eo] stops: {json.dumps(story.stops)}")
        yield story
    finally:
        for dag_id in (CONSUMER, BROKEN_CONSUMER):
            env.pause(dag_id)
        for name in added:
            env.env.pop(name, None)
        env.stop_components(env.triggerer_names, grace=10.0)
        env.components.pop("triggerer-2", None)
        env.triggerers = 1
        env.start_component("triggerer")


def test_each_stop_fell_between_an_event_and_its_commit(story: Story) -> None:
    assert [stop["pending_at_stop"] for stop in story.stops] == [stop["value"] for stop in story.stops], (
        story.stops
    )
    assert [stop["how"] for stop in story.stops] == [stop.how for stop in story.plan.stops]
    ha = story.stops[-1]
    assert ha["how"] == "kill -9 HA" and ha["holder"] in story.env.triggerer_names, story.stops


def test_the_events_are_the_values_in_order_each_exactly_once(story: Story) -> None:
    events = story.events()
    copies = {seq: n - 1 for seq, n in Counter(e["seq"] for e in events).items() if n > 1}
    print(
        f"\n[eo] {len(events)} events; copies per seq {copies or 'none'}; "
        f"redelivered {[e['value'] for e in events if e.get('redelivered')]}"
    )
    assert Counter(e["seq"] for e in events) == {seq: 1 for seq in VALUES}, events
    assert [(e["value"], e["seq"], e["previous"]) for e in events] == [(v, v, v - 1) for v in VALUES], events
    assert {e["watcher"] for e in events} == {ASSET}, events


def test_only_a_value_not_stored_before_its_stop_is_sent_again_flagged(story: Story) -> None:
    flagged = {e["value"]: e["redelivered"] for e in story.events()}
    stopped = {stop["value"]: not stop["stored_at_stop"] for stop in story.stops}
    assert flagged == {value: stopped.get(value, False) for value in VALUES}, story.stops
    lines = story.lines_of(ASSET)
    assert sum("is stored already" in line for line in lines) == sum(s["stored_at_stop"] for s in story.stops)


def test_the_consumer_processed_each_value_exactly_once_in_order(story: Story) -> None:
    rows = story.processed()
    print(f"\n[eo] consumer: {[(value, run_id[-32:]) for run_id, value, *_ in rows]}")
    assert [(value, seq) for _, value, seq, _, _ in rows] == [(v, v) for v in VALUES], rows
    ids = {e["value"]: e["id"] for e in story.events()}
    assert [event_id for _, _, _, event_id, _ in rows] == [ids[v] for v in VALUES], rows
    # a value whose one event was re-sent is processed once, from that event
    flagged = {e["value"]: e["redelivered"] for e in story.events()}
    assert [bool(redelivered) for *_, redelivered in rows] == [flagged[v] for v in VALUES], rows


def test_a_watcher_whose_code_does_not_import_logs_within_its_backoff(story: Story) -> None:
    policy = dag_objects().broken.watchers[0].trigger.policy
    measured = story.ended - story.began
    assert measured >= MEASURED_AT_LEAST, measured
    per_segment = []
    for segment in story.segments:
        assert segment.ended is not None
        lines = [line for line in story.log_of(segment).splitlines() if f"watcher {BROKEN!r}" in line]
        tracebacks = sum("does not import here" in line for line in lines)
        # At most: the traceback once (per distinct error) and two lines per check of a fresh schedule.
        bound = 1 + 2 * most_checks(policy, segment.ended - segment.started)
        per_segment.append(
            (segment.name, round(segment.ended - segment.started, 1), len(lines), tracebacks, bound)
        )
        assert tracebacks <= 1 and len(lines) <= bound, per_segment
    total = sum(lines for _, _, lines, _, _ in per_segment)
    bound = sum(bound for *_, bound in per_segment)
    print(
        f"\n[eo] broken watcher ({policy.describe()}): {total} lines in {measured:.0f} s = "
        f"{total / measured * 60:.1f} lines/min (bound {bound}, {bound / measured * 60:.1f}/min); per triggerer "
        f"process (name, seconds, lines, tracebacks, bound): {per_segment}"
    )
    errors = [line for line in story.lines_of(BROKEN) if ": error: ImportError:" in line]
    assert errors and all("eo_triggerer_missing is not installed" in line for line in errors), errors[:3]
    assert sum(tracebacks for _, _, _, tracebacks, _ in per_segment) >= 1
