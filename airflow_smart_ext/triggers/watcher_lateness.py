"""A condition watcher's absence alert (``due=``), the Airflow glue: its record in the asset state store (3.3+,
beside the watermark), the WARNING line, the ``smart_ext.watcher.late`` metric and the ``on_late`` callbacks
(module-level functions, run in a check thread beside the watcher, each within ``CALLBACK_TIME_LIMIT_SECONDS``:
a slow webhook never holds the watcher's events). The rule is the wait model's (``wait_model/absence.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from airflow_smart_ext import clock, compat, units
from airflow_smart_ext.conditions import runtime
from airflow_smart_ext.triggers import log_lines
from airflow_smart_ext.ui.pages import waits_link
from airflow_smart_ext.wait_model.absence import (
    LATE_KEY_SUFFIX,
    AbsenceRecord,
    due_rule_key,
    landed,
    late_due,
    merged,
    unfinished_alert,
    watcher_due_problem,
)
from airflow_smart_ext.wait_model.last_check import LastCheck
from airflow_smart_ext.wait_model.parameters import WatcherArgumentError, late_callbacks

METRIC = "smart_ext.watcher.late"
#: How long one ``on_late`` callback may run before the watcher stops waiting for it (its thread is abandoned).
CALLBACK_TIME_LIMIT_SECONDS = 60.0
#: ``on_late`` as ``serialize()`` writes it (the paths were checked when the DAG file was parsed): the
#: triggerer does not import them while it builds the watcher, so a callback that does not import there fails
#: only its own call (logged), never the watcher or the shared poll built from its kwargs.
PARSED_KEY = "parsed"


def due_arguments(due: Any, on_late: Any) -> tuple[Any, list[str]]:
    """``due=`` and ``on_late=`` as a watcher keeps them (a ``DueTime`` or None; the callbacks' dotted paths);
    ``WatcherArgumentError`` naming the parameter otherwise (at DAG parse)."""
    if due is None:
        if on_late:  # an empty list is no callback
            raise WatcherArgumentError(
                "on_late: needs due= (the time a new value is due by on each business day)"
            )
        return None, []
    problem = compat.asset_watchers.asset_state_store_problem(
        "due: a condition watcher's due time", "Use a BackoffSensor with due= instead (docs/late-data.md)"
    )
    if problem is not None:
        raise WatcherArgumentError(problem)
    from airflow_smart_ext.timetables.due import InvalidDueTime, due_time_arg

    try:
        due_time = due_time_arg(due)
    except InvalidDueTime as err:
        raise WatcherArgumentError(str(err)) from None
    problem = watcher_due_problem(due_time)
    if problem is not None:
        raise WatcherArgumentError(problem)
    if isinstance(on_late, Mapping) and set(on_late) == {PARSED_KEY}:
        return due_time, [str(path) for path in on_late[PARSED_KEY]]
    return due_time, [_callback_path(callback) for callback in late_callbacks(on_late)]


def _callback_path(callback: Any) -> str:
    """A callback as the triggerer imports it: its dotted path, checked to import here (at parse)."""
    path = callback if isinstance(callback, str) else runtime.callable_path(callback)
    problem = None
    if path is None:
        problem = "cannot be imported by name in the triggerer"
    else:
        try:
            if not callable(runtime.import_object(path)):
                problem = "is not callable"
        except Exception as err:  # a module that fails while importing fails here, at parse
            problem = f"does not import ({type(err).__name__}: {err})"
    if path is None or problem is not None:
        raise WatcherArgumentError(
            f"on_late: {callback!r} {problem}; a watcher's callbacks run in the triggerer: give module-level "
            "functions of an installed package or a DAGs-/plugins-folder module (or their dotted paths), each "
            "called with {'late': {...}}; to use a notifier, call it there: SlackNotifier(...)(context)"
        )
    return path


class WatcherLateness:
    """One watcher's absence alerts: ``due`` (a ``DueTime``), ``on_late`` (dotted paths), ``name`` (the name its
    events carry), ``key`` (its watermark's key in the asset state store), ``assets`` and their ``accessors``."""

    def __init__(
        self,
        due: Any,
        on_late: list[str],
        name: str,
        key: str,
        assets: list[str],
        accessors: list[Any],
        log: Any,
    ) -> None:
        self.due = due
        self.on_late = on_late
        self.name = name
        self.key = key + LATE_KEY_SUFFIX
        self.assets = assets
        self.accessors = accessors
        self.log = log
        self.rule = due_rule_key(due)
        self.record: AbsenceRecord | None = None  # None until the store answered
        self.unsaved = False
        self._saving = asyncio.Lock()  # the alert's callbacks end beside the checks: one write at a time
        self._alerts: set[asyncio.Future[None]] = set()  # running callbacks (kept: a task is weakly held)

    async def start(self) -> None:
        """Before the first check: the stored record, or a new one that begins watching now."""
        await self._load()
        await self._save()

    async def _load(self, began: float | None = None) -> None:
        """Read the record (``began``: a new one begins watching then, at the latest now)."""
        try:
            records = [await accessor.aget(self.key) for accessor in self.accessors]
        except Exception as err:  # an outage: no alert until the store answers (it may hold one told already)
            log_lines.emit(
                self.log,
                "warning",
                "the asset state store did not answer (%s: %s); the late rule waits for it",
                type(err).__name__,
                err,
            )
            return
        record = merged([AbsenceRecord.from_record(record) for record in records])
        if record is None or record.rule != self.rule:  # none yet, or kept for another due rule
            since = clock.now() if began is None else min(began, clock.now())
            record, self.unsaved = AbsenceRecord(since=since, rule=self.rule), True
        self.record = record
        cut_short = unfinished_alert(self.due, clock.now(), record)
        if cut_short is not None:
            await self._tell(cut_short, None, resent=True)  # a restart during the alert: never lose it

    async def _save(self) -> None:
        async with self._saving:
            if self.record is None or not self.unsaved:
                return
            record = self.record
            try:
                for accessor in self.accessors:
                    await accessor.aset(self.key, record.to_record())
            except Exception as err:
                log_lines.emit(
                    self.log,
                    "warning",
                    "the asset state store refused the late rule's record (%s: %s); written again at the next "
                    "check",
                    type(err).__name__,
                    err,
                )
                return
            self.unsaved = self.record is not record  # changed while it was written: write it again

    def _update(self, record: AbsenceRecord) -> None:
        self.record, self.unsaved = record, True

    async def landed(self, observed_at: float) -> None:
        """A new value was reported (its event handed to Airflow)."""
        if self.record is None:
            await self._load(observed_at)  # the store did not answer at the start
        if self.record is not None:
            self._update(landed(self.due, observed_at, self.record))
            await self._save()

    async def checked(self, index: int, check: LastCheck | None, observed_at: float) -> None:
        """After check ``index`` (begun at ``observed_at``): say the watcher is late if this is the check that
        does (the first begun at or after a due time)."""
        if self.record is None:
            await self._load()
            if self.record is None:
                return
        due_at = late_due(self.due, observed_at, self.record)
        if due_at is not None:
            await self._tell(due_at, (index, check), resent=False)
        await self._save()

    async def _tell(self, due_at: float, check: tuple[int, LastCheck | None] | None, resent: bool) -> None:
        assert self.record is not None
        self._update(self.record.telling_for(due_at))
        await self._save()  # before the alert: a second triggerer taking over reads it was told
        late = self._facts(due_at, check, resent)
        said = [f"check #{check[0]}: {late['last_outcome']}"] if check is not None else []
        if resent:
            said.append("said again: a restart may have cut the alert short")
        log_lines.emit(
            self.log,
            "warning",
            "Late: watcher %s was due at %s (%s) and no new value has landed since %s%s. Watching on.",
            self.name,
            late["due"],
            late["due_rule"],
            late["last_value_at"] or "it began watching",
            "".join(f"; {part}" for part in said),
        )
        try:
            compat.locations.Stats.incr(METRIC, tags={"watcher": self.name})
        except Exception:  # metrics must never stop a watcher
            self.log.debug("Could not emit metric %s", METRIC, exc_info=True)
        alert = asyncio.ensure_future(self._call_back(late))
        self._alerts.add(alert)
        alert.add_done_callback(self._alerts.discard)

    def _facts(
        self, due_at: float, check: tuple[int, LastCheck | None] | None, resent: bool
    ) -> dict[str, Any]:
        assert self.record is not None
        now, landed_at = clock.now(), self.record.landed
        try:
            link = waits_link(late="true")
        except Exception:  # a link is a convenience: never the reason an alert is not said
            link = ""
        return {
            "watcher": self.name,
            "assets": list(self.assets),
            "due": units.iso(due_at),
            "due_rule": self.due.describe(daily=True),
            "late_by_seconds": round(now - due_at, 3),
            "late_by": units.duration_text(now - due_at),
            "check": None if check is None else check[0],
            "last_outcome": _outcome(check[1] if check is not None else None),
            "last_value_at": None if landed_at is None else units.iso(landed_at),
            "resent": resent,
            "link": link,
        }

    async def _call_back(self, late: dict[str, Any]) -> None:
        """Each ``on_late`` callback, in a check thread and within its time limit, beside the watcher's checks;
        then the record says the alert is done."""
        for path in self.on_late:
            try:
                callback: Callable[[Any], Any] = runtime.import_object(path)
                await asyncio.wait_for(
                    runtime.run_blocking(callback, {"late": dict(late)}), CALLBACK_TIME_LIMIT_SECONDS
                )
            except asyncio.CancelledError:  # the watcher stops: the record still says "telling" (sent again)
                raise
            except BaseException:  # a failed alert must not stop the watcher (as Airflow's own callbacks)
                log_lines.emit(self.log, "exception", "on_late callback %s failed", path)
        assert self.record is not None
        self._update(self.record.told_all())
        await self._save()


def _outcome(check: LastCheck | None) -> str:
    if check is None:
        return "no check yet"
    if check.error_class:
        return f"{check.outcome} ({check.error_class}, {check.errors} in a row)"
    return check.outcome
