"""The ``AIRFLOW__*`` environment every component of one harness Airflow runs with (``Settings``)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import sys
from pathlib import Path

from airflow_harness.processes import free_port
from airflow_harness.redis_broker import RedisBroker
from airflow_harness.state import REPO_ROOT, EnvState

# How often a DAG file is parsed again while unchanged (Airflow's default: 30 s). Airflow parses each file at
# start-up and again as soon as it changes (the default "modified_time" sort mode), which is all a test needs;
# the periodic re-parse of ~47 unchanged files took ~0.4 core per Airflow in CI's rehearsal (2 cores, 2-3
# Airflows at once). What Airflow decides only at a parse (a watcher starts or stops when its DAG is
# unpaused or paused) the harness asks for: set_paused touches the DAG's file.
PARSE_UNCHANGED_FILES_EVERY = "600"

_CONNECT_ARGS_MODULE = "smart_ext_harness_sqlite_connect"
_SQLITE_CONNECT_ARGS = f"{_CONNECT_ARGS_MODULE}.SYNC"
_SQLITE_CONNECT_ARGS_ASYNC = f"{_CONNECT_ARGS_MODULE}.ASYNC"


class Settings(EnvState):
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
            "CORE__PLUGINS_FOLDER": str(self.plugins_folder),
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
                    # A task's start (PATCH .../run) that the API server answers after the client's 5 s gave
                    # up is retried, the retry gets 409 "already running", and the LocalExecutor fails the
                    # task before its first line (Celery discards it: apache/airflow#60855). Two Airflows on
                    # 2 cores answer that slowly (docs/deployment.md, "Settings that matter at scale").
                    "WORKERS__EXECUTION_API_TIMEOUT": "30",
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
        self.run_python(_FAB_USERS_SCRIPT, json.dumps(spec))


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


def _connect_args_module_dir(home: Path) -> Path:
    """A directory holding only the harness module Airflow imports by name (SQLite connect args, the workers'
    hostname callable): the repository root on PYTHONPATH would also shadow the installed
    ``airflow_smart_ext`` (the upgrade test runs a release that differs from the checkout)."""
    folder = home / "harness_pythonpath"
    folder.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).with_name("sqlite_connect.py")
    (folder / f"{_CONNECT_ARGS_MODULE}.py").write_text(source.read_text())
    return folder


def _repo_pythonpath() -> str:
    """PYTHONPATH for Airflow processes that import modules of this repository by name."""
    return os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
