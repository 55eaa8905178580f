"""DAGs, runs and task instances of one harness Airflow (``Runs``): wait for a DAG to parse, pause, trigger,
wait for runs, read task instances, trigger owners and task logs."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airflow_harness.state import TERMINAL_RUN_STATES, AirflowEnvError, EnvState

# Keys every 3.x task log record repeats; dropped when rendering JSON lines as text.
_LOG_CONTEXT_KEYS = frozenset(
    {
        "event",
        "timestamp",
        "level",
        "logger",
        "chan",
        "filename",
        "lineno",
        "dag_id",
        "task_id",
        "run_id",
        "map_index",
        "try_number",
        "ti_id",
    }
)


class Runs(EnvState):
    def import_errors(self) -> list[str]:
        rows = self.query("SELECT filename, stacktrace FROM import_error")
        return [f"{filename}:\n{stacktrace}" for filename, stacktrace in rows]

    def _dag_files_mentioning(self, dag_id: str) -> list[str]:
        return [str(p) for p in self.dags_folder.glob("*.py") if dag_id in p.read_text(errors="replace")]

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> None:
        """Until the DAG is parsed and serialized; raise early with the import error of its file."""
        candidates = self._dag_files_mentioning(dag_id)

        def serialized() -> bool:
            if self.query("SELECT 1 FROM serialized_dag WHERE dag_id = %s", (dag_id,)) and self.query(
                "SELECT 1 FROM dag WHERE dag_id = %s", (dag_id,)
            ):
                return True
            errors = [e for e in self.import_errors() if any(e.startswith(c + ":") for c in candidates)]
            if errors:
                raise AirflowEnvError(f"DAG {dag_id!r} failed to import:\n" + "\n".join(errors))
            return False

        self.poll(
            serialized,
            timeout,
            lambda: (
                f"DAG {dag_id!r} to be serialized (files mentioning it: {candidates}); import errors: "
                f"{self.import_errors()}"
            ),
            interval=0.5,
        )

    def import_error_of(self, source: Path, dag_id: str, timeout: float = 120) -> str:
        """Add the DAG file ``source`` (text that must fail at parse) and return its import error's text;
        raise if it imports."""
        self.add_dag_file(source)
        try:
            self.wait_for_dag(dag_id, timeout=timeout)
        except AirflowEnvError as failed:
            return str(failed)
        raise AirflowEnvError(f"{source.name} imported; it should have failed at parse")

    def add_dag_file(self, path: Path | str, name: str | None = None) -> Path:
        """Copy one more DAG file into the running env's DAGs folder (picked up on the next dir listing)."""
        target = self.dags_folder / (name or Path(path).name)
        shutil.copy(path, target)  # a fresh mtime: a changed file is parsed again at once
        return target

    def dag_ids(self) -> list[str]:
        return [r[0] for r in self.query("SELECT dag_id FROM serialized_dag ORDER BY dag_id")]

    def unpause(self, dag_id: str) -> None:
        self.set_paused(dag_id, False)

    def pause(self, dag_id: str) -> None:
        self.set_paused(dag_id, True)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        if self.is_airflow3:
            self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})
        else:  # the 2.11 CLI would re-parse the whole DAGs folder; the scheduler reads this column
            self.execute("UPDATE dag SET is_paused = %s WHERE dag_id = %s", (paused, dag_id))
        # Its file parsed again now, not at the next periodic parse (PARSE_UNCHANGED_FILES_EVERY): Airflow 3
        # starts or stops a DAG's asset watchers when it parses the file of an unpaused or paused DAG.
        for (fileloc,) in self.query("SELECT fileloc FROM dag WHERE dag_id = %s", (dag_id,)):
            with contextlib.suppress(OSError):
                os.utime(fileloc)

    def trigger(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, logical_date: dt.datetime | None = None
    ) -> str:
        """Create a manual run; returns its run_id. 3.x: REST; 2.11: ``airflow dags trigger``."""
        if logical_date is not None and logical_date.tzinfo is None:
            raise ValueError("logical_date must be timezone-aware")
        if self.is_airflow3:
            body: dict[str, Any] = {
                "logical_date": logical_date.isoformat() if logical_date else None,
                "conf": dict(conf or {}),
            }
            return str(self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"])
        moment = logical_date or dt.datetime.now(dt.timezone.utc)
        run_id = f"manual__{moment.isoformat()}"
        args = ["dags", "trigger", dag_id, "--run-id", run_id, "--exec-date", moment.isoformat()]
        if conf:
            args += ["--conf", json.dumps(dict(conf))]
        self.airflow_cli(*args)
        return run_id

    def _run_columns(self) -> str:
        logical = "logical_date" if self.is_airflow3 else "execution_date AS logical_date"
        run_after = "run_after" if self.is_airflow3 else "execution_date AS run_after"
        return (
            f"run_id, run_type, state, {logical}, data_interval_start, data_interval_end, {run_after}, "
            "start_date, end_date, queued_at, conf"
        )

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """All runs of a DAG ordered by logical date / run_after (aware datetimes; 2.11 run_after = logical)."""
        order = "run_after, id" if self.is_airflow3 else "execution_date, id"
        return self.query_dicts(
            f"SELECT {self._run_columns()} FROM dag_run WHERE dag_id = %s ORDER BY {order}", (dag_id,)
        )

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        rows = self.query_dicts(
            f"SELECT {self._run_columns()} FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id)
        )
        if not rows:
            raise AirflowEnvError(f"no dag run {dag_id}/{run_id}")
        return rows[0]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        """Until the run is success/failed; returns that state (raises on timeout with the evidence)."""

        def state() -> Any:
            rows = self.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
            return rows[0][0] if rows else None

        def evidence() -> str:
            tasks = [(t["task_id"], t["state"]) for t in self.task_instances(dag_id, run_id)]
            return f"run {dag_id}/{run_id} to finish: state={state()}; tasks={tasks}"

        def finished() -> str | None:
            now = state()
            return str(now) if now in TERMINAL_RUN_STATES else None

        return str(self.poll(finished, timeout, evidence, interval=0.5))

    def wait_runs(self, dag_id: str, count: int, timeout: float = 300) -> list[dict[str, Any]]:
        """Until at least ``count`` runs of the DAG are terminal; returns all runs (``dag_runs``)."""

        def enough() -> list[dict[str, Any]] | None:
            runs = self.dag_runs(dag_id)
            return runs if sum(r["state"] in TERMINAL_RUN_STATES for r in runs) >= count else None

        def evidence() -> str:
            return f"{count} terminal runs of {dag_id}: {[(r['run_id'], r['state']) for r in self.dag_runs(dag_id)]}"

        runs: list[dict[str, Any]] = self.poll(enough, timeout, evidence, interval=0.5)
        return runs

    def task_instances(self, dag_id: str, run_id: str | None = None) -> list[dict[str, Any]]:
        sql = (
            "SELECT task_id, run_id, map_index, state, try_number, start_date, end_date, duration, "
            "next_method, trigger_id, queued_dttm FROM task_instance WHERE dag_id = %s"
        )
        params: list[Any] = [dag_id]
        if run_id is not None:
            sql += " AND run_id = %s"
            params.append(run_id)
        return self.query_dicts(sql + " ORDER BY run_id, task_id, map_index", params)

    def poll(
        self,
        predicate: Callable[[], Any],
        timeout: float,
        what: str | Callable[[], str],
        interval: float = 1.0,
    ) -> Any:
        """``predicate()``'s first truthy value, asked every ``interval`` seconds; an ``AirflowEnvError``
        naming ``what`` (text, or a function giving the evidence at that moment) after ``timeout`` seconds, or at
        once when a component died. Every wait of the harness is this loop."""
        deadline = time.monotonic() + timeout
        while not (found := predicate()):
            if time.monotonic() > deadline:
                raise AirflowEnvError(
                    f"timed out after {timeout:.0f}s waiting for {what if isinstance(what, str) else what()}"
                )
            self.check_components()
            time.sleep(interval)
        return found

    def trigger_owners(self) -> list[dict[str, Any]]:
        """Which triggerer holds which task's trigger (``trigger.triggerer_id`` joined to ``job``), one row
        per trigger of a task instance: ``trigger_id``, ``triggerer_id`` (a job id; None = unassigned),
        ``component`` (this harness's name for that job, e.g. ``triggerer-2``; None when unassigned or not
        started here), ``latest_heartbeat`` of that job, ``dag_id``, ``run_id``, ``task_id``, ``map_index``."""
        rows = self.query_dicts(
            "SELECT t.id AS trigger_id, t.triggerer_id, j.latest_heartbeat, ti.dag_id, ti.run_id, ti.task_id, "
            'ti.map_index FROM "trigger" t JOIN task_instance ti ON ti.trigger_id = t.id '
            "LEFT JOIN job j ON j.id = t.triggerer_id ORDER BY t.id"
        )
        names = {c.job_id: name for name, c in self.components.items() if c.job_id is not None}
        for row in rows:
            row["component"] = names.get(row["triggerer_id"])
        return rows

    def task_log_paths(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> list[Path]:
        """Task log file of one try plus (3.x) the triggerer's ``.trigger.<id>.log`` files next to it."""
        folder = self.log_folder / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            folder = folder / f"map_index={map_index}"
        main = folder / f"attempt={try_number}.log"
        extra = sorted(folder.glob(f"attempt={try_number}.log.*"))
        return ([main] if main.exists() else []) + extra

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> str:
        """Text of a try's log files on disk (3.x JSON lines rendered as ``[ts] LEVEL - event k=v``)."""
        parts = []
        for path in self.task_log_paths(dag_id, run_id, task_id, try_number, map_index):
            lines = path.read_text(errors="replace").splitlines()
            parts.append("\n".join(_render_log_line(line) for line in lines))
        return "\n".join(parts)


def _render_log_line(line: str) -> str:
    """3.x writes task logs as JSON lines; render them like 2.x text so tests and the demo can grep."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return line
    try:
        record = json.loads(stripped)
    except ValueError:
        return line
    if not isinstance(record, dict) or "event" not in record:
        return line
    extras = {k: v for k, v in record.items() if k not in _LOG_CONTEXT_KEYS}
    text = f"[{record.get('timestamp', '')}] {str(record.get('level', '')).upper()} - {record['event']}"
    if extras:
        text += " " + " ".join(f"{k}={v}" for k, v in extras.items())
    return text
