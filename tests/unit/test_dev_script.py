"""scripts/dev.py's set-up on a fresh machine: the Debian packages the proofs need, the private clusters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import dev  # noqa: E402


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine with none of the packages: no server binaries, nothing on PATH, no browser."""
    monkeypatch.setenv("PG_BIN", str(tmp_path / "no-postgres"))
    monkeypatch.setattr(dev.shutil, "which", lambda name: None)
    monkeypatch.setattr(dev, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setattr(dev, "CHROMEDRIVER", tmp_path / "chromedriver")


@pytest.mark.usefixtures("bare_machine")
def test_every_missing_package_is_named() -> None:
    assert dev.missing_system_packages(postgres=True) == [
        "postgresql",
        "redis-server",
        "chromium",
        "chromium-driver",
    ]
    assert dev.missing_system_packages(postgres=False) == ["redis-server", "chromium", "chromium-driver"]


@pytest.mark.usefixtures("bare_machine")
def test_a_user_who_is_not_root_is_stopped_at_once_with_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev.os, "geteuid", lambda: 1000)
    calls: list[object] = []
    monkeypatch.setattr(dev.subprocess, "run", lambda *a, **k: calls.append(a))
    with pytest.raises(SystemExit) as stopped:
        dev.ensure_system_packages(postgres=True)
    message = str(stopped.value)
    assert "apt-get update && apt-get install -y postgresql redis-server chromium chromium-driver" in message
    assert "--sqlite-only" in message
    assert calls == []  # nothing was tried


@pytest.mark.usefixtures("bare_machine")
def test_root_installs_them_with_apt_get_and_stops_debians_own_services(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(dev.os, "geteuid", lambda: 0)
    monkeypatch.setattr(dev, "ROOT", tmp_path)
    installed = {"apt-get": "/usr/bin/apt-get"}
    monkeypatch.setattr(dev.shutil, "which", lambda name: installed.get(name))
    commands: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        commands.append(argv)
        if argv[:2] == ["apt-get", "install"]:  # what apt-get leaves on the machine
            (tmp_path / "no-postgres").mkdir()
            for binary in ("initdb", "pg_ctl"):
                (tmp_path / "no-postgres" / binary).touch()
            installed["redis-server"] = "/usr/bin/redis-server"
            dev.CHROMIUM.touch()
            dev.CHROMEDRIVER.touch()
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(dev.subprocess, "run", fake_run)
    dev.ensure_system_packages(postgres=True)
    assert commands == [
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "postgresql", "redis-server", "chromium", "chromium-driver"],
        ["service", "redis-server", "stop"],
        ["service", "postgresql", "stop"],
    ]


@pytest.mark.postgres  # in the PostgreSQL pass, where the server binaries are installed (initdb takes ~20 s)
def test_a_private_cluster_starts_restarts_and_is_removed() -> None:
    pg_bin = dev.postgres_bin()
    assert pg_bin is not None, "scripts/dev.py test installs PostgreSQL before the PostgreSQL pass"
    cluster = dev.PrivateCluster(pg_bin, "unit").start()
    try:
        assert subprocess.run(cluster.restart_command, shell=True, capture_output=True).returncode == 0
        status = subprocess.run(cluster.pg_ctl("status"), capture_output=True, text=True)
        assert "server is running" in status.stdout
    finally:
        cluster.stop()
    assert not cluster.dir.exists()


def test_lanes_run_every_step_once_and_end_together_in_the_postgresql_pass(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(dev, "ROOT", tmp_path)
    ran: list[tuple[str, str]] = []  # (step, the lane's log or "terminal")

    def step(name: str) -> dev.Step:
        def run() -> tuple[str, int, float]:
            log = dev.lane_log()
            ran.append((name, log.name if log else "terminal"))
            dev.say(f"ran {name}")
            return name, 0, 0.0

        return run

    def pg_shard(index: int) -> tuple[str, int, float]:
        log = dev.lane_log()
        ran.append((f"shard {index}", log.name if log else "terminal"))
        return f"shard {index}", 0, 0.0

    def failing() -> tuple[str, int, float]:
        raise RuntimeError("install failed")

    results = dev.run_in_lanes([step("sqlite"), step("distributed"), failing, step("demo")], pg_shard, "t")

    assert sorted(name for name, _code, _seconds in results) == sorted(
        [
            "sqlite",
            "distributed",
            "failing: raised RuntimeError('install failed')",
            "demo",
            "shard 0",
            "shard 1",
        ]
    )
    assert [code for name, code, _seconds in results if name.startswith("failing")] == [1], "never lost"
    lane_log = str(tmp_path / ".test-logs" / "t-lane-1.log")
    assert ("shard 1", lane_log) in ran, "lane 1 starts the PostgreSQL pass, its output in its log"
    assert [name for name, where in ran if where == "terminal"] == [
        "sqlite",
        "distributed",
        "demo",
        "shard 0",
    ]
