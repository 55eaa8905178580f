"""A condition watcher's edge, per watcher: which of the poll's values are new, one asset event each, and the
watermark that reports each value once — kept in the asset state store (3.3+) in two steps around each event
(intent before, commit after), so a restart re-sends an event it may have lost and never one that was committed.
``ConditionWatcher`` (``triggers/condition_watcher.py``) runs the poll and hands its observations here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import clock, compat, units
from airflow_smart_ext.triggers import log_lines
from airflow_smart_ext.triggers.last_check_writes import LastCheckRecorder, Write
from airflow_smart_ext.triggers.redelivery import stored_already
from airflow_smart_ext.triggers.watcher_lateness import WatcherLateness
from airflow_smart_ext.triggers.watermark import (
    EdgeTracker,
    Report,
    ValueNotReportable,
    Watermark,
    latest_watermark,
    reportable_value,
    values_after,
)
from airflow_smart_ext.wait_model.last_check import STATE_KEY_SUFFIX, LastCheck
from airflow_smart_ext.wait_model.watcher_state import state_store_key, watcher_name

#: After an event is handed to Airflow, how long before its watermark is committed. The triggerer's runner
#: sends events to its supervisor once a second and the supervisor stores them right after (3.3.2
#: jobs/triggerer_job_runner.py: ``arun`` syncs every 1 s, ``run_once`` -> ``handle_events``): committing
#: later than two rounds keeps the commit behind the stored event, so a crash in between re-sends the event
#: (``redelivered``) rather than losing it.
COMMIT_DELAY_SECONDS = 5.0
#: How long to wait before reading the state store again when it did not answer (3.3+).
STATE_STORE_RETRY_SECONDS = 10.0


@dataclass(frozen=True)
class Observed:
    """One check of the poll: the value a positive check saw (None: no value), when the check started, its
    outcome as the last-check record says it (``wait.last_check``) and its number."""

    value: Any
    observed_at: float
    check: LastCheck | None = None
    index: int = 0


class StoredWatermark:
    """A watcher's watermark in the asset state store of every asset it watches (3.3+; none before: then
    loading finds nothing and saving keeps it in memory only)."""

    def __init__(self, accessors: list[Any], key: str, log: Any) -> None:
        self.accessors = accessors
        self.key = key
        self.log = log

    async def load(self) -> Watermark | None:
        """The stored watermark; read again until the store answers (guessing could duplicate or lose)."""
        while True:
            try:
                records = [await accessor.aget(self.key) for accessor in self.accessors]
            except Exception as err:  # the API server or its database is away: an outage, ridden out
                log_lines.emit(
                    self.log,
                    "warning",
                    "the asset state store did not answer (%s: %s); reading the watermark again in %gs",
                    type(err).__name__,
                    err,
                    STATE_STORE_RETRY_SECONDS,
                )
                await clock.asleep(STATE_STORE_RETRY_SECONDS)
                continue
            stored = latest_watermark(records)
            if stored is None and any(record is not None for record in records):
                log_lines.emit(
                    self.log, "warning", "the value stored under %s is not a watermark; ignored", self.key
                )
            return stored

    async def save(self, tracker: EdgeTracker) -> bool:
        """Write the tracker's watermark to every watched asset; False (logged) when the store failed."""
        record = tracker.mark.to_record()
        try:
            for accessor in self.accessors:
                await accessor.aset(self.key, record)
        except Exception as err:
            log_lines.emit(
                self.log,
                "warning",
                "the asset state store refused the watermark (%s: %s)",
                type(err).__name__,
                err,
            )
            return False
        tracker.saved()
        return True


