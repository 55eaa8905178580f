"""Helpers shared by unit tests of several package folders."""

from __future__ import annotations

from typing import Any

from cryptography.fernet import Fernet


class KeyedFernet:
    """Airflow's Fernet wrapper shape (``is_encrypted``) around a real key."""

    is_encrypted = True

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    def encrypt(self, msg: bytes) -> bytes:
        return self._fernet.encrypt(msg)

    def decrypt(self, msg: bytes | str, ttl: int | None = None) -> bytes:
        return self._fernet.decrypt(msg, ttl)


def sql_check(sql: str = "SELECT ok FROM t", conn_id: str = "warehouse") -> dict[str, Any]:
    """A ``"sql"`` check spec as a sensor ships it (no parameters, no criteria)."""
    return {
        "type": "sql",
        "conn_id": conn_id,
        "sql": sql,
        "parameters": None,
        "hook_params": None,
        "selector": None,
        "success": None,
        "failure": None,
        "fail_on_empty": False,
    }
