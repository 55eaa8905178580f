"""A private Redis server for the CeleryExecutor (the distributed pass): Debian's ``redis-server`` on a free
loopback port, its data in a folder of the Airflow home, started and stopped by the harness.

Persistence as a production broker has it (an append-only file, flushed every second): a graceful restart
(``restart()``, SIGTERM) keeps every queued message; ``restart(crash=True)`` (SIGKILL) may lose the last
second of them, as a real crash does.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REDIS_SERVER = "redis-server"
INSTALL_HINT = (
    "install Debian's redis-server package (scripts/dev.py test does: apt-get install redis-server)"
)


class RedisBrokerError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisBroker:
    """``port``: fixed, or None to take a free one at the first ``start()`` (kept across restarts): a port
    picked long before it is bound can be taken meanwhile by another process's outgoing connection."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.folder = folder
        self._port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def port(self) -> int:
        if self._port is None:
            raise RedisBrokerError("the broker has no port before its first start()")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> None:
        binary = shutil.which(REDIS_SERVER)
        if binary is None:
            raise RedisBrokerError(f"{REDIS_SERVER} not found on PATH: {INSTALL_HINT}")
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._port is None:
            self._port = _free_port()
        argv = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.folder),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.folder / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = self.folder / "redis.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RedisBrokerError(f"redis-server did not answer on port {self.port}:\n{tail}")
            time.sleep(0.1)

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, *, crash: bool = False, grace: float = 10.0) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def restart(self, *, crash: bool = False, down_for: float = 0.0) -> None:
        """Stop the server (SIGTERM: it flushes its append-only file first) and start it again on the same
        port, ``down_for`` seconds later."""
        self.stop(crash=crash)
        time.sleep(down_for)
        self.start()
        self.restarts += 1
