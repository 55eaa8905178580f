"""Helpers shared by unit tests of several package folders."""

from __future__ import annotations

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
