"""When the triggerer writes a last-check record (``wait.last_check``): the write throttle.

One :class:`LastCheckRecorder` per check group (``check_groups.CheckGroup.last_check``: thousands of identical
waits share it) or per watcher. A check whose outcome kind (or error class) differs from the last written
record is written at once; a new error count at most once every :data:`REWRITE_SECONDS`; the same record
(a steady "not met") is refreshed only every :data:`REFRESH_SECONDS` — so the count shown may lag by a minute
and the check time by ten. 10,000 identical waits failing together make one write per kind change and per
minute, not one per wait per check.

A write never fails or slows a check: it runs in its own task, one at a time per recorder (a record due
while one is being written waits for it, and a newer one replaces it: a slow store never piles writes up),
and a failure is logged once per recorder (the error's class name only); the next check after
:data:`REWRITE_SECONDS` writes again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_smart_ext import clock
from airflow_smart_ext.conditions import Outcome
from airflow_smart_ext.triggers.transient_errors import ErrorRideOut
from airflow_smart_ext.wait_model.last_check import LastCheck, outcome_kind

log = logging.getLogger(__name__)

REWRITE_SECONDS = 60.0
REFRESH_SECONDS = 600.0

Write = Callable[[dict[str, Any]], Awaitable[None]]

_writes: set[asyncio.Future[None]] = set()  # writes in flight (a task nobody holds may be collected)


def last_check(original: Outcome, ridden: Outcome, ride_out: ErrorRideOut, at: float) -> LastCheck:
    """The record of one check: its outcome before (``original``) and after riding out errors (``ridden``)."""
    ridden_out = original.status == "error" and ridden.status == "negative"
    kind = outcome_kind(original.status, ridden_out)
    error = original.error
    return LastCheck(
        kind,
        at,
        at,
        errors=ride_out.consecutive_errors if ridden_out else 0,
        error_class=None if error is None else type(error).__name__,
        reason=ride_out.last_reason if ridden_out else None,
    )


class LastCheckRecorder:
    """The throttle of one group's (or watcher's) record; :meth:`record` is called after every check."""

    def __init__(
        self, rewrite_after: float = REWRITE_SECONDS, refresh_after: float = REFRESH_SECONDS
    ) -> None:
        self.rewrite_after = rewrite_after
        self.refresh_after = refresh_after
        self.current: LastCheck | None = None
        self._written: LastCheck | None = None
        self._written_at: float | None = None
        self._failed = False  # the last write failed: written again after ``rewrite_after``
        self._writing = False
        self._pending: tuple[Write, dict[str, Any]] | None = None  # due while a write ran: the newest
        self._failure_logged = False

    def due(self, check: LastCheck) -> LastCheck | None:
        """Take one check in; the record to write now, or None (throttled)."""
        self.current = check.after(self.current)
        now = clock.now()
        written, written_at = self._written, self._written_at
        if written is not None and written_at is not None and check.same_kind(written):
            news = self._failed or self.current.errors != written.errors
            if now - written_at < (self.rewrite_after if news else self.refresh_after):
                return None
        # taken before the write runs: the group's other members, served by the same check, write nothing
        self._written, self._written_at = self.current, now
        return self.current

    def record(self, check: LastCheck, write: Write | None) -> None:
        """Write ``check`` (merged into the recorder's state) when due, in the background; ``write`` None: the
        trigger has nowhere to write (no task instance: ``dag.test()``)."""
        if write is None:
            return
        due = self.due(check)
        if due is None:
            return
        if self._writing:
            self._pending = (write, due.to_record())
            return
        self._writing = True
        task = asyncio.ensure_future(self._write(write, due.to_record()))
        _writes.add(task)
        task.add_done_callback(_writes.discard)

    async def _write(self, write: Write, record: dict[str, Any]) -> None:
        try:
            while True:
                await self._write_once(write, record)
                if self._pending is None:
                    return
                (write, record), self._pending = self._pending, None
        finally:
            self._writing = False

    async def _write_once(self, write: Write, record: dict[str, Any]) -> None:
        try:
            await write(record)
            self._failed = False
        except Exception as err:  # never the check's concern; the text may quote what the write carried
            self._failed = True
            if not self._failure_logged:
                self._failure_logged = True
                log.warning(
                    "could not record the last check outcome (%s); the checks go on, later failures of this "
                    "record are not logged",
                    type(err).__name__,
                )
