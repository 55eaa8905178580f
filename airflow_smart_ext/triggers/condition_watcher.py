"""``ConditionWatcher``: an Airflow asset watcher (``BaseEventTrigger``) built from our check types.

It polls a condition on a backoff schedule (the sensors' checks, sharing, rate limits, time limits and outage
ride-out: ``conditions/``, ``check_groups``, ``transient_errors``) and emits one asset event per *new* value, the value in
the event's payload (the asset event's ``extra["payload"]``). The decisions are pure (``watermark``, and ``wait_model/``); this
module is the Airflow glue: the poll, the asset state store and the shared stream.

Two halves, so that 3.3's shared streams can run the first once per group of identical watchers:

* the poll (:meth:`ConditionWatcher._observations`): one check per due time, each check's value yielded;
  the schedule restarts at the initial interval when the value changes;
* the edge (``triggers/watcher_edge.py``, :class:`WatcherEdge`): per watcher, one event per value that differs
  from the watermark (``every_value=True``: one per value after it, in order), the watermark kept in the asset
  state store (3.3+) in two steps around each event (intent before, commit after), so a restart re-sends an
  event it may have lost and never one that was committed.

With ``every_value=True`` a SQL condition's query depends on the watermark (bound as its ``after`` parameter):
its poll reads the edge's watermark before each check, so it is never a shared stream, and watchers share a
query in-process only while their watermarks are equal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from airflow_smart_ext import clock, compat, units
from airflow_smart_ext.backoff import DEFAULT_POKE_INTERVAL, BackoffPolicy
from airflow_smart_ext.conditions import (
    make_shared_check,
    runtime,
    sharing_key,
    validate_check_spec,
)
from airflow_smart_ext.conditions.spec import check_type
from airflow_smart_ext.conditions.sql_values import SqlValuesCheck
from airflow_smart_ext.errors import error_type_paths, resolve_error_types
from airflow_smart_ext.triggers import check_groups, log_lines, watcher_lateness
from airflow_smart_ext.triggers.interpreters import LazyInterpreter
from airflow_smart_ext.triggers.last_check_writes import last_check
from airflow_smart_ext.triggers.transient_errors import ErrorRideOut
from airflow_smart_ext.triggers.watcher_edge import Observed, WatcherEdge
from airflow_smart_ext.triggers.watcher_lateness import PARSED_KEY
from airflow_smart_ext.triggers.watermark import ValueNotReportable, reportable_value
from airflow_smart_ext.wait_model import deferral_paths
from airflow_smart_ext.wait_model.parameters import (
    WatcherArgumentError,
    policy_arguments,
    transient_errors_problem,
    watcher_arguments,
)
from airflow_smart_ext.wait_model.sharing import coalescing_window, sharing_window_config, wait_seed
from airflow_smart_ext.wait_model.timeline import PollSchedule

CLASSPATH = deferral_paths.CONDITION_WATCHER

#: The kwargs only a watcher's edge uses: left out of the shared poll's key (identical polls share one stream).
EDGE_ONLY = ("value_key", "report_first_value", "state_key", "every_value", "start_after", "due", "on_late")
#: Each shared poll's readers (3.3+: shared stream key -> their labels), named in the poll's log lines.
_POLL_READERS: dict[Any, tuple[str, ...]] = {}


class ConditionWatcher(compat.locations.EventTriggerBase):
    """Emit one asset event per new value of a condition. Use it as an asset's watcher (Airflow >= 3.0)::

        Asset("orders_daily", watchers=[AssetWatcher(name="orders_loaded", trigger=ConditionWatcher(
            check=sql_condition(conn_id="warehouse", sql="SELECT max(day) FROM orders_loaded"),
            poke_interval=60, max_wait=600))])

    :param check: what to check: ``sql_condition(...)`` or ``sensor_condition(...)``
        (``airflow_smart_ext.watchers``), i.e. a check spec of one of our check types.
    :param poke_interval: seconds (or a timedelta) between checks at first, and again after each new value.
    :param max_wait: the cap the interval grows to (default: 10x ``poke_interval``, at most one hour).
    :param backoff_factor: growth of the interval per check without a new value (1: fixed).
    :param jitter: ``none``, ``full``, ``equal`` or ``decorrelated`` (seeded by the condition).
    :param splay: at most this many seconds before the first check (seeded).
    :param value_key: report ``value[value_key]`` of a sensor's XCom value dict instead of the whole value
        (``every_value=True``: of each item of the list).
    :param report_first_value: with no watermark stored yet, report the first value seen (True) or take it
        as the baseline (False). On Airflow 3.0-3.2 (no state store) this applies at every triggerer start.
    :param every_value: report every value after the watermark, one event each, in ascending order (a SQL
        condition's query returns them, the watermark bound as its ``after`` parameter; a sensor returns them
        as a list). False: only the latest value, intermediate values are not reported.
    :param start_after: ``every_value=True``: the watermark before the first value (only values after it are
        reported; a SQL condition needs one: it is bound as ``after`` until the first value is reported).
    :param check_timeout: seconds one check may run (None: ``[smart_ext] check_time_limit`` or derived).
    :param rate_limit: checks per second on the check's connection (None: ``[smart_ext]
        max_checks_per_second_per_connection``).
    :param transient_errors: extra exception types (or dotted paths) to ride out like outages.
    :param state_key: the watermark's name in the asset state store (default: derived from the check, so a
        changed query starts a new watermark; give one to keep it across such edits).
    :param share: share checks with identical watchers and waits in the triggerer.
    :param due: a ``DueTime`` with ``at=``: a new value is due by then on each business day, else the watcher
        says once that it is late (3.3+), calling ``on_late`` (module-level functions): docs/late-data.md.
    """

    def __init__(
        self,
        check: dict[str, Any],
        *,
        poke_interval: Any = DEFAULT_POKE_INTERVAL,
        max_wait: Any = None,
        backoff_factor: Any = None,
        jitter: Any = None,
        splay: Any = 0.0,
        value_key: str | None = None,
        report_first_value: bool = True,
        check_timeout: Any = None,
        rate_limit: float | None = None,
        transient_errors: Any = None,
        state_key: str | None = None,
        share: bool = True,
        every_value: bool = False,
        start_after: Any = None,
        due: Any = None,
        on_late: Any = None,
    ) -> None:
        compat.asset_watchers.require_asset_watchers(type(self).__name__)
        super().__init__()
        check, start_after, due, on_late = (
            compat.asset_watchers.decode_watcher_kwarg(value) for value in (check, start_after, due, on_late)
        )
        try:
            validate_check_spec(check)
        except ValueError as err:
            raise WatcherArgumentError(str(err)) from None
        arguments = watcher_arguments(
            poke_interval=poke_interval,
            backoff_factor=backoff_factor,
            jitter=jitter,
            transient_errors=transient_errors,
            max_wait=max_wait,
            splay=splay,
            value_key=value_key,
            report_first_value=report_first_value,
            check_timeout=check_timeout,
            rate_limit=rate_limit,
            state_key=state_key,
            share=share,
            every_value=every_value,
            start_after=start_after,
            condition=check["type"],
            success=check.get("success"),
        )
        try:
            # Imported here, in the triggerer too (DAGs-folder modules as on workers).
            self._transient_types = resolve_error_types(transient_errors, importer=runtime.import_object)
        except ValueError as err:
            raise WatcherArgumentError(str(err)) from None
        problem = transient_errors_problem(self._transient_types)  # the triggerer imports them by name
        if problem is not None:
            raise WatcherArgumentError(problem)
        self.check = dict(check)
        self.policy = BackoffPolicy.from_dict(arguments["policy"])
        self.value_key: str | None = arguments["value_key"]
        self.report_first_value: bool = arguments["report_first_value"]
        self.check_timeout: float | None = arguments["check_timeout"]
        self.rate_limit: float | None = arguments["rate_limit"]
        self.state_key: str | None = arguments["state_key"]
        self.share: bool = arguments["share"]
        self.every_value: bool = arguments["every_value"]
        self.start_after: Any = arguments["start_after"]
        # every_value on SQL: every row of the query, the watermark bound into its parameters at each check
        self._values_check = _values_check(self.check) if self.every_value else None
        self._edge = WatcherEdge(self)  # its watermark is what such a poll binds
        self.transient_errors = error_type_paths(self._transient_types)
        self._ride_out = ErrorRideOut(self._transient_types)
        self.due, self.on_late = watcher_lateness.due_arguments(due, on_late)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # The constructor's own arguments: Airflow identifies a watcher by (classpath, kwargs), so they are
        # normalised (seconds as floats) and stable.
        every_value = {"every_value": True, "start_after": self.start_after} if self.every_value else {}
        due = {} if self.due is None else {"due": self.due.to_dict(), "on_late": {PARSED_KEY: self.on_late}}
        return (
            CLASSPATH,
            {
                **every_value,  # only when set: a latest-value watcher keeps the identity it had
                **due,  # likewise
                "check": self.check,
                **policy_arguments(self.policy),
                "value_key": self.value_key,
                "report_first_value": self.report_first_value,
                "check_timeout": self.check_timeout,
                "rate_limit": self.rate_limit,
                "transient_errors": self.transient_errors,
                "state_key": self.state_key,
                "share": self.share,
            },
        )

    def __repr__(self) -> str:
        return f"<{CLASSPATH} check={compat.locations.redact_secrets(self.check)!r}>"

    # -- the poll (once per shared stream on 3.3+) --

    def _limits(self) -> check_groups.CheckLimits:
        rate = runtime.connection_rate_limit(self.rate_limit)
        return check_groups.CheckLimits(
            time_limit=runtime.check_time_limit(self.check_timeout, self.policy.initial), rate_limit=rate
        )

    def _poll_check(self) -> dict[str, Any]:
        """The check the next poll runs: every_value on SQL binds the watermark as the query's ``after``."""
        if self._values_check is None:
            return self.check
        tracker = self._edge.tracker
        after = self.start_after if tracker is None else tracker.mark.value
        return {**self._values_check, "parameters": _bind_after(self._values_check["parameters"], after)}

    def _join(self, check: dict[str, Any]) -> check_groups.CheckGroup:
        return check_groups.join(sharing_key(check), lambda: make_shared_check(check), self.share)

    async def _observations(self, log: Any) -> AsyncGenerator[Observed, None]:
        """Check on the schedule forever; yield each check's value (None when it saw none)."""
        check = self._poll_check()
        interpret = LazyInterpreter(check, log)  # its import errors are check errors
        window_config = sharing_window_config()
        limits = self._limits()
        schedule = PollSchedule(self.policy, wait_seed(self.check), clock.now())
        group = self._join(check)
        context = self.check.get("context", {})
        previous: Any = None
        served: check_groups.Observation | None = None  # it served the previous check: it serves no other
        valueless_logged = False
        try:
            while True:
                scheduled = schedule.next_check(clock.now())
                await clock.asleep(scheduled.at - clock.now())
                if self._values_check is not None:
                    check = self._poll_check()
                    if sharing_key(check) != group.key:  # the watermark moved: the group of the new query
                        group.leave()
                        group = self._join(check)
                failure = await interpret.failure()
                if failure is None:
                    window = coalescing_window(schedule.interval_before(scheduled), window_config)
                    observation, shared = await group.observe(
                        scheduled.at, window, context, limits=limits, served=served
                    )
                    served = observation
                    observed_at, outcome = (
                        observation.observed_at,
                        check_groups.interpret(observation, interpret),
                    )
                else:
                    observed_at, outcome, shared = clock.now(), failure, False
                schedule.done(scheduled)
                original, outcome = outcome, self._ride_out(log, scheduled.index, outcome)
                value = outcome.value if outcome.status == "positive" else None
                if outcome.status == "positive" and value is None and not valueless_logged:
                    valueless_logged = True  # once per poll: it says the same every check
                    log_lines.emit(
                        log,
                        "warning",
                        "the check is done but carries no value, so there is nothing to report: return "
                        "PokeReturnValue(is_done=True, xcom_value=<what arrived>) from the poke",
                    )
                if outcome.status not in ("positive", "negative"):
                    # A watcher has no task to fail: a permanent error or a failure criterion is logged and the
                    # schedule goes on (fix the check; the watermark waits).
                    log_lines.emit(
                        log,
                        "error",
                        "check #%d: %s: %s",
                        scheduled.index,
                        outcome.status,
                        outcome.message,
                    )
                changed = value is not None and (previous is None or _same(value) != _same(previous))
                if changed:
                    schedule.restart(observed_at)
                if value is not None:
                    previous = value
                log_lines.emit(
                    log,
                    "info",
                    f"check #{scheduled.index} at {units.iso(scheduled.at)}{' shared' if shared else ''}: "
                    f"{outcome.status}{f' ({outcome.message})' if outcome.message else ''}"
                    f"{'; new value, the schedule restarts' if changed else ''}; group of {group.subscribers}",
                )
                recorded = last_check(original, outcome, self._ride_out, observed_at)
                yield Observed(value, observed_at, recorded, scheduled.index)
        finally:
            group.leave()

    # -- Airflow's entry points --

    async def run(self) -> AsyncIterator[Any]:
        """One watcher, its own poll (Airflow 3.0-3.2, or ``share=False``): our in-process group still
        shares the checks with identical watchers and waits."""
        log = self._labelled_log()
        observations = self._observations(log)
        try:
            async for event in self._edge.events(observations, log):
                yield event
        finally:
            await observations.aclose()

    def shared_stream_key(self) -> Any:
        """3.3+: identical polls share one stream (the key leaves out what only the edge uses)."""
        if (
            not (compat.asset_watchers.SHARED_STREAMS_SUPPORTED and self.share)
            or self._values_check is not None
        ):
            return None  # every_value on SQL: each poll binds its own watermark
        _, kwargs = self.serialize()
        poll = {name: kwargs[name] for name in kwargs if name not in EDGE_ONLY}
        return (CLASSPATH, json.dumps(poll, sort_keys=True, default=str))

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        """3.3+: the group's one poll (Airflow passes one member's kwargs; the key fixes the poll's)."""
        watcher = cls(**kwargs)
        key = watcher.shared_stream_key()
        own = watcher._label()  # until its readers are known (it has no trigger id nor assets of its own)
        log = log_lines.Labelled(watcher.log, lambda: "; ".join(_POLL_READERS.get(key) or (own,)))
        observations = watcher._observations(log)
        try:
            async for observed in observations:
                yield observed
        finally:
            await observations.aclose()

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """3.3+: this watcher's edge over the group's poll."""
        key, label = self.shared_stream_key(), self._label()
        _POLL_READERS[key] = (*_POLL_READERS.get(key, ()), label)
        try:
            async for event in self._edge.events(shared_stream, log_lines.Labelled(self.log, lambda: label)):
                yield event
        finally:
            readers = list(_POLL_READERS.get(key, ()))
            readers.remove(label)
            if readers:
                _POLL_READERS[key] = tuple(readers)
            else:
                _POLL_READERS.pop(key, None)

    # -- who wrote a line --

    def _label(self) -> str:
        """The watcher and its assets, the prefix of each of its log lines (never the check's parameters).

        Airflow tells a trigger neither its ``AssetWatcher``'s name nor, before 3.3, its assets: the watcher
        is named by its ``state_key`` when given (give it the watcher's name), else by what it checks and
        the trigger id."""
        if self.state_key:
            name = repr(self.state_key)
        else:
            kind = check_type(self.check)
            what = kind.sensor_class(self.check) or f"{kind.name} on {kind.conn_id(self.check)}"
            trigger_id = getattr(self, "trigger_id", None)
            name = f"<{what}{'' if trigger_id is None else f', trigger {trigger_id}'}>"
        assets = compat.asset_watchers.watched_assets(self)
        return (
            f"watcher {name} on {'asset ' + ', '.join(assets) if assets else '<not named by this Airflow>'}"
        )

    def _labelled_log(self) -> Any:
        label = self._label()  # at run time: the triggerer sets the trigger id and the assets after __init__
        return log_lines.Labelled(self.log, lambda: label)


def _values_check(check: dict[str, Any]) -> dict[str, Any] | None:
    """A SQL condition as every_value runs it (every row; the table refused its ``success``); None for a
    sensor's (its XCom list is the values, the poll unchanged)."""
    if check["type"] != "sql":
        return None
    keys = SqlValuesCheck.keys[1:]
    return {"type": SqlValuesCheck.name, **{key: check[key] for key in keys}}


def _bind_after(parameters: Any, after: Any) -> Any:
    """The query's parameters with the watermark bound: as ``after`` (named styles: ``:after``,
    ``%(after)s``) unless they are a list (positional styles: ``?``, ``%s``), then as the last one."""
    if isinstance(parameters, list):
        return [*parameters, after]
    return {**(parameters or {}), "after": after}


def _same(value: Any) -> Any:
    """A comparable form of a raw value (the poll compares values before the edge normalises them)."""
    try:
        return reportable_value(value)
    except ValueNotReportable:
        return repr(value)


__all__ = ["CLASSPATH", "ConditionWatcher"]
