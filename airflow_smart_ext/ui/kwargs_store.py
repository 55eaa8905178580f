"""Trigger rows' kwargs decrypted once per encrypted value, and kept across api-server restarts encrypted.

Fernet-decrypting every trigger row was most of the Waits view's first request after a start (10,000 rows:
~1.4 s of 2 s, issue 35). A row's stored kwargs never change and equal Fernet tokens hold equal plaintext, so
the plaintext is kept per token digest; the store is written to a file under ``AIRFLOW_HOME`` encrypted with
Airflow's own Fernet key (the key that guards the trigger table; never as plaintext, and not at all when
Airflow runs without one). A restarted server then opens one token instead of one per row. A file it cannot
read (another key, truncated, another format) is ignored and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["KwargsStore", "default_store"]

_FORMAT = 1
_LIMIT = 50_000  # tokens kept (cleared when full, as the view's other caches)
FILE_NAME = "smart-ext-trigger-kwargs.fernet"


def _fernet() -> Any:
    from airflow.models.crypto import get_fernet

    return get_fernet()


class KwargsStore:
    """The decrypted JSON text of trigger kwargs by the digest of their Fernet token (``path``: where it is
    kept across restarts; None: in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._texts: dict[bytes, str] = {}
        self._loaded = path is None
        self._dirty = False
        self._lock = threading.Lock()

    def plaintext(self, stored: str) -> str:
        """The stored kwargs column as ``Trigger._decrypt_kwargs`` decrypts it (before deserializing)."""
        if stored.startswith("{"):  # written unencrypted (Airflow reads these as they are, so do we)
            return stored
        if not self._loaded:
            self._load()
        token = stored.encode("utf-8")
        digest = hashlib.blake2b(token, digest_size=16).digest()
        text = self._texts.get(digest)
        if text is None:
            text = _fernet().decrypt(token).decode("utf-8")
            if len(self._texts) >= _LIMIT:
                self._texts.clear()
            self._texts[digest] = text
            self._dirty = True
        return text

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            fernet = _fernet()
            if self.path is None or not fernet.is_encrypted:
                return
            try:
                data = json.loads(fernet.decrypt(self.path.read_bytes()))
                if data.get("format") != _FORMAT:
                    return
                texts = data["texts"]
                # equal plaintexts share one string (waits of one task over many runs)
                self._texts.update(
                    (bytes.fromhex(digest), texts[at]) for digest, at in data["tokens"].items()
                )
            except FileNotFoundError:
                return
            except Exception:  # another key (InvalidToken), a torn or foreign file: start empty, rewrite it
                self._texts.clear()
                self._dirty = True

    def save(self) -> None:
        """Write what was decrypted since the last save (atomically: readers see the old or the new file)."""
        if not self._dirty or self.path is None:
            return
        fernet = _fernet()
        if not fernet.is_encrypted:  # no key: keeping them would store plaintext
            return
        with self._lock:
            self._dirty = False
            index: dict[str, int] = {}
            tokens = {
                digest.hex(): index.setdefault(text, len(index))
                # a copy: another request's thread may add to it meanwhile
                for digest, text in list(self._texts.items())
            }
            body = json.dumps({"format": _FORMAT, "texts": list(index), "tokens": tokens}).encode("utf-8")
            sealed = fernet.encrypt(body)
            partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(sealed)
                os.replace(partial, self.path)
            except OSError:  # a read-only home: the store stays in memory
                partial.unlink(missing_ok=True)


_DEFAULT: list[KwargsStore] = []


def default_store() -> KwargsStore:
    """This process's store, kept in ``$AIRFLOW_HOME/smart-ext-trigger-kwargs.fernet``."""
    if not _DEFAULT:
        from airflow.configuration import AIRFLOW_HOME

        _DEFAULT.append(KwargsStore(Path(AIRFLOW_HOME) / FILE_NAME))
    return _DEFAULT[0]
