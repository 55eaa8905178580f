"""One classification of errors: *transient* (the system waited on or called may recover: wait it out,
retry later) or *permanent* (retrying cannot help: fail now). Pure: no Airflow, no client library.

Sensors use it to ride out an outage ("not yet" instead of a failed try); the task retry policy uses it to
decide between retrying and failing now, and to honour an HTTP ``Retry-After``. Exceptions are read by
duck typing, so ``requests``, ``httpx``, ``urllib``, DB-API drivers, SQLAlchemy and Airflow's HTTP hook are
understood without any of them being a dependency:

- an HTTP status from ``exc.response.status_code`` (requests, httpx), ``exc.code`` / ``exc.status``
  (urllib's ``HTTPError``, aiohttp) or, for Airflow's ``HttpHook`` errors (``AirflowException`` /
  ``HttpErrorException``), a message starting ``"503:"``;
- 429, 408 and 5xx are transient, every other 4xx is permanent;
- connection failures and timeouts (``ConnectionError``, ``TimeoutError``, ``requests``' ``ConnectionError``
  / ``Timeout``, ``httpx``' ``TransportError``, ``urllib``'s ``URLError`` without a status) are transient;
- a DB-API ``OperationalError`` / ``InterfaceError`` (disconnects, "database is locked", a server that is
  starting or shutting down) is transient, except the messages that mean the statement itself is wrong
  (SQLite reports syntax errors as ``OperationalError``);
- the ``__cause__`` / ``__context__`` chain is followed, so an error wrapped by SQLAlchemy or re-raised by a
  hook is judged by what it wraps;
- everything else is permanent. Users add their own transient types (classes or dotted paths).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_smart_ext import units

TRANSIENT_HTTP_STATUSES = frozenset({408, 429})  # plus every 5xx
_HTTP_HOOK_MESSAGE = re.compile(r"^\s*(\d{3})\s*:")  # Airflow's HttpHook: AirflowException("503:Service ...")
# HttpHook raises AirflowException("503:Service Unavailable"); the async hook HttpErrorException likewise.
_HTTP_MESSAGE_TYPE_NAMES = frozenset({"AirflowException", "HttpErrorException"})
_HTTP_TYPE_NAME = re.compile(r"http|response|status", re.IGNORECASE)
_CONNECTION_TYPE_NAMES = frozenset(
    {
        # requests / urllib3 / httpx / aiohttp names, matched by class name anywhere in the MRO
        "ConnectionError",
        "ConnectTimeout",
        "ReadTimeout",
        "Timeout",
        "TimeoutException",
        "TransportError",
        "ProtocolError",
        "NewConnectionError",
        "MaxRetryError",
        "RemoteDisconnected",
        "ClientConnectionError",
        "ServerDisconnectedError",
        "URLError",
    }
)
_DBAPI_TRANSIENT_TYPE_NAMES = frozenset({"OperationalError", "InterfaceError"})
# An OperationalError whose message says the statement is wrong will fail the same way every time.
_DBAPI_PERMANENT_MESSAGE = re.compile(
    r"syntax error|no such column|no such function|incomplete input|unrecognized token"
    r"|authentication failed|does not exist|unknown database|unable to open database file",
    re.IGNORECASE,
)
_MAX_CHAIN = 8  # __cause__/__context__ links followed


@dataclass(frozen=True)
class ErrorClass:
    """What one exception means for waiting and retrying."""

    transient: bool
    reason: str  # short and readable, e.g. "HTTP 503 (transient)", "ConnectionRefusedError (transient)"
    http_status: int | None = None
    retry_after: float | None = None  # seconds from the moment of classification, when the error says


def _type_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, if any (requests, httpx, urllib, aiohttp, Airflow HttpHook)."""
    response = getattr(exc, "response", None)
    candidates = [getattr(response, "status_code", None), getattr(response, "status", None)]
    if _HTTP_TYPE_NAME.search(" ".join(_type_names(exc))):  # ``code``/``status`` mean other things elsewhere
        candidates += [
            getattr(exc, "status_code", None),
            getattr(exc, "code", None),
            getattr(exc, "status", None),
        ]
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    # A status in the message only from Airflow's own HTTP errors: "500: rows failed" elsewhere is no HTTP.
    if not _type_names(exc) & _HTTP_MESSAGE_TYPE_NAMES:
        return None
    match = _HTTP_HOOK_MESSAGE.match(str(exc))
    status = int(match.group(1)) if match else None
    return status if status is not None and 100 <= status <= 599 else None


def _headers(exc: BaseException) -> Any:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers if headers is not None else getattr(exc, "headers", None)


