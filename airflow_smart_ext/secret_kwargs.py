"""Rendered secrets never travel to the triggerer in plaintext: they are sealed with Airflow's Fernet key.

A sensor argument rendered from a secret (``"{{ conn.my_conn.password }}"``, a masked Variable, a value under
a sensitive name such as ``token``) is a value Airflow's secrets masker would redact: the worker's masker
knows every secret the task rendered. Airflow 3 stores deferral kwargs unencrypted (2.11 and start triggers
encrypt them), so before a check spec is shipped every such value is replaced by an envelope
``{"__smart_ext_sealed__": <Fernet token>}`` (``[core] fernet_key``, which the triggerer shares); the
triggerer opens it before building the check and registers the value with its own masker, so its log lines
redact it too. Without a Fernet key a secret cannot be sealed: shipping is refused with how to avoid it.

What must match across identical waits (sharing keys) is computed in memory from the opened values, never
stored: the envelopes differ from one deferral to the next (Fernet tokens are randomised).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_smart_ext import compat

SEALED = "__smart_ext_sealed__"


class SecretNotSealable(ValueError):
    """A rendered secret would be stored in plaintext (no ``[core] fernet_key``)."""


class SealedValueUnreadable(ValueError):
    """An envelope cannot be opened here (``[core] fernet_key`` differs from the worker's)."""


def _hidden(value: Any, name: str | None) -> bool:
    """Whether Airflow's secrets masker would redact ``value`` (a JSON leaf) under the key ``name``."""
    if value is None or isinstance(value, bool):
        return False
    return bool(compat.locations.redact_secrets(value, name) != value)


def _sensitive_name(name: str | None) -> bool:
    return name is not None and compat.locations.redact_secrets("x", name) != "x"


def seal(value: Any, where: str) -> Any:
    """``value`` (JSON) with every leaf the masker would redact sealed; ``where`` names it in errors."""
    fernet: Any = None

    def envelope(leaf: Any, path: str) -> dict[str, str]:
        nonlocal fernet
        if fernet is None:
            fernet = compat.locations.get_fernet()
        if not getattr(fernet, "is_encrypted", False):
            raise SecretNotSealable(
                f"{where}{path} holds a rendered secret (a value Airflow's secrets masker redacts) and "
                "[core] fernet_key is not set, so it would be stored in plaintext in the metadata database "
                "when the task defers. Pass the connection id instead (e.g. conn_id=...) and read the secret "
                "inside poke, or set [core] fernet_key (the same on workers and triggerers)."
            )
        token = fernet.encrypt(json.dumps(leaf).encode("utf-8")).decode("ascii")
        return {SEALED: token}

    def walk(node: Any, name: str | None, hide_all: bool, path: str) -> Any:
        if isinstance(node, dict):
            if SEALED in node:
                return node  # already sealed
            hide = hide_all or _sensitive_name(name)
            return {
                key: walk(child, key if isinstance(key, str) else None, hide, f"{path}[{key!r}]")
                for key, child in node.items()
            }
        if isinstance(node, list):
            hide = hide_all or _sensitive_name(name)
            return [walk(child, name, hide, f"{path}[{i}]") for i, child in enumerate(node)]
        if (hide_all and node is not None) or _hidden(node, name):
            return envelope(node, path)
        return node

    return walk(value, None, False, "")


def is_sealed(value: Any) -> bool:
    if isinstance(value, dict):
        return SEALED in value or any(is_sealed(child) for child in value.values())
    if isinstance(value, list):
        return any(is_sealed(child) for child in value)
    return False


def unseal(value: Any, opened: list[Any] | None = None) -> Any:
    """``value`` with every envelope opened; each opened value is registered with this process's masker (and
    appended to ``opened``: a trigger registers them with its supervisor's too, ``compat.secret_masking.amask_secret``)."""
    fernet: Any = None

    def open_(token: str) -> Any:
        nonlocal fernet
        if fernet is None:
            fernet = compat.locations.get_fernet()
        try:
            leaf = json.loads(fernet.decrypt(token.encode("ascii")))
        except Exception as err:  # cryptography's InvalidToken, or no key at all
            raise SealedValueUnreadable(
                "a sealed sensor argument cannot be opened in the triggerer: its [core] fernet_key must "
                f"be the one the worker used ({type(err).__name__})"
            ) from None
        compat.locations.mask_secret(leaf)
        if opened is not None:
            opened.append(leaf)
        return leaf

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if SEALED in node and len(node) == 1 and isinstance(node[SEALED], str):
                return open_(node[SEALED])
            return {key: walk(child) for key, child in node.items()}
        if isinstance(node, list):
            return [walk(child) for child in node]
        return node

    return walk(value)
