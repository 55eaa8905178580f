"""A real Airflow for tests and scripts: scheduler, dag-processor, triggerer(s) (+ api-server on 3.x).

One ``AirflowEnv`` = one temporary ``AIRFLOW_HOME`` with its own metadata DB (SQLite file, or a fresh
PostgreSQL database created from ``SMART_EXT_TEST_PG_DSN``), its own free ports and real processes started
with the running interpreter (``python -m airflow ...``). States are polled with SQL on the metadata DB (a
CLI call costs 2-3 s); runs are triggered through the REST API on 3.x and the CLI on 2.11 (no webserver).
Every process runs in its own process group and is killed by PID on ``stop()``, also on failure.

Usable from pytest (tests/integration/conftest.py) and from scripts (scripts/demo.py)::

    with AirflowEnv(dag_sources=[Path("example_dags")]) as env:
        env.wait_for_dag("my_dag"); env.unpause("my_dag")
        run_id = env.trigger("my_dag"); assert env.wait_run("my_dag", run_id) == "success"
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_harness.deaths import ComponentDeath, known_defect
from airflow_harness.redis_broker import RedisBroker
from airflow_harness.sqlite_connect import BUSY_TIMEOUT_SECONDS, HOSTNAME_ENV
from airflow_smart_ext.compat import AIRFLOW_V_3_0_PLUS

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DAGS_DIR = REPO_ROOT / "example_dags"
TEST_DAGS_DIR = REPO_ROOT / "tests" / "integration" / "dags"
PG_DSN_ENV = "SMART_EXT_TEST_PG_DSN"

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
TERMINAL_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})

# REST calls outlast SQLite's busy timeout: on SQLite the api-server may wait that long for the lock first.
API_TIMEOUT = BUSY_TIMEOUT_SECONDS + 30.0

# Seconds between two samples of the task_instance table (state_history). Deferral and reschedule phases
# last at least one triggerer / scheduler loop (~1 s), and a worker phase at least a task process's start
# (seconds), so 0.25 s sees them; each sample reads the whole table (thousands of rows late in a session).
STATE_SAMPLE_INTERVAL = 0.25
# How often a DAG file is parsed again while unchanged (Airflow's default: 30 s). Airflow parses each file at
# start-up and again as soon as it changes (the default "modified_time" sort mode), which is all a test needs;
# the periodic re-parse of ~47 unchanged files took ~0.4 core per Airflow in CI's rehearsal (2 cores, 2-3
# Airflows at once). What Airflow decides only at a parse (a watcher starts or stops when its DAG is
# unpaused or paused) the harness asks for: set_paused touches the DAG's file.
PARSE_UNCHANGED_FILES_EVERY = "600"
# The graceful part of tearing an Airflow down (every component at once): nothing is checked after it, and
# Airflow 3.3's triggerer waits >10 s for its triggers to clean up after SIGTERM (~12 s per teardown in CI).
TEARDOWN_GRACE = 2.0

_DATETIME_COLUMNS = frozenset(
    {
        "logical_date",
        "execution_date",
        "data_interval_start",
        "data_interval_end",
        "run_after",
        "start_date",
        "end_date",
        "queued_at",
        "last_scheduling_decision",
        "queued_dttm",
        "reschedule_date",
        "latest_heartbeat",
        "timestamp",
        "partition_date",
    }
)


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


class AirflowEnvError(RuntimeError):
    """The harness could not start Airflow, or a wait failed; the message carries the evidence."""


class ComponentDeadError(AirflowEnvError):
    """A component died on its own (``AirflowEnv.deaths``): not restarted yet, or it could not be restarted
    (``AirflowEnv.dead`` says which and why). The message names each one and its cause."""


# Every AirflowEnv started in this process, in order (the pytest hooks check each one for deaths; module-scoped
# envs too, also after their stop(), which records what died before it).
_WATCHED: list[AirflowEnv] = []


def watched_envs() -> list[AirflowEnv]:
    return list(_WATCHED)


def unwatch(env: AirflowEnv) -> None:
    with contextlib.suppress(ValueError):
        _WATCHED.remove(env)


def free_port() -> int:
    """A TCP port nobody listens on right now (several harnesses run concurrently on one machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _to_datetime(value: Any) -> Any:
    """Metadata DB timestamps -> aware UTC datetimes (SQLite returns strings, PostgreSQL datetimes)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)
    return value


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


class _Component:
    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped_on_purpose = False
        self.job_id: int | None = None  # its job row, once seen (scheduler, triggerers, dag-processor)
        self.restarts = 0  # times restart_dead() restarted this component after it died on its own
        self.death: ComponentDeath | None = None  # its exit, once detect_deaths() saw it

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class AirflowEnv:
    """One real Airflow: see the module docstring. Start with ``start()`` or use as a context manager.

    Parameters:
        dag_sources: folders whose ``*.py`` files are copied into the DAGs folder (default: example_dags/
            and tests/integration/dags/), or single files.
        home: AIRFLOW_HOME to use (created; wiped first when ``fresh_home``). Default: a new temp dir that
            ``stop()`` removes.
        pg_dsn: PostgreSQL server DSN (``postgresql://user[:pw]@host:port/db``); a fresh database is created
            on it for this env and dropped on ``stop()``. Default: env ``SMART_EXT_TEST_PG_DSN``; empty ->
            SQLite (2.11: SequentialExecutor, one task at a time; 3.x: LocalExecutor).
        api_port: 3.x api-server port (default: a free one). ``webserver_port``: 2.11 webserver port when
            ``with_webserver`` (the UI is not started on 2.11 otherwise). ``bind_host``: their listen address.
        ui_users: real logins for browser tests, ``{username: dag_id_prefix or None}``; None = admin, a
            prefix = may read only DAGs whose id starts with it. Passwords in ``ui_passwords``. 3.x: the
            simple auth manager with these users (airflow_harness/ui_auth.py adds the prefix rule; REST
            calls then log in as the admin); 2.11: starts the webserver, FAB users are created on ``start()``
            and ``grant_ui_dag_access()`` gives the prefixed users their DAGs once those are parsed.
        ui_menu_items: 2.11: plugin menu entries the prefixed users may see (FAB ``menu_access``; an admin
            grants these to non-admin roles in a real deployment too).
        extra_env: additional ``AIRFLOW__...`` settings (override the harness defaults).
        triggerers: how many triggerers (HA): components ``triggerer``, ``triggerer-2``, ... each with its
            own log and trigger log server port; more than one needs PostgreSQL (SQLite allows one writer).
            ``trigger_owners()`` says which of them holds which trigger.
        triggerer_args: extra command-line arguments per triggerer name (e.g. ``{"triggerer-2":
            ["--queues=q1"]}``).
        schedulers: how many schedulers (HA): ``scheduler``, ``scheduler-2``, ...; more than one needs PostgreSQL.
        celery_workers: 0 (default): the LocalExecutor (SequentialExecutor on 2.11 with SQLite). N > 0: the
            CeleryExecutor (Airflow 3, PostgreSQL) with N workers ``celery-worker``, ``celery-worker-2``, ...,
            each running ``celery_concurrency`` tasks, on a private Redis broker (``broker``,
            airflow_harness/redis_broker.py) and a PostgreSQL result backend. Each worker records its own
            name as the task instance's ``hostname`` (``[core] hostname_callable``), so a test sees which
            worker ran a try.
    """

    def __init__(
        self,
        dag_sources: Sequence[Path | str] | None = None,
        *,
        home: Path | str | None = None,
        fresh_home: bool = True,
        pg_dsn: str | None = None,
        api_port: int | None = None,
        with_webserver: bool = False,
        webserver_port: int | None = None,
        parallelism: int = 4,
        bind_host: str = "127.0.0.1",
        extra_env: Mapping[str, str] | None = None,
        ui_users: Mapping[str, str | None] | None = None,
        ui_menu_items: Sequence[str] = (),
        triggerers: int = 1,
        triggerer_args: Mapping[str, Sequence[str]] | None = None,
        schedulers: int = 1,
        celery_workers: int = 0,
        celery_concurrency: int = 8,
        state_sample_interval: float | None = STATE_SAMPLE_INTERVAL,
    ) -> None:
        import airflow

        server_pg_dsn = os.environ.get(PG_DSN_ENV, "") if pg_dsn is None else pg_dsn
        if triggerers < 1 or (triggerers > 1 and not server_pg_dsn):
            raise AirflowEnvError(
                f"triggerers={triggerers}: HA triggerers need PostgreSQL (set {PG_DSN_ENV} or pg_dsn); "
                "SQLite runs exactly one"
            )
        if schedulers < 1 or (schedulers > 1 and not server_pg_dsn):
            raise AirflowEnvError(
                f"schedulers={schedulers}: HA schedulers need PostgreSQL (set {PG_DSN_ENV})"
            )
        if celery_workers and not (server_pg_dsn and AIRFLOW_V_3_0_PLUS):
            raise AirflowEnvError(
                f"celery_workers={celery_workers}: the CeleryExecutor topology needs Airflow 3 and PostgreSQL "
                f"(set {PG_DSN_ENV})"
            )
        self.airflow_version: str = airflow.__version__
        self.is_airflow3: bool = AIRFLOW_V_3_0_PLUS
        self._own_home = home is None
        self.home = Path(home).resolve() if home else Path(tempfile.mkdtemp(prefix="smart-ext-airflow-"))
        if home and fresh_home and self.home.exists():
            shutil.rmtree(self.home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.dags_folder = self.home / "dags"
        self.log_folder = self.home / "logs"
        self.component_log_folder = self.home / "component-logs"
        self.dag_sources = [Path(p) for p in (dag_sources or [EXAMPLE_DAGS_DIR, TEST_DAGS_DIR])]
        self._server_pg_dsn = server_pg_dsn
        self.pg_database: str | None = None
        self._pg_migrated = False  # the database was copied from a migrated template
        self.sql_alchemy_conn = ""
        self.api_port = api_port or (free_port() if self.is_airflow3 else None)
        self.ui_users = dict(ui_users or {})
        self.ui_passwords = {user: f"pw-{secrets.token_hex(8)}" for user in self.ui_users}
        self.ui_menu_items = list(ui_menu_items)
        self._api_token: str | None = None
        self.with_webserver = with_webserver or (bool(self.ui_users) and not self.is_airflow3)
        self.webserver_port = webserver_port or (free_port() if with_webserver else None)
        self.parallelism = parallelism
        self.bind_host = bind_host
        self.extra_env = dict(extra_env or {})
        self.triggerers = triggerers
        self.triggerer_args = {name: list(args) for name, args in (triggerer_args or {}).items()}
        self.schedulers = schedulers
        self.celery_workers = celery_workers
        self.celery_concurrency = celery_concurrency
        self.broker: RedisBroker | None = RedisBroker(self.home / "redis") if celery_workers else None
        self.components: dict[str, _Component] = {}
        # Component -> the python that runs it (default: sys.executable). A rolling upgrade restarts one
        # component at a time with another venv's python (tests/integration/test_distributed_upgrade_live.py).
        self.interpreters: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self._started = False
        self._stopped = False
        self._local = threading.local()
        self._history: dict[tuple[str, str, str, int], list[str]] = {}
        self._history_lock = threading.Lock()
        self._sampler: threading.Thread | None = None
        self._sampler_stop = threading.Event()
        # None: no state history (a bench of 10,000 task instances would read them all 10 times a second).
        if state_sample_interval is not None and not state_sample_interval > 0:
            raise AirflowEnvError(
                f"state_sample_interval must be > 0 seconds or None, not {state_sample_interval!r}"
            )
        self.state_sample_interval = state_sample_interval
        self._all_connections: list[Any] = []
        self._final_log_tails: dict[str, str] | None = None
        # detect_deaths(): every component that exited on its own, once each; restart_dead(): those it could
        # not restart (name -> cause), every later check_components() raises naming them.
        self.deaths: list[ComponentDeath] = []
        self.dead: dict[str, str] = {}
        # supervised(): while set, a known Airflow defect's death is restarted at once (the reason, shown).
        self._supervisor: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> AirflowEnv:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def uses_postgres(self) -> bool:
        return bool(self._server_pg_dsn)

    @property
    def executor(self) -> str:
        if self.celery_workers:
            return "CeleryExecutor"
        if self.uses_postgres or self.is_airflow3:
            return "LocalExecutor"
        return "SequentialExecutor"  # 2.11 refuses LocalExecutor on SQLite

    @property
    def api_url(self) -> str | None:
        """3.x: base URL of the api-server (REST + Execution API + UI)."""
        return f"http://127.0.0.1:{self.api_port}" if self.is_airflow3 else None

    @property
    def component_names(self) -> list[str]:
        names = [*self.scheduler_names, *self.triggerer_names, *self.worker_names]
        if self.is_airflow3:
            names += ["dag-processor", "api-server"]
        elif self.with_webserver:
            names.append("webserver")
        return names

    @property
    def triggerer_names(self) -> list[str]:
        return _numbered("triggerer", self.triggerers)

    @property
    def scheduler_names(self) -> list[str]:
        return _numbered("scheduler", self.schedulers)

    @property
    def worker_names(self) -> list[str]:
        """The Celery workers (none with the LocalExecutor)."""
        return _numbered("celery-worker", self.celery_workers)

    def start(self, timeout: float = 180.0) -> AirflowEnv:
        """Prepare AIRFLOW_HOME, migrate the DB, start every component and wait until all are healthy."""
        if self._started:
            return self
        self._started = True
        _WATCHED.append(self)
        try:
            self._prepare_database()
            self._prepare_dags_folder()
            if self.broker is not None:  # first: it binds its port now, and the settings name it
                self.broker.start()
            self.env = self._build_env()
            self.component_log_folder.mkdir(parents=True, exist_ok=True)
            self._migrate_database()
            for name in self.component_names:
                # Several schedulers or triggerers start one after another: each one's job row is then known
                # by its id.
                self.start_component(name, wait=len(self._same_kind(name)) > 1)
            self.wait_healthy(timeout=timeout)
            if self.ui_users and not self.is_airflow3:
                self._run_fab_users("create")
            if self.state_sample_interval is not None:
                self._sampler = threading.Thread(
                    target=self._sample_states, name="airflow-env-sampler", daemon=True
                )
                self._sampler.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every component's process group (by PID), stop the sampler, drop the PG database."""
        if self._stopped:
            return
        if self._started and self.env:  # what died since the last check is reported, not killed silently
            with contextlib.suppress(Exception):
                self.detect_deaths()
        self._stopped = True
        self._sampler_stop.set()
        self.stop_components(list(self.components), grace=TEARDOWN_GRACE)
        if self.broker is not None:
            self.broker.stop()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        self._close_connections()
        self._final_log_tails = self.component_logs_tail()
        if self.pg_database:
            with contextlib.suppress(Exception):
                self._drop_pg_database()
        if self._own_home and os.environ.get("SMART_EXT_KEEP_HOME") != "1":
            shutil.rmtree(self.home, ignore_errors=True)

    # ------------------------------------------------------------------ configuration
    def _prepare_database(self) -> None:
        if not self.uses_postgres:
            self.sql_alchemy_conn = f"sqlite:///{self.home / 'airflow.db'}"
            return
        import psycopg2
        from sqlalchemy.engine import make_url

        self.pg_database = f"smart_ext_{os.getpid()}_{secrets.token_hex(4)}"
        server = psycopg2.connect(self._server_pg_dsn)
        try:
            server.autocommit = True
            with server.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self._pg_template,))
                self._pg_migrated = cur.fetchone() is not None
                template = f' TEMPLATE "{self._pg_template}"' if self._pg_migrated else ""
                cur.execute(f'CREATE DATABASE "{self.pg_database}"{template}')
        finally:
            server.close()
        url = make_url(self._server_pg_dsn).set(drivername="postgresql+psycopg2", database=self.pg_database)
        self.sql_alchemy_conn = url.render_as_string(hide_password=False)

    def _migrate_database(self) -> None:
        """``airflow db migrate``, once per Airflow version and venv: the migrated database is cached and
        copied (a migration costs 3-40 s of CPU on a busy 2-core machine, a copy well under a second). On
        SQLite the cache is a file; on PostgreSQL a template database on the same server (a private cluster
        of ``scripts/dev.py`` is removed with it; on a server of your own it stays, named smart_ext_template_*)."""
        if self.uses_postgres:
            if self._pg_migrated:
                return
            self.airflow_cli("db", "migrate", timeout=300)
            self._cache_pg_template()
            return
        cache_dir = Path(
            os.environ.get("SMART_EXT_DB_CACHE", Path(tempfile.gettempdir()) / "smart-ext-db-cache")
        )
        template = cache_dir / f"airflow-{self._migration_key}.db"
        database = self.home / "airflow.db"
        if template.exists():
            shutil.copyfile(template, database)
            return
        self.airflow_cli("db", "migrate", timeout=300)
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = template.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(database, partial)
        os.replace(partial, template)  # atomic: concurrent harnesses never see a half-written template

    @property
    def _migration_key(self) -> str:
        """What a migrated database depends on: Airflow's version and the venv whose Airflow migrated it."""
        return f"{self.airflow_version}-{Path(sys.executable).parent.parent.name}"

    @property
    def _pg_template(self) -> str:
        key = hashlib.sha256(f"{self._migration_key}:{Path(sys.executable).resolve()}".encode()).hexdigest()
        return f"smart_ext_template_{key[:16]}"

    def _cache_pg_template(self) -> None:
        """Copy the just-migrated database (no session is open on it yet) as the template of later ones.
        Best effort: a concurrent harness may be copying it too, and a cache miss only costs a migration."""
        import psycopg2

        server = psycopg2.connect(self._server_pg_dsn)
        try:
            server.autocommit = True
            with server.cursor() as cur:
                partial = f"{self._pg_template}_{os.getpid()}"  # renamed when whole: never half a template
                try:
                    cur.execute(f'CREATE DATABASE "{partial}" TEMPLATE "{self.pg_database}"')
                    cur.execute(f'ALTER DATABASE "{partial}" RENAME TO "{self._pg_template}"')
                except psycopg2.Error:
                    cur.execute(f'DROP DATABASE IF EXISTS "{partial}"')
        finally:
            server.close()

    def _drop_pg_database(self) -> None:
        import psycopg2

        server = psycopg2.connect(self._server_pg_dsn)
        try:
            server.autocommit = True
            with server.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{self.pg_database}" WITH (FORCE)')
        finally:
            server.close()

    def _prepare_dags_folder(self) -> None:
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        for source in self.dag_sources:
            files = [source] if source.is_file() else sorted(source.glob("*.py")) if source.is_dir() else []
            for file in files:
                if file.name != "__init__.py":
                    shutil.copy2(file, self.dags_folder / file.name)

    def add_dag_file(self, path: Path | str, name: str | None = None) -> Path:
        """Copy one more DAG file into the running env's DAGs folder (picked up on the next dir listing)."""
        target = self.dags_folder / (name or Path(path).name)
        shutil.copy(path, target)  # a fresh mtime: a changed file is parsed again at once
        return target

    def _build_env(self) -> dict[str, str]:
        from cryptography.fernet import Fernet

        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))
        }
        bin_dir = str(Path(sys.executable).parent)  # 2.11 runs tasks as `airflow tasks run` subprocesses
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["AIRFLOW_HOME"] = str(self.home)
        env["PYTHONUNBUFFERED"] = "1"
        settings = {
            "CORE__DAGS_FOLDER": str(self.dags_folder),
            "CORE__LOAD_EXAMPLES": "False",
            "CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "CORE__EXECUTOR": self.executor,
            "CORE__PARALLELISM": str(self.parallelism),
            # No ~50 example connections (slower migrate; the DB file is also cached as a template).
            "DATABASE__LOAD_DEFAULT_CONNECTIONS": "False",
            "CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "DATABASE__SQL_ALCHEMY_CONN": self.sql_alchemy_conn,
            # SQLite's busy timeout (airflow_harness/sqlite_connect.py); the PostgreSQL driver has no such arg.
            **({} if self.uses_postgres else {"DATABASE__SQL_ALCHEMY_CONNECT_ARGS": _SQLITE_CONNECT_ARGS}),
            "LOGGING__BASE_LOG_FOLDER": str(self.log_folder),
            # Default 8793/8794 would collide between concurrent harnesses.
            "LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "5",
            "TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        }
        if self.is_airflow3:
            settings.update(
                {
                    "DAG_PROCESSOR__REFRESH_INTERVAL": "3",
                    "DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": PARSE_UNCHANGED_FILES_EVERY,
                    "DAG_PROCESSOR__PRINT_STATS_INTERVAL": "600",
                    "DAG_PROCESSOR__PARSING_PROCESSES": "2",
                    "CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
                    # 3.3.2 race: a trigger firing within ~5 s of deferral can make the scheduler fail the
                    # task ("... state attribute is queued"); 1 s avoided it in 16/16 runs (AIRFLOW-NOTES).
                    "WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
                    # Every request is an admin: no login for REST calls or the UI (unless ui_users).
                    "CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                    "API__WORKERS": "1",
                    "API__SECRET_KEY": secrets.token_hex(16),
                    "API__EXPOSE_CONFIG": "True",
                    # All components must sign/verify the task JWTs with one secret.
                    "API_AUTH__JWT_SECRET": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
                }
            )
            if not self.uses_postgres:  # 3.1+: the async engine (aiosqlite) has connect args of its own
                settings["DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"] = _SQLITE_CONNECT_ARGS_ASYNC
        else:
            settings.update(
                {
                    "SCHEDULER__DAG_DIR_LIST_INTERVAL": "3",
                    "SCHEDULER__MIN_FILE_PROCESS_INTERVAL": PARSE_UNCHANGED_FILES_EVERY,
                    "SCHEDULER__PRINT_STATS_INTERVAL": "600",
                    "SCHEDULER__PARSING_PROCESSES": "2",
                    "SCHEDULER__STANDALONE_DAG_PROCESSOR": "False",
                    "WEBSERVER__SECRET_KEY": secrets.token_hex(16),
                    "WEBSERVER__WORKERS": "1",
                    "WEBSERVER__EXPOSE_CONFIG": "True",
                }
            )
            if self.webserver_port:
                settings["WEBSERVER__WEB_SERVER_PORT"] = str(self.webserver_port)
                settings["WEBSERVER__BASE_URL"] = f"http://localhost:{self.webserver_port}"
        if self.broker is not None:
            settings.update(self._celery_settings(self.broker))
        env.update({f"AIRFLOW__{k}": v for k, v in settings.items()})
        if not self.uses_postgres or self.broker is not None:
            # Airflow imports the SQLite connect args and the workers' hostname callable by name.
            env["PYTHONPATH"] = self._connect_args_path()
        if self.ui_users and self.is_airflow3:
            users = self._simple_auth_users_env()
            # Both paths: the repo (the test auth manager) and, on SQLite, the connect-args module.
            users["PYTHONPATH"] = os.pathsep.join(filter(None, [users["PYTHONPATH"], env.get("PYTHONPATH")]))
            env.update(users)
        env.update(self.extra_env)
        return env

    def _celery_settings(self, broker: RedisBroker) -> dict[str, str]:
        """The CeleryExecutor's settings (AIRFLOW-NOTES "Distributed deployments")."""
        # The result backend names its driver: SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3.
        result_backend = "db+" + self.sql_alchemy_conn
        return {
            "CELERY__BROKER_URL": broker.url,
            "CELERY__RESULT_BACKEND": result_backend,
            "CELERY__WORKER_CONCURRENCY": str(self.celery_concurrency),
            # Each worker's name as the task instance's hostname (one machine, so the real one says nothing).
            "CORE__HOSTNAME_CALLABLE": f"{_CONNECT_ARGS_MODULE}.component_hostname",
        }

    def _connect_args_path(self) -> str:
        folder = _connect_args_module_dir(self.home)
        return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))

    def _simple_auth_users_env(self) -> dict[str, str]:
        """3.x logins: the simple auth manager reads our passwords file (it only adds users missing there)."""
        from airflow_harness.ui_auth import PREFIXES_ENV

        passwords = self.home / "simple_auth_manager_passwords.json"
        passwords.write_text(json.dumps(self.ui_passwords))
        roles = ",".join(
            f"{user}:{'admin' if prefix is None else 'viewer'}" for user, prefix in self.ui_users.items()
        )
        return {
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow_harness.ui_auth.DagPrefixAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": roles,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            PREFIXES_ENV: json.dumps({u: p for u, p in self.ui_users.items() if p is not None}),
            "PYTHONPATH": _repo_pythonpath(),
        }

    def grant_ui_dag_access(self) -> None:
        """2.11: give each prefixed ``ui_users`` user read access to the parsed DAGs with its prefix (FAB
        permissions are per DAG id). 3.x needs nothing: the test auth manager checks the prefix live."""
        if self.ui_users and not self.is_airflow3:
            self._run_fab_users("grant")

    def _run_fab_users(self, step: str) -> None:
        """2.11: create the FAB users (admin: Admin role; prefixed: the Viewer role's permissions minus
        "all DAGs"), or grant ``can_read`` on ``DAG:<id>`` for their prefixes, in one process."""
        spec = {
            "step": step,
            "users": {u: [self.ui_passwords[u], p] for u, p in self.ui_users.items()},
            "dag_ids": self.dag_ids(),
            "menu_items": self.ui_menu_items,
        }
        self._run_python(_FAB_USERS_SCRIPT, json.dumps(spec))

    def _run_python(self, code: str, *args: str) -> None:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise AirflowEnvError(
                f"python -c exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )

    # ------------------------------------------------------------------ processes
    def airflow_cli(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python -m airflow <args>`` with this env's settings (costs 2-3 s: not for polling)."""
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise AirflowEnvError(
                f"`airflow {' '.join(args)}` exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                f"\n--- stderr\n{proc.stderr[-4000:]}"
            )
        return proc

    def _component_argv(self, name: str) -> list[str]:
        base = [self.interpreters.get(name, sys.executable), "-m", "airflow"]
        if name == "api-server":
            return [
                *base,
                "api-server",
                "--port",
                str(self.api_port),
                "--host",
                self.bind_host,
                "--workers",
                "1",
            ]
        if name == "webserver":
            return [
                *base,
                "webserver",
                "--port",
                str(self.webserver_port),
                "--hostname",
                self.bind_host,
                "--workers",
                "1",
            ]
        if name in {"dag-processor", *self.scheduler_names}:
            return [*base, "scheduler" if name in self.scheduler_names else name]
        if name in self.worker_names:
            return [
                *base,
                "celery",
                "worker",
                "--concurrency",
                str(self.celery_concurrency),
                "--celery-hostname",
                f"{name}@%h",
            ]
        if name in self.triggerer_names:
            return [*base, "triggerer", *self.triggerer_args.get(name, ())]
        raise ValueError(
            f"unknown component {name!r}; expected one of {self.component_names + ['webserver']}"
        )

    def start_component(self, name: str, *, wait: bool = True, timeout: float = 120.0) -> None:
        """Start (or restart after ``stop_component``) one component in its own process group."""
        if not self.env:
            raise AirflowEnvError("start() the env first")
        existing = self.components.get(name)
        if existing is not None and existing.running:
            return
        if name == "webserver" and not self.webserver_port:
            self.webserver_port = free_port()
            self.env["AIRFLOW__WEBSERVER__WEB_SERVER_PORT"] = str(self.webserver_port)
        before = self._max_job_id(name)
        component = _Component(name, self._component_argv(name), self.component_log_folder / f"{name}.log")
        with open(component.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%H:%M:%S')} starting: {' '.join(component.argv)}\n".encode())
            log.flush()
            component.process = subprocess.Popen(
                component.argv,
                env=self._component_env(name),
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: kill workers/children with it
            )
        self.components[name] = component
        if wait:
            self._wait_component(name, before, time.monotonic() + timeout)

    def _component_env(self, name: str) -> dict[str, str]:
        env = dict(self.env)
        if name in self.triggerer_names[1:]:  # every triggerer serves its trigger logs on a port of its own
            env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(free_port())
        if name in self.worker_names:  # so does every worker
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
        if self.broker is not None and name in {*self.worker_names, *self.triggerer_names}:
            env[HOSTNAME_ENV] = name  # component_hostname: the checks a test counts say where they ran
        return env

    def _same_kind(self, name: str) -> list[str]:
        for names in (self.scheduler_names, self.triggerer_names, self.worker_names):
            if name in names:
                return names
        return [name]

    def stop_component(self, name: str, grace: float = 10.0, *, crash: bool = False) -> None:
        """Kill a component's whole process tree: SIGTERM, then SIGKILL after ``grace`` seconds.

        ``crash=True``: SIGKILL at once, like a machine or container dying (no graceful shutdown).
        Airflow 3 puts some children in process groups of their own (the triggerer's trigger runner, task
        runners), which a signal to the leader's group misses: every descendant is collected first and
        killed as well, so nothing keeps running after this returns.
        """
        self.stop_components([name], grace=0.0 if crash else grace)

    def stop_components(self, names: list[str], grace: float) -> None:
        """``stop_component`` for several components at once: one SIGTERM each, one shared ``grace`` (0: no
        SIGTERM, SIGKILL at once), then SIGKILL to whatever is left of every tree."""
        import psutil  # an Airflow dependency

        procs: list[subprocess.Popen[bytes]] = []
        descendants: list[psutil.Process] = []
        for name in names:
            component = self.components.get(name)
            if component is None or component.process is None:
                continue
            component.stopped_on_purpose = True
            procs.append(component.process)
            with contextlib.suppress(psutil.Error):
                descendants += psutil.Process(component.process.pid).children(recursive=True)
        if grace > 0:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        # Children (task workers, gunicorn/uvicorn workers) may outlive the leader: kill the group anyway.
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        psutil.wait_procs(descendants, timeout=5)

    def drain_worker(self, name: str) -> subprocess.Popen[bytes]:
        """Celery's warm shutdown of one worker: SIGTERM to its main process only, so it takes no new message
        and exits once its running tasks end (a signal to the group would end those tasks too). Returns the
        process to wait for; the worker counts as stopped on purpose (``check_components`` leaves it)."""
        component = self.components[name]
        if name not in self.worker_names or component.process is None:
            raise AirflowEnvError(f"{name!r} is not a started Celery worker ({self.worker_names})")
        component.stopped_on_purpose = True
        os.kill(component.process.pid, signal.SIGTERM)
        return component.process

    def component_log(self, name: str) -> str:
        path = self.component_log_folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def component_logs_tail(self, lines: int = 120) -> dict[str, str]:
        """Last ``lines`` lines of every component log (attached to failing tests)."""
        if self._stopped and self._final_log_tails is not None:
            return dict(self._final_log_tails)
        out = {}
        for name in self.components:
            text = self.component_log(name).splitlines()
            out[name] = "\n".join(text[-lines:])
        return out

    def _job_type(self, name: str) -> str | None:
        if name in self.triggerer_names:
            return "TriggererJob"
        if name in self.scheduler_names:
            return "SchedulerJob"
        return {"dag-processor": "DagProcessorJob"}.get(name)

    def _max_job_id(self, name: str) -> int:
        job_type = self._job_type(name)
        if job_type is None or not self._db_ready():
            return 0
        rows = self.query("SELECT MAX(id) FROM job WHERE job_type = %s", (job_type,))
        return int(rows[0][0] or 0) if rows else 0

    def _db_ready(self) -> bool:
        try:
            self.query("SELECT 1 FROM job WHERE 1 = 0")
        except Exception:
            return False
        return True

    def _component_ready(self, name: str, after_job_id: int) -> bool:
        job_type = self._job_type(name)
        known = self.components[name].job_id
        if job_type is not None and known is not None:
            return bool(self.query("SELECT 1 FROM job WHERE id = %s AND state = 'running'", (known,)))
        if job_type is not None:
            rows = self.query(
                "SELECT MIN(id) FROM job WHERE job_type = %s AND state = 'running' AND id > %s",
                (job_type, after_job_id),
            )
            if not rows or rows[0][0] is None:
                return False
            self.components[name].job_id = int(rows[0][0])
            return True
        if name == "api-server":
            return self._http_ok(f"{self.api_url}/api/v2/monitor/health")
        if name == "webserver":
            return self._http_ok(f"http://127.0.0.1:{self.webserver_port}/health")
        if name in self.worker_names:  # Celery's own line once the worker consumes its queues
            return any(_CELERY_READY.search(line) for line in _last_start(self.component_log(name)))
        return True

    def _wait_component(self, name: str, after_job_id: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            component = self.components[name]
            if not component.running:
                raise AirflowEnvError(
                    f"Airflow {name} exited with code {component.process and component.process.returncode}:\n"
                    + "\n".join(self.component_log(name).splitlines()[-60:])
                )
            if self._component_ready(name, after_job_id):
                return
            time.sleep(0.3)
        raise AirflowEnvError(
            f"Airflow {name} not healthy in time:\n" + "\n".join(self.component_log(name).splitlines()[-60:])
        )

    def wait_healthy(self, timeout: float = 180.0) -> None:
        """Until every started component is up (job heartbeat rows; api-server/webserver /health)."""
        deadline = time.monotonic() + timeout
        for name in list(self.components):
            self._wait_component(name, 0, deadline)

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return 200 <= resp.status < 300
        except (OSError, urllib.error.URLError):
            return False

    def api_token(self, username: str) -> str:
        """3.x with ``ui_users``: a JWT for that user from the simple auth manager's ``/auth/token``."""
        body = json.dumps({"username": username, "password": self.ui_passwords[username]}).encode()
        request = urllib.request.Request(
            f"{self.api_url}/auth/token",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return str(json.loads(resp.read())["access_token"])

    def api(self, method: str, path: str, body: Any = None, timeout: float = API_TIMEOUT) -> Any:
        """3.x REST call on the api-server as an admin (simple_auth_manager_all_admins, or with ``ui_users``
        a token of the first admin user)."""
        if not self.is_airflow3:
            raise AirflowEnvError("the REST API is only used on Airflow 3 (2.11 runs without webserver)")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.ui_users:
            if self._api_token is None:
                self._api_token = self.api_token(next(u for u, p in self.ui_users.items() if p is None))
            headers["Authorization"] = f"Bearer {self._api_token}"
        elif self.airflow_version.startswith("3.1."):
            # 3.1 has no all-admins middleware (3.0 and 3.2+ add the admin's header server-side): a call without a
            # token is 401 "Not authenticated". In all-admins mode GET /auth/token hands an admin's token out.
            if self._api_token is None:
                with urllib.request.urlopen(f"{self.api_url}/auth/token", timeout=30) as resp:
                    self._api_token = str(json.loads(resp.read())["access_token"])
            headers["Authorization"] = f"Bearer {self._api_token}"
        request = urllib.request.Request(f"{self.api_url}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise AirflowEnvError(
                f"{method} {path} -> HTTP {err.code}: {err.read().decode(errors='replace')}"
            ) from err
        return json.loads(payload) if payload else None

    # ------------------------------------------------------------------ SQL
    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.uses_postgres:
                import psycopg2

                conn = psycopg2.connect(
                    self.sql_alchemy_conn.replace("postgresql+psycopg2://", "postgresql://", 1)
                )
                conn.autocommit = True  # every query sees the latest committed state
            else:
                db = self.home / "airflow.db"
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30, check_same_thread=False)
            self._local.conn = conn
            with self._history_lock:
                self._all_connections.append(conn)
        return conn

    def _close_connections(self) -> None:
        for conn in self._all_connections:
            with contextlib.suppress(Exception):
                conn.close()
        self._all_connections = []
        self._local = threading.local()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only SQL on the metadata DB. Use ``%s`` placeholders (converted to ``?`` on SQLite)."""
        return [tuple(row) for row in self._read(sql, params)[1]]

    def query_dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Like ``query`` but rows as dicts; timestamp columns become aware UTC datetimes."""
        names, rows = self._read(sql, params)
        return [
            {n: (_to_datetime(v) if n in _DATETIME_COLUMNS else v) for n, v in zip(names, row, strict=True)}
            for row in rows
        ]

    def _read(self, sql: str, params: Sequence[Any]) -> tuple[list[str], list[Any]]:
        """Column names and rows. Retried while SQLite is locked by a writer (2 s), and while PostgreSQL is
        away (a restart of the server, up to 60 s: a new connection each time)."""
        if not self.uses_postgres:
            sql = sql.replace("%s", "?")
        started = time.monotonic()
        while True:
            conn = None
            try:
                conn = self._connection()  # inside: connecting is refused while the server restarts
                cur = conn.cursor()
                try:
                    cur.execute(sql, tuple(params))
                    return [d[0] for d in cur.description], cur.fetchall()
                finally:
                    cur.close()
            except sqlite3.OperationalError as err:  # "database is locked" while a writer commits
                if "locked" not in str(err) or time.monotonic() > started + 2:
                    raise
            except Exception as err:
                if not self.uses_postgres or not _pg_connection_lost(err) or time.monotonic() > started + 60:
                    raise
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                self._local.conn = None
            time.sleep(0.1 if not self.uses_postgres else 0.5)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """One write statement on the metadata DB (``%s`` placeholders, on SQLite too)."""
        if self.uses_postgres:
            import psycopg2

            conn = psycopg2.connect(
                self.sql_alchemy_conn.replace("postgresql+psycopg2://", "postgresql://", 1)
            )
            try:
                with conn, conn.cursor() as cur:
                    cur.execute(sql, tuple(params))
            finally:
                conn.close()
        else:
            conn = sqlite3.connect(self.home / "airflow.db", timeout=30)
            try:
                with conn:
                    conn.execute(sql.replace("%s", "?"), tuple(params))
            finally:
                conn.close()

    # ------------------------------------------------------------------ DAGs and runs
    def import_errors(self) -> list[str]:
        rows = self.query("SELECT filename, stacktrace FROM import_error")
        return [f"{filename}:\n{stacktrace}" for filename, stacktrace in rows]

    def _dag_files_mentioning(self, dag_id: str) -> list[str]:
        return [str(p) for p in self.dags_folder.glob("*.py") if dag_id in p.read_text(errors="replace")]

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> None:
        """Until the DAG is parsed and serialized; raise early with the import error of its file."""
        deadline = time.monotonic() + timeout
        candidates = self._dag_files_mentioning(dag_id)
        while True:
            if self.query("SELECT 1 FROM serialized_dag WHERE dag_id = %s", (dag_id,)) and self.query(
                "SELECT 1 FROM dag WHERE dag_id = %s", (dag_id,)
            ):
                return
            errors = [e for e in self.import_errors() if any(e.startswith(c + ":") for c in candidates)]
            if errors:
                raise AirflowEnvError(f"DAG {dag_id!r} failed to import:\n" + "\n".join(errors))
            if time.monotonic() > deadline:
                raise AirflowEnvError(
                    f"DAG {dag_id!r} not serialized within {timeout}s (files mentioning it: {candidates});"
                    f" import errors: {self.import_errors()}"
                )
            self.check_components()
            time.sleep(0.5)

    def import_error_of(self, source: Path, dag_id: str, timeout: float = 120) -> str:
        """Add the DAG file ``source`` (text that must fail at parse) and return its import error's text;
        raise if it imports."""
        self.add_dag_file(source)
        try:
            self.wait_for_dag(dag_id, timeout=timeout)
        except AirflowEnvError as failed:
            return str(failed)
        raise AirflowEnvError(f"{source.name} imported; it should have failed at parse")

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
        deadline = time.monotonic() + timeout
        while True:
            rows = self.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
            if rows and rows[0][0] in TERMINAL_RUN_STATES:
                return str(rows[0][0])
            if time.monotonic() > deadline:
                raise AirflowEnvError(
                    f"run {dag_id}/{run_id} not finished within {timeout}s: state={rows[0][0] if rows else None};"
                    f" tasks={[(t['task_id'], t['state']) for t in self.task_instances(dag_id, run_id)]}"
                )
            self.check_components()
            time.sleep(0.5)

    def wait_runs(self, dag_id: str, count: int, timeout: float = 300) -> list[dict[str, Any]]:
        """Until at least ``count`` runs of the DAG are terminal; returns all runs (``dag_runs``)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.dag_runs(dag_id)
            if sum(r["state"] in TERMINAL_RUN_STATES for r in runs) >= count:
                return runs
            if time.monotonic() > deadline:
                raise AirflowEnvError(
                    f"{dag_id}: fewer than {count} terminal runs within {timeout}s: "
                    f"{[(r['run_id'], r['state']) for r in runs]}"
                )
            self.check_components()
            time.sleep(0.5)

    def check_components(self) -> None:
        """Raise ``ComponentDeadError`` while a component that died on its own is not restarted, naming it and
        its cause; waits call this, so a test fails at once instead of waiting for a dead Airflow.

        Never restarts anything: a death fails the test it happens in (tests/integration/conftest.py, which
        restarts the component after that test, ``restart_dead()``). Components stopped on purpose
        (``stop_component``, ``drain_worker``) are no death.
        """
        if not self._started or self._stopped:
            return
        self.detect_deaths()
        if self._supervisor is not None:
            for death in self.pending_deaths():
                if death.known is not None:
                    death.supervised = self._supervisor
                    self._restart(death)
        problems = [f"{death.headline} (not restarted yet)" for death in self.pending_deaths()]
        problems += [f"Airflow {name} is dead: {cause}" for name, cause in sorted(self.dead.items())]
        if problems:
            raise ComponentDeadError("; ".join(problems))

    def detect_deaths(self) -> list[ComponentDeath]:
        """Record every component that exited on its own since the last call (``deaths``: name, exit status
        and cause, the last lines of its log, the known Airflow defect it is if any), each once, also on
        stderr; returns the new ones. Restarts nothing, raises nothing."""
        if not self._started or self._stopped:
            return []
        found = []
        for name, component in list(self.components.items()):
            process = component.process
            if component.stopped_on_purpose or component.death is not None or process is None:
                continue
            if process.poll() is None:
                continue
            log = self.component_log(name)
            cause = _death_cause(process.returncode, log)
            tail = "\n".join(_last_start(log)[-40:])
            death = ComponentDeath(
                name, process.returncode, cause, tail, known_defect(name, process.returncode, cause)
            )
            component.death = death
            self.deaths.append(death)
            found.append(death)
            print(f"[airflow_harness] {death.describe()}", file=sys.stderr, flush=True)
        return found

    def pending_deaths(self) -> list[ComponentDeath]:
        """Deaths whose component was not started again since (by ``restart_dead`` or the test) and is not
        given up on (``dead``)."""
        return [
            death
            for death in self.deaths
            if (component := self.components.get(death.component)) is not None
            and component.death is death
            and death.component not in self.dead
        ]

    @property
    def incidents(self) -> list[str]:
        """Every death so far, described (headline and log tail), in order."""
        return [death.describe() for death in self.deaths]

    def restart_dead(self) -> list[ComponentDeath]:
        """Start again, as a supervisor would, every component whose death was recorded and that nobody
        started since; returns the deaths it handled (``restart`` says how). One that cannot be started lands
        in ``dead`` and stays down: every later ``check_components()`` raises naming it and its cause."""
        if not self._started or self._stopped:
            return []
        self.detect_deaths()
        for death in self.deaths:
            if not death.restart and death not in self.pending_deaths():
                death.restart = "restarted by the test"
        handled = self.pending_deaths()
        for death in handled:
            self._restart(death)
        return handled

    def _restart(self, death: ComponentDeath) -> None:
        name, old = death.component, self.components[death.component]
        self.stop_component(name, crash=True)  # its children (workers, parsers) may outlive it
        try:
            self.start_component(name)
        except Exception as failed:  # whatever stops it from starting: it stays down, named in dead
            first = str(failed).splitlines()[0] if str(failed) else type(failed).__name__
            death.restart = f"could not be restarted: {first}"
            self.dead[name] = f"{death.cause}; its restart failed: {first}"
            self.stop_component(name, crash=True)  # whatever is left of the failed start
        else:
            self.components[name].restarts = old.restarts + 1
            death.restart = "restarted by the supervisor" if death.supervised else "restarted"
        print(f"[airflow_harness] Airflow {name}: {death.restart}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def supervised(self, why: str) -> Iterator[None]:
        """Within the block, a component whose death is a known Airflow defect (``deaths.KNOWN_DEFECTS``) is
        started again at its next ``check_components()`` (every wait calls it), as the supervisor
        docs/deployment.md requires would (systemd's ``Restart=on-failure``), and that death does not fail the
        test: for a test whose subject is the fault that defect answers (a metadata-database restart). ``why``
        is shown with each such death. Any other death still fails the test."""
        self._supervisor = why
        try:
            yield
        finally:
            self._supervisor = None

    def kill_component(self, name: str, sig: signal.Signals = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send ``sig`` to a component's main process only, like the OOM killer or a crash, and wait for its
        exit. Unlike ``stop_component`` it is not stopped on purpose: the harness sees a death."""
        component = self.components[name]
        if component.process is None or not component.running:
            raise AirflowEnvError(f"Airflow {name} is not running")
        os.kill(component.process.pid, sig)
        component.process.wait(timeout=timeout)

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

    def poll(self, predicate: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
        """``predicate()``'s first truthy value, asked every ``interval`` seconds; an ``AirflowEnvError``
        naming ``what`` after ``timeout`` seconds, or at once when a component died."""
        deadline = time.monotonic() + timeout
        while not (found := predicate()):
            if time.monotonic() > deadline:
                raise AirflowEnvError(f"timed out after {timeout:.0f}s waiting for {what}")
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

    # ------------------------------------------------------------------ state history
    def _sample_states(self) -> None:
        while not self._sampler_stop.is_set():
            try:
                rows = self.query("SELECT dag_id, run_id, task_id, map_index, state FROM task_instance")
            except Exception:  # DB briefly unavailable (restart, lock): sample again next tick
                rows = []
            with self._history_lock:
                for dag_id, run_id, task_id, map_index, state in rows:
                    if state is None:
                        continue
                    seen = self._history.setdefault((dag_id, run_id, task_id, int(map_index)), [])
                    if not seen or seen[-1] != state:
                        seen.append(str(state))
            self._sampler_stop.wait(self.state_sample_interval or STATE_SAMPLE_INTERVAL)

    def state_history(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[str]:
        """Task states observed so far, in order, consecutive duplicates collapsed (e.g. ``["scheduled",
        "queued", "running", "deferred", "scheduled", "queued", "running", "success"]``). Sampled every
        STATE_SAMPLE_INTERVAL (0.25 s) from the task_instance table, then the state now, plus evidence the
        DB keeps: a TaskReschedule row proves an ``up_for_reschedule`` phase the sampler may have missed."""
        if self.state_sample_interval is None:
            raise AirflowEnvError(
                "state_history: this AirflowEnv samples no states (state_sample_interval=None)"
            )
        with self._history_lock:
            history = list(self._history.get((dag_id, run_id, task_id, map_index), []))
        # The state now, which the last sample (up to one interval ago) may not have seen yet.
        now = self.query(
            "SELECT state FROM task_instance "
            "WHERE dag_id = %s AND run_id = %s AND task_id = %s AND map_index = %s",
            (dag_id, run_id, task_id, map_index),
        )
        if now and now[0][0] and (not history or history[-1] != now[0][0]):
            history.append(str(now[0][0]))
        if "up_for_reschedule" not in history:
            rows = self.query(
                "SELECT COUNT(*) FROM task_reschedule tr "
                + (
                    "JOIN task_instance ti ON ti.id = tr.ti_id WHERE ti.dag_id = %s AND ti.run_id = %s "
                    "AND ti.task_id = %s AND ti.map_index = %s"
                    if self.is_airflow3
                    else "WHERE tr.dag_id = %s AND tr.run_id = %s AND tr.task_id = %s AND tr.map_index = %s"
                ),
                (dag_id, run_id, task_id, map_index),
            )
            if rows and rows[0][0]:
                history.insert(max(len(history) - 1, 0), "up_for_reschedule")
        return history

    # ------------------------------------------------------------------ connections and variables
    def add_connection(self, conn_id: str, uri: str) -> None:
        self.airflow_cli("connections", "delete", conn_id, check=False)
        self.airflow_cli("connections", "add", conn_id, "--conn-uri", uri)

    def set_variable(self, key: str, value: Any) -> None:
        text = value if isinstance(value, str) else json.dumps(value)
        self.airflow_cli("variables", "set", key, text)


# 2.11 FAB users for ``ui_users`` (argv[1]: JSON spec from ``AirflowEnv._run_fab_users``).
_FAB_USERS_SCRIPT = """
import json, sys
from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder
spec = json.loads(sys.argv[1])
with get_application_builder() as appbuilder:
    sm = appbuilder.sm
    for user, (password, prefix) in spec["users"].items():
        role_name = "Admin" if prefix is None else "smart_ext_only_" + user
        if spec["step"] == "create":
            role = sm.find_role(role_name) or sm.add_role(role_name)
            if prefix is not None:
                for perm in sm.find_role("Viewer").permissions:
                    if perm.resource.name != "DAGs":
                        sm.add_permission_to_role(role, perm)
                for item in spec["menu_items"]:
                    sm.add_permission_to_role(role, sm.create_permission("menu_access", item))
            if not sm.add_user(user, user, "test", user + "@example.invalid", role, password):
                raise SystemExit("could not create user " + user)
        elif prefix is not None:
            role = sm.find_role(role_name)
            for dag_id in spec["dag_ids"]:
                if dag_id.startswith(prefix):
                    sm.add_permission_to_role(role, sm.create_permission("can_read", "DAG:" + dag_id))
"""


# A Celery worker's line once it consumes its queues: "celery-worker@host ready."
_CELERY_READY = re.compile(r"@\S+ ready\.")
_CONNECT_ARGS_MODULE = "smart_ext_harness_sqlite_connect"
_SQLITE_CONNECT_ARGS = f"{_CONNECT_ARGS_MODULE}.SYNC"
_SQLITE_CONNECT_ARGS_ASYNC = f"{_CONNECT_ARGS_MODULE}.ASYNC"


def _connect_args_module_dir(home: Path) -> Path:
    """A directory holding only the harness module Airflow imports by name (SQLite connect args, the workers'
    hostname callable): the repository root on PYTHONPATH would also shadow the installed
    ``airflow_smart_ext`` (the upgrade test runs a release that differs from the checkout)."""
    folder = home / "harness_pythonpath"
    folder.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).with_name("sqlite_connect.py")
    (folder / f"{_CONNECT_ARGS_MODULE}.py").write_text(source.read_text())
    return folder


def _pg_connection_lost(err: BaseException) -> bool:
    import psycopg2

    return isinstance(err, (psycopg2.OperationalError, psycopg2.InterfaceError))


def _numbered(kind: str, count: int) -> list[str]:
    return [kind] + [f"{kind}-{n}" for n in range(2, count + 1)] if count else []


def _repo_pythonpath() -> str:
    """PYTHONPATH for Airflow processes that import modules of this repository by name."""
    return os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))


def _last_start(log: str) -> list[str]:
    """The lines a component's log holds since its last start (the log is appended across restarts)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("===== ")]
    return lines[starts[-1] :] if starts else lines


def _death_cause(returncode: int | None, log: str) -> str:
    """One line: the exit status and, for a process that exited, the last error line among the last lines of
    its log. A signal is the whole cause: the process wrote nothing as it died, and an earlier error line (a
    task's failure the scheduler logged long before) would be read as the reason."""
    if returncode is not None and returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    errors = [
        line.strip()
        for line in _last_start(log)[-40:]
        if any(word in line for word in ("Error:", "Exception:", "Error(", "error:"))
    ]
    status = f"exit {returncode}"
    return f"{status}: {errors[-1][:300]}" if errors else status


def iter_dag_files(folders: Iterable[Path]) -> Iterator[Path]:
    for folder in folders:
        if folder.is_dir():
            yield from sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
