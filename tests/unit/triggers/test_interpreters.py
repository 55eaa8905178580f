"""Bad code in the triggerer (issue 34 part 3): a selector or sensor class that imports at DAG parse but not in
the triggerer is a check error of the watcher (its backoff, its log lines, a bounded log rate, recovery once the
module imports), and a deferred sensor's failed check, never a trigger that dies and is restarted."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import sys
from typing import Any

import pytest

from airflow_smart_ext import compat
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.triggers import log_lines
from tests.unit.clock import START, FakeClock
from tests.unit.triggers.helpers import first_event, make_trigger, sensor_check, sql_check
from tests.unit.watcher_helpers import collect, values

needs_watchers = pytest.mark.skipif(
    not compat.asset_watchers.ASSET_WATCHERS_SUPPORTED, reason="asset watchers need Airflow >= 3.0"
)

_names = itertools.count()


class Lines:
    """Every line a trigger emits: (virtual second, level, text)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.seen: list[tuple[float, str, str]] = []

    def emit(self, logger: Any, level: str, message: str, *args: Any) -> None:
        self.seen.append((self.clock.now - START, level, message % args if args else message))

    def tracebacks(self) -> list[str]:
        return [text for _, _, text in self.seen if "Traceback (most recent call last)" in text]

    def check_errors(self) -> list[tuple[float, str]]:
        return [
            (at, text) for at, level, text in self.seen if level == "error" and text.startswith("check #")
        ]


@pytest.fixture
def lines(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Lines:
    recorded = Lines(clock)
    monkeypatch.setattr(log_lines, "emit", recorded.emit)
    return recorded


@pytest.fixture
def modules(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A folder on sys.path for modules a test writes (or leaves missing); its modules are forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("smart_ext_bad_")]:
        del sys.modules[name]


def module_name() -> str:
    return f"smart_ext_bad_{next(_names)}"


SELECTOR = "def pick(row):\n    return row[0]\n"
RAISES = "raise RuntimeError('the module fails while importing')\n"

# (case, module text written before the run (None: the module is missing), the error each check names)
BAD_CODE = [
    ("a selector whose module is missing", "sql", None, "ModuleNotFoundError: No module named"),
    (
        "a selector whose module raises at import",
        "sql",
        RAISES,
        "RuntimeError: the module fails while importing",
    ),
    ("a sensor class whose module is missing", "sensor", None, "ModuleNotFoundError: No module named"),
    (
        "a sensor class whose module raises",
        "sensor",
        RAISES,
        "RuntimeError: the module fails while importing",
    ),
]


def bad_check(kind: str, module: str) -> dict[str, Any]:
    if kind == "sql":
        return sql_check(selector=f"{module}.pick", success=None, failure=None)
    spec = sensor_check("bad")
    spec["classpath"] = f"{module}.Sensor"
    return spec


def watcher(check: dict[str, Any]) -> Any:
    from airflow_smart_ext.watchers import ConditionWatcher

    # What the triggerer builds from the stored kwargs: the criteria are not imported before a check.
    return ConditionWatcher(check, poke_interval=10, backoff_factor=2, max_wait=40, jitter="none")


@needs_watchers
@pytest.mark.parametrize(("kind", "text", "error"), [c[1:] for c in BAD_CODE], ids=[c[0] for c in BAD_CODE])
async def test_code_that_does_not_import_in_the_triggerer_is_a_check_error_on_the_policys_backoff(
    clock: FakeClock, lines: Lines, modules: Any, sqlite_conn: str, kind: str, text: str | None, error: str
) -> None:
    module = module_name()
    if text is not None:
        (modules / f"{module}.py").write_text(text)
    events = await collect(clock, watcher(bad_check(kind, module)).run(), until=600)
    assert events == []  # and no exception: the trigger ran the whole 600 s
    errors = lines.check_errors()
    # The policy's schedule (10 s x2 up to 40 s), as for any check error: no restart loop, no tighter retry.
    assert [at for at, _ in errors] == [0, 10, 30, 70, *range(110, 600, 40)]
    assert all(error in text for _, text in errors), errors
    # Bounded: the traceback once, then two short lines per check (its error and its summary line).
    assert len(lines.tracebacks()) == 1
    assert module in lines.tracebacks()[0] and error.split(":")[0] in lines.tracebacks()[0]
    assert len(lines.seen) == 1 + 2 * len(errors), lines.seen
    assert max(len(text) for _, _, text in lines.seen if "Traceback" not in text) < 300


@needs_watchers
@pytest.mark.parametrize("broken_first", [False, True], ids=["missing", "raising"])
async def test_a_watcher_recovers_when_the_module_is_deployed(
    clock: FakeClock, lines: Lines, modules: Any, sqlite_conn: str, broken_first: bool
) -> None:
    with sqlite3.connect(sqlite_conn) as db:
        db.execute("INSERT INTO partitions VALUES ('2026-01-02', 'd1')")
    module = module_name()
    path = modules / f"{module}.py"
    if broken_first:
        path.write_text(RAISES)

    async def deploy() -> None:
        await clock.asleep(START + 50 - clock.now)
        path.write_text(SELECTOR)

    check = sql_check(sql="SELECT state FROM partitions", parameters=None, selector=f"{module}.pick")
    check.update(success=None, failure=None)
    deploying = asyncio.ensure_future(deploy())
    events = await collect(clock, watcher(check).run(), until=200)
    await deploying
    # Failed at 0, 10, 30; the check at 70 imports the new module and reports the value.
    assert [(at, values([(at, payload)])) for at, payload in events] == [(70, [("d1", 1, None, False)])]
    assert [at for at, _ in lines.check_errors()] == [0, 10, 30]
    assert any("imports now" in text for _, _, text in lines.seen)


async def test_a_deferred_sensor_whose_selector_does_not_import_fails_as_a_check_error(
    clock: FakeClock, lines: Lines, modules: Any, sqlite_conn: str
) -> None:
    """As poke mode ends on that error (the task fails, retried if it has retries), not a trigger failure."""
    module = module_name()
    policy = BackoffPolicy(initial=10, factor=1, jitter="none", splay=0)
    payload = await first_event(make_trigger(bad_check("sql", module), policy, share=False))
    assert payload["status"] == "error"
    assert (
        payload["message"].startswith("ModuleNotFoundError: No module named") and module in payload["message"]
    )
    assert len(lines.tracebacks()) == 1


async def test_a_zero_worker_start_whose_sensor_class_does_not_import_resumes_on_a_worker_with_the_error(
    clock: FakeClock, lines: Lines, modules: Any
) -> None:
    from tests.unit.triggers.helpers import _first_event, _trigger

    module = module_name()
    trigger = _trigger("z", START)
    trigger.start["check"]["classpath"] = f"{module}.Sensor"
    event = await _first_event(trigger)
    # The worker then ends the task as poke mode ends on this error (the event's status and message).
    assert event.payload["status"] == "error" and module in event.payload["message"]
    assert len(lines.tracebacks()) == 1
