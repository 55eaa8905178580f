"""The metadata database of one harness Airflow (``Database``): created (PostgreSQL) or placed (SQLite),
migrated once per Airflow version and venv and copied after, read and written with plain SQL (a CLI call
costs seconds: never for polling), dropped at the end."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import secrets
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_harness.state import EnvState

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
        "deadline_time",
    }
)


class Database(EnvState):
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
        self.execute_many(sql, [params])

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One write statement per row of parameters, in one transaction (batched on PostgreSQL)."""
        if self.uses_postgres:
            import psycopg2
            import psycopg2.extras

            conn = psycopg2.connect(
                self.sql_alchemy_conn.replace("postgresql+psycopg2://", "postgresql://", 1)
            )
            try:
                with conn, conn.cursor() as cur:
                    psycopg2.extras.execute_batch(cur, sql, [tuple(row) for row in rows], page_size=500)
            finally:
                conn.close()
        else:
            conn = sqlite3.connect(self.home / "airflow.db", timeout=30)
            try:
                with conn:  # executemany takes DML only: one statement goes through execute
                    if len(rows) == 1:
                        conn.execute(sql.replace("%s", "?"), tuple(rows[0]))
                    else:
                        conn.executemany(sql.replace("%s", "?"), [tuple(row) for row in rows])
            finally:
                conn.close()


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


def _pg_connection_lost(err: BaseException) -> bool:
    import psycopg2

    return isinstance(err, (psycopg2.OperationalError, psycopg2.InterfaceError))
