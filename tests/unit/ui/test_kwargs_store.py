"""Trigger kwargs decrypted once per Fernet token and kept across restarts encrypted (issue 35, part 7): the
fast path gives what decrypting every row gives, and no plaintext reaches the disk."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from airflow_smart_ext import compat, secret_kwargs
from airflow_smart_ext.backoff import aligned_start
from airflow_smart_ext.triggers.worker_first import CLASSPATH as WORKER_FIRST
from airflow_smart_ext.triggers.zero_worker import CLASSPATH as ZERO_WORKER
from airflow_smart_ext.ui import kwargs_store, waits_source
from airflow_smart_ext.ui.kwargs_store import KwargsStore
from airflow_smart_ext.ui.trigger_rows import LiveWait
from airflow_smart_ext.ui.waits_report import WaitsQuery, build_report
from tests.unit.helpers import KeyedFernet
from tests.unit.ui.helpers import NOW, POLICY, sensor_check, sql_check

SECRET = "pw-91ab-never-on-disk"


class CountingFernet(KeyedFernet):
    def __init__(self, key: bytes) -> None:
        super().__init__(key)
        self.decrypted = 0
        self.tokens: set[bytes] = set()

    def decrypt(self, msg: bytes | str, ttl: int | None = None) -> bytes:
        self.decrypted += 1
        self.tokens.add(msg.encode() if isinstance(msg, str) else msg)
        return super().decrypt(msg, ttl)


class NoKey:
    """Airflow's NullFernet: no ``[core] fernet_key``, values kept as they are."""

    is_encrypted = False

    def decrypt(self, msg: bytes, ttl: int | None = None) -> bytes:
        return msg

    def encrypt(self, msg: bytes) -> bytes:
        return msg


def _tokens(fernet: KeyedFernet, count: int) -> tuple[list[str], list[str]]:
    """(plaintexts, a token of each): seven distinct texts, each row encrypted on its own (as Airflow does)."""
    texts = [json.dumps({"task": f"t{i % 7}", "password": f"{SECRET}-{i % 7}"}) for i in range(count)]
    return texts, [fernet.encrypt(text.encode()).decode() for text in texts]


def test_each_token_reads_as_fernet_decrypts_it_and_a_restart_reads_them_from_one_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fernet = CountingFernet(Fernet.generate_key())
    monkeypatch.setattr(kwargs_store, "_fernet", lambda: fernet)
    texts, tokens = _tokens(fernet, 300)
    path = tmp_path / "home" / kwargs_store.FILE_NAME
    first = KwargsStore(path)
    assert [first.plaintext(token) for token in tokens] == texts
    assert fernet.decrypted == 300  # distinct tokens of equal texts: each is decrypted
    assert [first.plaintext(token) for token in tokens] == texts and fernet.decrypted == 300
    first.save()
    raw = path.read_bytes()
    assert SECRET.encode() not in raw and b'"task"' not in raw  # on disk only as a Fernet token
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(fernet.decrypt(raw))["format"] == 1
    fernet.decrypted = 0
    restarted = KwargsStore(path)
    assert [restarted.plaintext(token) for token in tokens] == texts
    assert fernet.decrypted == 1  # the store's own token, not one per row
    new_texts, new_tokens = _tokens(fernet, 3)
    assert [restarted.plaintext(token) for token in new_tokens] == new_texts


def test_a_store_under_another_key_is_ignored_and_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / kwargs_store.FILE_NAME
    old = KeyedFernet(Fernet.generate_key())
    monkeypatch.setattr(kwargs_store, "_fernet", lambda: old)
    store = KwargsStore(path)
    store.plaintext(_tokens(old, 1)[1][0])
    store.save()
    rotated = CountingFernet(Fernet.generate_key())
    monkeypatch.setattr(kwargs_store, "_fernet", lambda: rotated)
    texts, tokens = _tokens(rotated, 20)
    store = KwargsStore(path)
    assert [store.plaintext(token) for token in tokens] == texts
    assert rotated.decrypted == 1 + 20  # the unreadable store, then every row
    store.save()
    assert json.loads(rotated.decrypt(path.read_bytes()))["texts"] == texts[:7]


@pytest.mark.parametrize("content", [b"", b"not a token", None])
def test_a_torn_or_foreign_store_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None
) -> None:
    fernet = KeyedFernet(Fernet.generate_key())
    monkeypatch.setattr(kwargs_store, "_fernet", lambda: fernet)
    path = tmp_path / kwargs_store.FILE_NAME
    path.write_bytes(fernet.encrypt(b'{"format": 0}') if content is None else content)
    texts, tokens = _tokens(fernet, 5)
    assert [KwargsStore(path).plaintext(token) for token in tokens] == texts


def test_without_a_fernet_key_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kwargs_store, "_fernet", NoKey)
    path = tmp_path / kwargs_store.FILE_NAME
    store = KwargsStore(path)
    text = json.dumps({"password": SECRET})
    assert store.plaintext(text) == text  # unencrypted kwargs are read as they are (Trigger._decrypt_kwargs)
    assert store.plaintext("x" + text) == "x" + text  # what NullFernet "decrypts"
    store.save()
    assert not path.exists()


# ---- the fast path and the full path on generated tables of rows ----------------------------------------


