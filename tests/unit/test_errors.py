"""The one classification of transient vs permanent errors (sensors and task retries share it)."""

from __future__ import annotations

import datetime
import sqlite3
import urllib.error
from email.message import Message

import pytest

from airflow_smart_ext import errors
from airflow_smart_ext.compat.locations import AirflowException

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.timezone.utc)


class _Response:
    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class HTTPError(Exception):  # shaped like requests.exceptions.HTTPError / httpx.HTTPStatusError
    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status_code} error")
        self.response = _Response(status_code, headers)


class OperationalError(Exception):  # shaped like a DB-API driver's
    pass


class ConnectTimeout(Exception):  # shaped like requests' (not a builtin ConnectionError subclass)
    pass


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (ConnectionRefusedError(111, "Connection refused"), True),
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (ConnectTimeout(), True),
        (HTTPError(503), True),
        (HTTPError(500), True),
        (HTTPError(429), True),
        (HTTPError(408), True),
        (HTTPError(404), False),
        (HTTPError(400), False),
        (AirflowException("503:Service Unavailable"), True),  # Airflow's HttpHook message
        (AirflowException("404:NOT FOUND"), False),
        (Exception("503: rows failed"), False),  # a status in the message only for Airflow's HTTP errors
        (sqlite3.OperationalError("no such table: loads"), True),  # a sensor may wait for a table
        (OperationalError('FATAL:  password authentication failed for user "x"'), False),
        (OperationalError('FATAL:  database "nope" does not exist'), False),
        (sqlite3.OperationalError("unable to open database file"), False),
        (sqlite3.OperationalError("database is locked"), True),
        (OperationalError("server closed the connection unexpectedly"), True),
        (sqlite3.OperationalError('near "SELEC": syntax error'), False),
        (ValueError("bad value"), False),
        (KeyError("x"), False),
    ],
)
def test_default_classification(exc: BaseException, transient: bool) -> None:
    found = errors.classify(exc)
    assert found.transient is transient, found
    assert found.reason


def test_urllib_http_error_status_and_retry_after() -> None:
    headers = Message()
    headers["Retry-After"] = "7"
    exc = urllib.error.HTTPError("http://x", 429, "Too Many Requests", headers, None)
    found = errors.classify(exc, now=NOW)
    assert (found.transient, found.http_status, found.retry_after) == (True, 429, 7.0)
    assert (
        errors.classify(urllib.error.HTTPError("http://x", 403, "Forbidden", Message(), None)).transient
        is False
    )
    assert errors.classify(urllib.error.URLError(ConnectionRefusedError())).transient is True


def test_retry_after_as_http_date() -> None:
    exc = HTTPError(503, {"Retry-After": "Wed, 25 Nov 2026 12:01:30 GMT"})
    assert errors.classify(exc, now=NOW).retry_after == 90.0
    past = HTTPError(503, {"Retry-After": "Wed, 25 Nov 2026 11:00:00 GMT"})
    assert errors.classify(past, now=NOW).retry_after == 0.0
    assert errors.classify(HTTPError(503, {"Retry-After": "soon"}), now=NOW).retry_after is None
    assert errors.parse_retry_after(float("nan")) is None


def test_the_cause_chain_is_followed() -> None:
    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as inner:
            raise RuntimeError("query failed") from inner
    except RuntimeError as outer:
        assert errors.classify(outer).transient is True


def test_sqlalchemy_style_orig_is_read() -> None:
    class DBAPIError(Exception):
        def __init__(self) -> None:
            super().__init__("wrapped")
            self.orig = ConnectionResetError()

    assert errors.classify(DBAPIError()).transient is True


def test_user_transient_types_by_class_and_dotted_path() -> None:
    class Flaky(Exception):
        pass

    assert errors.is_transient(Flaky()) is False
    assert errors.is_transient(Flaky(), (Flaky,)) is True
    types = errors.resolve_error_types(["builtins.LookupError"])
    assert types == (LookupError,)
    assert errors.is_transient(KeyError("k"), types) is True
    assert errors.error_type_paths([LookupError]) == ["builtins.LookupError"]


@pytest.mark.parametrize("spec", [["no.such.module.Error"], ["builtins.len"], [42], ["NoDots"]])
def test_bad_transient_types_name_the_parameter(spec: list[object]) -> None:
    with pytest.raises(ValueError, match="transient_errors"):
        errors.resolve_error_types(spec)  # type: ignore[arg-type]


def test_code_attribute_of_a_non_http_error_is_not_a_status() -> None:
    assert errors.http_status(SystemExit(500)) is None
    assert errors.classify(SystemExit(500)).transient is False
