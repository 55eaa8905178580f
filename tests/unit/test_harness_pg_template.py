"""The harness migrates a PostgreSQL database once per Airflow and venv, then copies it (a template database)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_harness.env import AirflowEnv
from airflow_harness.state import PG_DSN_ENV

pytestmark = pytest.mark.postgres  # the PostgreSQL pass, which sets the server's DSN


def _execute(dsn: str, database: str | None, sql: str) -> list[tuple[Any, ...]]:
    import psycopg2
    from sqlalchemy.engine import make_url

    url = make_url(dsn)
    conn = psycopg2.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password,
        dbname=database or url.database,
    )
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def test_a_migrated_database_is_copied_for_the_next_env_not_migrated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = os.environ[PG_DSN_ENV]
    # A venv of its own: a template key no other test shares.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv-pg-template-test" / "bin" / "python"))
    migrations: list[str] = []

    def fake_migrate(env: AirflowEnv, *args: str, **_: object) -> None:
        assert args == ("db", "migrate")
        assert env.pg_database is not None
        migrations.append(env.pg_database)
        _execute(dsn, env.pg_database, "CREATE TABLE alembic_version (version_num text)")
        _execute(dsn, env.pg_database, "INSERT INTO alembic_version VALUES ('head')")

    monkeypatch.setattr(AirflowEnv, "airflow_cli", fake_migrate)
    first, second = (AirflowEnv(pg_dsn=dsn, home=tmp_path / name) for name in ("first", "second"))
    template = first._pg_template
    try:
        for env in (first, second):
            env._prepare_database()
            env._migrate_database()
        assert migrations == [first.pg_database]  # the second env was copied from the template
        assert _execute(dsn, second.pg_database, "SELECT version_num FROM alembic_version") == [("head",)]
        names = {row[0] for row in _execute(dsn, None, "SELECT datname FROM pg_database")}
        assert template in names
        assert not [name for name in names if name.startswith(f"{template}_")]  # no partial copy left
    finally:
        for env in (first, second):
            if env.pg_database:
                env._drop_pg_database()
        _execute(dsn, None, f'DROP DATABASE IF EXISTS "{template}"')