def _generated_rows(rng: random.Random, count: int) -> list[tuple[str, dict[str, Any]]]:
    """(classpath, kwargs) of both paths on a few conditions, some with sealed secrets, many repeated."""
    rows = []
    for i in range(count):
        cond = rng.randrange(6)
        started = NOW - rng.choice((120, 900, 4000))
        if rng.random() < 0.5:
            check = sensor_check(path=f"/in/{cond}")
            if cond % 2:
                check = {**check, "kwargs": secret_kwargs.seal({**check["kwargs"], "token": SECRET}, "check")}
            kwargs: dict[str, Any] = {
                "check": check,
                "policy": POLICY,
                "seed": f"seed-{cond}",
                "started_at": aligned_start(started, 60.0),
                "deadline": started + 3600.0,
                "after": rng.randrange(3),
                "share": rng.random() < 0.8,
                "rate_limit": rng.choice((None, 0.5)),
            }
            rows.append((WORKER_FIRST, kwargs))
        else:
            start = {
                "check": sql_check(f"SELECT ok FROM t WHERE k = 'c{cond}'"),
                "fields": {"parameters": ["parameters"]},
                "policy": {**POLICY, "initial": float(30 + 30 * (cond % 2))},
                "timeout": 3600.0,
                "execution_timeout": None,
                "backstop_seconds": 3660.0,
                "share": True,
            }
            parameters = secret_kwargs.seal({"password": SECRET}, "parameters") if cond == 3 else {"n": i % 2}
            rows.append((ZERO_WORKER, {"start": start, "parameters": parameters}))
    return rows


def _full_path(stored: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Before the fast path: every row decrypted, deserialized and opened on its own."""
    from airflow.models.trigger import Trigger

    parts = {
        name: waits_source._open_value(name, value) for name, value in Trigger._decrypt_kwargs(stored).items()
    }
    return {name: part[0] for name, part in parts.items()}, {name: part[1] for name, part in parts.items()}


def test_the_fast_path_reads_and_reports_what_decrypting_every_row_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow.models.crypto
    from airflow.models.trigger import Trigger

    fernet = CountingFernet(Fernet.generate_key())
    monkeypatch.setattr(airflow.models.crypto, "get_fernet", lambda: fernet)  # Trigger's and the store's
    monkeypatch.setattr(compat.locations, "get_fernet", lambda: fernet)  # sealed values
    path = tmp_path / kwargs_store.FILE_NAME
    store = KwargsStore(path)
    monkeypatch.setattr(kwargs_store, "default_store", lambda: store)
    caches = (waits_source._BY_TRIGGER, waits_source._BY_PLAINTEXT, waits_source._BY_VALUE)
    saved = [dict(cache) for cache in caches]  # restored below: other tests' entries stay theirs
    rng = random.Random(35)
    rows = []
    for number, (classpath, kwargs) in enumerate(_generated_rows(rng, 400)):
        stored = Trigger(classpath, kwargs).encrypted_kwargs  # as the scheduler/triggerer write a row
        assert SECRET not in stored
        rows.append((number, classpath, stored, rng.choice(("d1", "d2")), f"run_{number % 9}"))
    try:

        def waits(read: Any) -> list[LiveWait]:
            found = []
            for number, classpath, stored, dag_id, run_id in rows:
                kwargs, shown = read(number, stored)
                found.append(
                    LiveWait(
                        dag_id,
                        run_id,
                        f"t{number}",
                        -1,
                        1,
                        classpath,
                        kwargs,
                        NOW - 600,
                        NOW - 590,
                        shown_kwargs=shown,
                        trigger_id=number,
                        triggerer_id=number % 2,
                    )
                )
            return found

        full = waits(lambda number, stored: _full_path(stored))
        fast = waits(lambda number, stored: waits_source._opened((number, NOW), stored))
        assert {row[2].encode() for row in rows} <= fernet.tokens
        store.save()
        for cache in caches:
            cache.clear()  # a restart: only the store's file survives
        fernet.tokens.clear()
        after_restart = KwargsStore(path)
        monkeypatch.setattr(kwargs_store, "default_store", lambda: after_restart)
        restarted = waits(lambda number, stored: waits_source._opened((number, NOW), stored))
        assert not {row[2].encode() for row in rows} & fernet.tokens  # no row decrypted again
    finally:
        for cache, old in zip(caches, saved, strict=True):
            cache.clear()
            cache.update(old)
    for one, other in ((full, fast), (full, restarted)):
        assert [dataclasses.astuple(wait) for wait in one] == [dataclasses.astuple(wait) for wait in other]
    for query in (
        WaitsQuery(limit=1000),
        WaitsQuery(limit=7, sort="deadline"),
        WaitsQuery(conn_id="warehouse"),
    ):
        expected = build_report(full, query, NOW)
        assert expected["summary"]["groups"] >= 6 and expected["total"] > 0
        assert not [row for row in expected["waits"] if row["condition"].startswith("unreadable")]
        assert build_report(fast, query, NOW) == expected
        assert build_report(restarted, query, NOW) == expected
    assert SECRET not in json.dumps(build_report(fast, WaitsQuery(limit=1000), NOW))
    assert SECRET.encode() not in path.read_bytes()
