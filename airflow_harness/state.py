"""What one real Airflow of the harness is (``EnvState``: its settings, processes and bookkeeping, which the
concerns below share), the names a test reads, and the harness's errors.

``AirflowEnv`` (airflow_harness/env.py) is composed of one class per concern, each over this state:
settings.py (the ``AIRFLOW__*`` environment), database.py (the metadata DB: create, migrate, read),
processes.py (start, stop and watch components), supervision.py (deaths and restarts), client.py (REST
calls, connections, variables), runs.py (DAGs, runs, task instances, logs), history.py (task state history).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_harness.deaths import ComponentDeath
from airflow_harness.redis_broker import RedisBroker

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DAGS_DIR = REPO_ROOT / "example_dags"
TEST_DAGS_DIR = REPO_ROOT / "tests" / "integration" / "dags"
# Modules Airflow imports by name where the DAG folder is not on sys.path (a deadline callback in the
# triggerer): copied into the plugins folder, which every component puts on sys.path.
TEST_PLUGINS_DIR = REPO_ROOT / "tests" / "integration" / "plugins"
PG_DSN_ENV = "SMART_EXT_TEST_PG_DSN"

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
TERMINAL_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class AirflowEnvError(RuntimeError):
    """The harness could not start Airflow, or a wait failed; the message carries the evidence."""


class ComponentDeadError(AirflowEnvError):
    """A component died on its own (``AirflowEnv.deaths``): not restarted yet, or it could not be restarted
    (``AirflowEnv.dead`` says which and why). The message names each one and its cause."""


class Component:
    """One Airflow process of the env (scheduler, triggerer, worker, ...) and what the harness knows of it."""

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


def numbered(kind: str, count: int) -> list[str]:
    return [kind] + [f"{kind}-{n}" for n in range(2, count + 1)] if count else []


class EnvState:
    """The state every concern of ``AirflowEnv`` reads (set by ``AirflowEnv.__init__``), the topology it
    implies, and the methods one concern calls on another (declared for the type checker only)."""

    airflow_version: str
    is_airflow3: bool
    home: Path
    dags_folder: Path
    plugins_folder: Path
    log_folder: Path
    component_log_folder: Path
    dag_sources: list[Path]
    pg_database: str | None
    sql_alchemy_conn: str
    api_port: int | None
    ui_users: dict[str, str | None]
    ui_passwords: dict[str, str]
    ui_menu_items: list[str]
    with_webserver: bool
    webserver_port: int | None
    parallelism: int
    bind_host: str
    extra_env: dict[str, str]
    triggerers: int
    triggerer_args: dict[str, list[str]]
    schedulers: int
    celery_workers: int
    celery_concurrency: int
    broker: RedisBroker | None
    components: dict[str, Component]
    interpreters: dict[str, str]  # component -> the python that runs it (default: sys.executable)
    env: dict[str, str]
    state_sample_interval: float | None
    deaths: list[ComponentDeath]
    dead: dict[str, str]
    _own_home: bool
    _server_pg_dsn: str
    _pg_migrated: bool
    _api_token: str | None
    _started: bool
    _stopped: bool
    _local: threading.local
    _history: dict[tuple[str, str, str, int], list[str]]
    _history_lock: threading.Lock
    _sampler: threading.Thread | None
    _sampler_stop: threading.Event
    _all_connections: list[Any]
    _final_log_tails: dict[str, str] | None
    _supervisor: str | None

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
        return numbered("triggerer", self.triggerers)

    @property
    def scheduler_names(self) -> list[str]:
        return numbered("scheduler", self.schedulers)

    @property
    def worker_names(self) -> list[str]:
        """The Celery workers (none with the LocalExecutor)."""
        return numbered("celery-worker", self.celery_workers)

    if TYPE_CHECKING:  # one concern's methods another calls (defined in the modules named)

        def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...  # database

        def query_dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...  # database

        def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...  # database

        def airflow_cli(
            self, *args: str, timeout: float = 120, check: bool = True
        ) -> subprocess.CompletedProcess[str]: ...  # processes

        def component_log(self, name: str) -> str: ...  # processes

        def run_python(
            self, code: str, *args: str, timeout: float = 180
        ) -> subprocess.CompletedProcess[str]: ...

        def start_component(self, name: str, *, wait: bool = True, timeout: float = 120.0) -> None: ...

        def stop_component(self, name: str, grace: float = 10.0, *, crash: bool = False) -> None: ...

        def check_components(self) -> None: ...  # supervision

        def api(self, method: str, path: str, body: Any = None, timeout: float = ...) -> Any: ...  # client

        def dag_ids(self) -> list[str]: ...  # runs

        def add_dag_file(self, path: Path | str, name: str | None = None) -> Path: ...  # runs
