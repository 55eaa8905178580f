"""A real Airflow for tests and scripts: scheduler, dag-processor, triggerer(s) (+ api-server on 3.x).

One ``AirflowEnv`` = one temporary ``AIRFLOW_HOME`` with its own metadata DB (SQLite file, or a fresh
PostgreSQL database created from ``SMART_EXT_TEST_PG_DSN``), its own free ports and real processes started
with the running interpreter (``python -m airflow ...``). States are polled with SQL on the metadata DB (a
CLI call costs 2-3 s); runs are triggered through the REST API on 3.x and the CLI on 2.11 (no webserver).
Every process runs in its own process group and is killed by PID on ``stop()``, also on failure.
``AirflowEnv`` is composed of one class per concern (airflow_harness/state.py lists them).

Usable from pytest (tests/integration/conftest.py) and from scripts (scripts/demo.py)::

    with AirflowEnv(dag_sources=[Path("example_dags")]) as env:
        env.wait_for_dag("my_dag"); env.unpause("my_dag")
        run_id = env.trigger("my_dag"); assert env.wait_run("my_dag", run_id) == "success"
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_harness.client import ApiClient
from airflow_harness.database import Database
from airflow_harness.deaths import ComponentDeath
from airflow_harness.history import STATE_SAMPLE_INTERVAL, StateHistory
from airflow_harness.processes import TEARDOWN_GRACE, Processes, free_port
from airflow_harness.redis_broker import RedisBroker
from airflow_harness.runs import Runs
from airflow_harness.settings import Settings
from airflow_harness.state import (
    EXAMPLE_DAGS_DIR,
    PG_DSN_ENV,
    TEST_DAGS_DIR,
    TEST_PLUGINS_DIR,
    AirflowEnvError,
    Component,
)
from airflow_harness.supervision import Supervision
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_0_PLUS

# Every AirflowEnv started in this process, in order (the pytest hooks check each one for deaths; module-scoped
# envs too, also after their stop(), which records what died before it).
_WATCHED: list[AirflowEnv] = []


def watched_envs() -> list[AirflowEnv]:
    return list(_WATCHED)


def unwatch(env: AirflowEnv) -> None:
    with contextlib.suppress(ValueError):
        _WATCHED.remove(env)


class AirflowEnv(Settings, Database, Processes, Supervision, ApiClient, Runs, StateHistory):
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
        self.plugins_folder = self.home / "plugins"
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
        self.components: dict[str, Component] = {}
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

    def __enter__(self) -> AirflowEnv:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

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

    def _prepare_dags_folder(self) -> None:
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        for source in self.dag_sources:
            files = [source] if source.is_file() else sorted(source.glob("*.py")) if source.is_dir() else []
            for file in files:
                if file.name != "__init__.py":
                    shutil.copy2(file, self.dags_folder / file.name)
        self.plugins_folder.mkdir(parents=True, exist_ok=True)
        for file in sorted(TEST_PLUGINS_DIR.glob("*.py")):
            shutil.copy2(file, self.plugins_folder / file.name)


def iter_dag_files(folders: Iterable[Path]) -> Iterator[Path]:
    for folder in folders:
        if folder.is_dir():
            yield from sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
