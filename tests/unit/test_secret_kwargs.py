"""Rendered secrets are sealed before a BackoffTrigger is stored, opened in the triggerer (issue 23)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from cryptography.fernet import Fernet

from airflow_smart_ext import compat, secret_kwargs
from airflow_smart_ext.backoff import BackoffPolicy
from airflow_smart_ext.conditions import sharing_key
from airflow_smart_ext.triggers import BackoffTrigger
from tests.unit.helpers import KeyedFernet

SECRET = "pw-9f3c1e7a-not-in-any-row"  # registered with the masker, as a rendered connection password is
TOKEN = "tok-55aa10bb"  # not registered, but under a name the masker hides (``token``)


class NoKey:
    is_encrypted = False

    def encrypt(self, msg: bytes) -> bytes:
        return msg

    def decrypt(self, msg: bytes | str, ttl: int | None = None) -> bytes:
        return msg if isinstance(msg, bytes) else msg.encode()


@pytest.fixture
def fernet(monkeypatch: pytest.MonkeyPatch) -> KeyedFernet:
    keyed = KeyedFernet(Fernet.generate_key())
    monkeypatch.setattr(compat.locations, "get_fernet", lambda: keyed)
    compat.locations.mask_secret(SECRET)
    return keyed


def sensor_check(**kwargs: Any) -> dict[str, Any]:
    return {
        "type": "sensor",
        "classpath": "tests.unit.triggers.helpers.MarkerSensor",
        "kwargs": kwargs,
        "context": {"dag_id": "d", "task_id": "wait", "run_id": "r", "ds": "2026-01-02"},
    }


def trigger(check: dict[str, Any]) -> BackoffTrigger:
    return BackoffTrigger(
        check=check,
        policy=BackoffPolicy(initial=1, factor=1, jitter="none", splay=0).to_dict(),
        seed="s",
        started_at=1.0,
        deadline=100.0,
    )


# Where a secret may sit in a sensor's rendered arguments: one row per case.
SECRET_PLACES = [
    ("registered-value", {"path": SECRET}),
    ("inside-a-longer-string", {"url": f"https://user:{SECRET}@host/x"}),
    ("sensitive-name", {"token": TOKEN}),
    ("nested-list", {"headers": [["Authorization", f"Bearer {SECRET}"]]}),
    ("under-a-sensitive-dict", {"password": {"primary": TOKEN, "n": 3}}),
]


@pytest.mark.parametrize(("case", "kwargs"), SECRET_PLACES, ids=[case for case, _ in SECRET_PLACES])
def test_a_rendered_secret_is_sealed_in_the_kwargs_and_opened_in_the_triggerer(
    case: str, kwargs: dict[str, Any], fernet: KeyedFernet
) -> None:
    plain = sensor_check(name=case, **kwargs)
    classpath, shipped = trigger(plain).serialize()
    stored = json.dumps(shipped)
    assert SECRET not in stored and TOKEN not in stored
    assert secret_kwargs.SEALED in stored
    rebuilt = BackoffTrigger(**json.loads(stored))  # as the triggerer builds it from the row
    assert rebuilt.check == plain
    # Identical waits still share: the key is computed from the opened values (in memory, never stored).
    _, again = trigger(plain).serialize()
    assert json.dumps(again) != stored  # Fernet tokens are randomised ...
    assert sharing_key(BackoffTrigger(**again).check) == sharing_key(plain)  # ... the identity is not
    assert rebuilt.serialize()[1]["check"] == shipped["check"]  # re-serialized in the triggerer: still sealed
    assert SECRET not in repr(rebuilt) and TOKEN not in repr(rebuilt) and SECRET not in repr(trigger(plain))


def test_a_check_without_secrets_is_shipped_unchanged(fernet: KeyedFernet) -> None:
    plain = sensor_check(name="plain", path="/data/ready.flag", conn_id="fs_default")
    assert trigger(plain).serialize()[1]["check"] == plain


def test_without_a_fernet_key_a_secret_is_refused_at_defer_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat.locations, "get_fernet", NoKey)
    compat.locations.mask_secret(SECRET)
    with pytest.raises(secret_kwargs.SecretNotSealable) as err:
        trigger(sensor_check(name="x", path=SECRET)).serialize()
    message = str(err.value)
    assert "check 'kwargs'['path']" in message and "[core] fernet_key" in message and "conn_id" in message
    assert SECRET not in message


async def test_an_envelope_sealed_with_another_key_fails_that_wait_not_the_triggerer(
    fernet: KeyedFernet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow fails only a TypeError from a trigger's constructor as one trigger (any other error stops the
    whole triggerer process): the constructor never raises; the wait ends with an error event instead."""
    _, shipped = trigger(sensor_check(name="x", path=SECRET)).serialize()
    other = KeyedFernet(Fernet.generate_key())
    monkeypatch.setattr(compat.locations, "get_fernet", lambda: other)
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    rebuilt = BackoffTrigger(**shipped)
    assert SECRET not in repr(rebuilt) and rebuilt.serialize()[1]["check"] == shipped["check"]
    events = [event async for event in rebuilt.run()]
    assert len(events) == 1
    assert events[0].payload["status"] == "error"
    assert "fernet_key" in events[0].payload["message"]