class WatcherEdge:
    """The edge of one watcher (``watcher``: the trigger, whose assets the state store is keyed by). ``tracker``
    is the watermark while its events run (a SQL ``every_value`` poll binds it as the query's ``after``)."""

    def __init__(self, watcher: Any) -> None:
        self.watcher = watcher
        self.check: dict[str, Any] = watcher.check
        self.value_key: str | None = watcher.value_key
        self.state_key: str | None = watcher.state_key
        self.every_value: bool = watcher.every_value
        self.start_after: Any = watcher.start_after
        self.report_first_value: bool = watcher.report_first_value
        self.tracker: EdgeTracker | None = None

    def store_key(self) -> str:
        """The watermark's key in the asset state store."""
        return state_store_key(self.check, self.value_key, self.state_key, self.every_value)

    def event(self, log: Any, report: Report, observed_at: float | None) -> Any:
        log_lines.emit(
            log,
            "info",
            "new value #%d: %r (previous %r)%s",
            report.seq,
            report.value,
            report.previous,
            "; sent again: the run before a restart may not have delivered it" if report.redelivered else "",
        )
        payload = report.payload(units.iso(observed_at))
        # which watcher's seq it is: consumers keep one numbering per watcher (consumers.every_new_value)
        payload["watcher"] = self.name()
        return compat.locations.TriggerEvent(payload)

    def name(self) -> str:
        """The name its events carry and its watermark is kept under."""
        return watcher_name(self.check, self.value_key, self.state_key, self.every_value)

    def new_values(self, log: Any, observed: Observed, watermark: Any) -> list[Any]:
        """The values one check makes the edge observe, in order: its value (None: none), or with
        ``every_value`` each value after the watermark."""
        try:
            if not self.every_value:
                return [reportable_value(observed.value, self.value_key)]
            return [] if observed.value is None else values_after(observed.value, watermark, self.value_key)
        except ValueNotReportable as err:
            log_lines.emit(log, "error", "the value cannot be reported: %s", err)
            return []

    def last_check_writer(self) -> Write | None:
        """Writes this watcher's last-check record to the asset state store of each asset it watches (3.3+;
        None before: nowhere to keep it)."""
        accessors = compat.asset_watchers.asset_state_accessors(self.watcher)
        if not accessors:
            return None
        key = self.store_key() + STATE_KEY_SUFFIX  # beside the watermark, a record of its own

        async def write(record: dict[str, Any]) -> None:
            for accessor in accessors:
                await accessor.aset(key, record)

        return write

    def lateness(self, log: Any) -> WatcherLateness | None:
        """Its absence alerts (``due=``; None without)."""
        if self.watcher.due is None:
            return None
        return WatcherLateness(
            self.watcher.due,
            self.watcher.on_late,
            self.name(),
            self.store_key(),
            compat.asset_watchers.watched_assets(self.watcher),
            compat.asset_watchers.asset_state_accessors(self.watcher),
            log,
        )

    async def events(self, observations: AsyncIterator[Observed], log: Any) -> AsyncIterator[Any]:
        store = StoredWatermark(
            compat.asset_watchers.asset_state_accessors(self.watcher), self.store_key(), log
        )
        recorder, write = LastCheckRecorder(), self.last_check_writer()  # per watcher: its own record
        lateness = self.lateness(log)
        if lateness is not None:
            await lateness.start()  # it begins watching before its first check
        stored = await store.load()
        if stored is None and self.every_value:
            stored = Watermark(self.start_after)  # the values after start_after are new
        tracker = self.tracker = EdgeTracker(stored, self.report_first_value)
        redelivery = tracker.redelivery()
        if redelivery is not None:
            if not await stored_already(
                redelivery, self.name(), compat.asset_watchers.watched_assets(self.watcher), log
            ):
                yield self.event(log, redelivery, None)
                await clock.asleep(COMMIT_DELAY_SECONDS)
            tracker.commit()
            await store.save(tracker)
        async for observed in observations:
            if observed.check is not None:
                recorder.record(observed.check, write)
            # each value its own intent, event and commit; a check without one still retries an unsaved commit
            for value in self.new_values(log, observed, tracker.mark.value) or [None]:
                if tracker.unsaved and not await store.save(tracker):
                    break  # an earlier commit still unwritten: nothing new until it is (no edge is lost)
                checkpoint = tracker.checkpoint()
                report = tracker.observe(value)
                if tracker.unsaved and not await store.save(tracker):
                    # the intent is not stored: no event now; the next check sees the value again
                    tracker.rollback(checkpoint)
                    break
                if report is None:
                    continue
                yield self.event(log, report, observed.observed_at)
                await clock.asleep(COMMIT_DELAY_SECONDS)
                tracker.commit()
                await store.save(tracker)
                if lateness is not None:
                    await lateness.landed(observed.observed_at)
            if lateness is not None:
                await lateness.checked(observed.index, observed.check, observed.observed_at)