def parse_retry_after(value: Any, now: datetime.datetime | None = None) -> float | None:
    """A ``Retry-After`` value (delay-seconds or an HTTP date, RFC 9110 §10.2.3) as seconds from ``now``.

    A date in the past means 0; an unreadable value means None (ignored, never a crash).
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(float(value), 0.0) if value == value else None  # NaN is unreadable
    text = str(value).strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # HTTP dates are GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return max(units.seconds(when - now), 0.0)


def retry_after(exc: BaseException, now: datetime.datetime | None = None) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` header or a ``retry_after`` attribute)."""
    explicit = getattr(exc, "retry_after", None)
    if explicit is not None:
        return parse_retry_after(explicit, now)
    headers = _headers(exc)
    if headers is None:
        return None
    try:
        value = headers.get("Retry-After")
        if value is None:
            value = headers.get("retry-after")
    except Exception:  # an exotic headers object: ignore rather than fail the classification
        return None
    return parse_retry_after(value, now)


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _classify_one(
    exc: BaseException, extra: tuple[type[BaseException], ...], now: datetime.datetime | None
) -> ErrorClass | None:
    name = type(exc).__name__
    if extra and isinstance(exc, extra):
        return ErrorClass(True, f"{name} (transient: listed in transient_errors)")
    status = http_status(exc)
    if status is not None:
        transient = status >= 500 or status in TRANSIENT_HTTP_STATUSES
        return ErrorClass(
            transient,
            f"HTTP {status} ({'transient' if transient else 'permanent'})",
            http_status=status,
            retry_after=retry_after(exc, now) if transient else None,
        )
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return ErrorClass(True, f"{name} (transient: connection or timeout)")
    names = _type_names(exc)
    if names & _CONNECTION_TYPE_NAMES:
        return ErrorClass(True, f"{name} (transient: connection or timeout)")
    if names & _DBAPI_TRANSIENT_TYPE_NAMES:
        if _DBAPI_PERMANENT_MESSAGE.search(str(exc)):
            return ErrorClass(False, f"{name} (permanent: the statement is invalid)")
        return ErrorClass(True, f"{name} (transient: database unavailable or busy)")
    # SQLAlchemy keeps the driver's error on ``.orig``
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException) and orig is not exc:
        return _classify_one(orig, extra, now)
    return None


def classify(
    exc: BaseException,
    transient_errors: Iterable[type[BaseException]] = (),
    now: datetime.datetime | None = None,
) -> ErrorClass:
    """Classify ``exc`` (and what it wraps). ``transient_errors``: extra types the user calls transient."""
    extra = tuple(transient_errors)
    links = list(_chain(exc))
    for position, link in enumerate(links):
        found = _classify_one(link, extra, now)
        if found is None:
            continue
        if found.transient and found.http_status is not None and found.retry_after is None:
            # HttpHook re-raises a 429 as AirflowException("429:...") inside ``except HTTPError``: the
            # server's Retry-After is on the response of the error it wraps.
            for wrapped in links[position + 1 :]:
                wait = retry_after(wrapped, now)
                if wait is not None:
                    return dataclasses.replace(found, retry_after=wait)
        return found
    return ErrorClass(False, f"{type(exc).__name__} (permanent)")


def is_transient(exc: BaseException, transient_errors: Iterable[type[BaseException]] = ()) -> bool:
    return classify(exc, transient_errors).transient


def type_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def resolve_error_types(
    spec: Iterable[type[BaseException] | str] | None,
    param: str = "transient_errors",
    importer: Callable[[str], Any] | None = None,
) -> tuple[type[BaseException], ...]:
    """Exception classes from classes or dotted paths; a clear ``ValueError`` naming ``param`` otherwise.

    ``importer`` imports a dotted path (default: the module, then the attribute); the triggerer passes one
    that also finds modules of the DAGs folder.
    """
    if spec is None:
        return ()
    if isinstance(spec, (str, type)):
        spec = [spec]
    resolved: list[type[BaseException]] = []
    for item in spec:
        cls: Any = item
        if isinstance(item, str):
            module_name, _, attr = item.rpartition(".")
            try:
                if importer is not None:
                    cls = importer(item)
                else:
                    cls = getattr(importlib.import_module(module_name), attr) if module_name else None
            except (ImportError, AttributeError, ValueError) as err:
                raise ValueError(
                    f"{param}: cannot import {item!r} ({err}); give exception classes or dotted paths such "
                    "as 'requests.exceptions.ConnectionError'"
                ) from None
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            hint = (
                f" (a builtin needs its module: 'builtins.{item}')"
                if isinstance(item, str) and "." not in item
                else ""
            )
            raise ValueError(
                f"{param}: {item!r} is not an exception class{hint}; give exception classes or dotted paths "
                "such as 'requests.exceptions.ConnectionError'"
            )
        resolved.append(cls)
    return tuple(resolved)


def error_type_paths(
    spec: Iterable[type[BaseException] | str] | None, param: str = "transient_errors"
) -> list[str]:
    """The dotted paths of ``spec`` (validated), the JSON form that travels to a trigger."""
    return [type_path(cls) for cls in resolve_error_types(spec, param)]


__all__ = [
    "ErrorClass",
    "TRANSIENT_HTTP_STATUSES",
    "classify",
    "error_type_paths",
    "http_status",
    "is_transient",
    "parse_retry_after",
    "resolve_error_types",
    "retry_after",
    "type_path",
]