def test_an_opened_secret_is_masked_in_the_triggerers_logs(fernet: KeyedFernet) -> None:
    late = "pw-opened-only-in-the-triggerer"
    _, shipped = trigger(sensor_check(name="x", token=late)).serialize()
    BackoffTrigger(**shipped)  # opening registers the value with this process's masker
    assert late not in str(compat.locations.redact_secrets(f"poke failed: auth {late} rejected"))


@pytest.mark.skipif(
    not compat.versions.AIRFLOW_V_3_0_PLUS, reason="2.11: one process writes the triggerer's logs"
)
async def test_an_opened_secret_is_sent_to_the_supervisor_that_writes_the_log_files(
    fernet: KeyedFernet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3.x: the trigger log files are written by the triggerer's supervisor with its own masker; ``run`` sends it
    every opened value as Airflow's ``MaskSecret`` (from the event loop: ``asend``), before its first check."""
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import MaskSecret

    sent: list[Any] = []

    class Comms:
        async def asend(self, message: Any) -> None:
            sent.append(message)

        def send(self, message: Any) -> None:  # the SDK's sync mask_secret (3.0 sends, 3.1+ try and give up)
            pass

    late = "pw-opened-only-in-the-triggerer-2"
    _, shipped = trigger(sensor_check(name="x", token=late, path=SECRET)).serialize()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Comms(), raising=False)
    monkeypatch.setattr(compat.deferral, "TRIGGER_MIN_EVENT_DELAY_SECONDS", 0.0)
    rebuilt = BackoffTrigger(**shipped)
    assert sent == []  # the constructor cannot tell the supervisor (it runs in the loop, synchronously)
    run = rebuilt.run()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(run.__anext__(), timeout=0.5)  # the first check; the masks come before it
    await run.aclose()
    masked = [message.value for message in sent if isinstance(message, MaskSecret)]
    assert sorted(masked) == sorted([late, SECRET]), sent


def test_the_real_fernet_of_this_airflow_seals_and_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", Fernet.generate_key().decode())
    cache_clear = getattr(compat.locations.get_fernet, "cache_clear", None)
    if cache_clear is not None:  # 3.x caches it per process
        cache_clear()
    else:  # 2.11 keeps it in a module global
        import airflow.models.crypto

        monkeypatch.setattr(airflow.models.crypto, "_fernet", None)
    compat.locations.mask_secret(SECRET)
    try:
        sealed = secret_kwargs.seal({"path": SECRET}, "check")
        assert SECRET not in json.dumps(sealed)
        assert secret_kwargs.unseal(sealed) == {"path": SECRET}
    finally:
        if cache_clear is not None:
            cache_clear()
