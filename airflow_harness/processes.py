"""The processes of one harness Airflow (``Processes``): each component started in its own process group
with its own log, waited for until healthy, stopped (gracefully, all at once, or as a crash)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from airflow_harness.sqlite_connect import HOSTNAME_ENV
from airflow_harness.state import AirflowEnvError, Component, EnvState

# The graceful part of tearing an Airflow down (every component at once): nothing is checked after it, and
# Airflow 3.3's triggerer waits >10 s for its triggers to clean up after SIGTERM (~12 s per teardown in CI).
TEARDOWN_GRACE = 2.0
# A Celery worker's line once it consumes its queues: "celery-worker@host ready."
_CELERY_READY = re.compile(r"@\S+ ready\.")


def free_port() -> int:
    """A TCP port nobody listens on right now (several harnesses run concurrently on one machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Processes(EnvState):
    def airflow_cli(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python -m airflow <args>`` with this env's settings (costs 2-3 s: not for polling)."""
        return self._python(["-m", "airflow", *args], f"`airflow {' '.join(args)}`", timeout, check)

    def run_python(self, code: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """``python -c code args`` with this env's settings: what Airflow's CLI does not offer (2.11's FAB
        users, its clear of one task instance)."""
        return self._python(["-c", code, *args], "python -c", timeout, True)

    def _python(
        self, argv: list[str], what: str, timeout: float, check: bool
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, *argv],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise AirflowEnvError(
                f"{what} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                f"\n--- stderr\n{proc.stderr[-4000:]}"
            )
        return proc

    def _component_argv(self, name: str) -> list[str]:
        base = [self.interpreters.get(name, sys.executable), "-m", "airflow"]
        if name == "api-server":
            return [
                *base,
                "api-server",
                "--port",
                str(self.api_port),
                "--host",
                self.bind_host,
                "--workers",
                "1",
            ]
        if name == "webserver":
            return [
                *base,
                "webserver",
                "--port",
                str(self.webserver_port),
                "--hostname",
                self.bind_host,
                "--workers",
                "1",
            ]
        if name in {"dag-processor", *self.scheduler_names}:
            return [*base, "scheduler" if name in self.scheduler_names else name]
        if name in self.worker_names:
            return [
                *base,
                "celery",
                "worker",
                "--concurrency",
                str(self.celery_concurrency),
                "--celery-hostname",
                f"{name}@%h",
            ]
        if name in self.triggerer_names:
            return [*base, "triggerer", *self.triggerer_args.get(name, ())]
        raise ValueError(
            f"unknown component {name!r}; expected one of {self.component_names + ['webserver']}"
        )

    def start_component(self, name: str, *, wait: bool = True, timeout: float = 120.0) -> None:
        """Start (or restart after ``stop_component``) one component in its own process group."""
        if not self.env:
            raise AirflowEnvError("start() the env first")
        existing = self.components.get(name)
        if existing is not None and existing.running:
            return
        if name == "webserver" and not self.webserver_port:
            self.webserver_port = free_port()
            self.env["AIRFLOW__WEBSERVER__WEB_SERVER_PORT"] = str(self.webserver_port)
        before = self._max_job_id(name)
        component = Component(name, self._component_argv(name), self.component_log_folder / f"{name}.log")
        with open(component.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%H:%M:%S')} starting: {' '.join(component.argv)}\n".encode())
            log.flush()
            component.process = subprocess.Popen(
                component.argv,
                env=self._component_env(name),
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: kill workers/children with it
            )
        self.components[name] = component
        if wait:
            self._wait_component(name, before, time.monotonic() + timeout)

    def _component_env(self, name: str) -> dict[str, str]:
        env = dict(self.env)
        if name in self.triggerer_names[1:]:  # every triggerer serves its trigger logs on a port of its own
            env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(free_port())
        if name in self.worker_names:  # so does every worker
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
        if self.broker is not None and name in {*self.worker_names, *self.triggerer_names}:
            env[HOSTNAME_ENV] = name  # component_hostname: the checks a test counts say where they ran
        return env

    def _same_kind(self, name: str) -> list[str]:
        for names in (self.scheduler_names, self.triggerer_names, self.worker_names):
            if name in names:
                return names
        return [name]

    def stop_component(self, name: str, grace: float = 10.0, *, crash: bool = False) -> None:
        """Kill a component's whole process tree: SIGTERM, then SIGKILL after ``grace`` seconds.

        ``crash=True``: SIGKILL at once, like a machine or container dying (no graceful shutdown).
        Airflow 3 puts some children in process groups of their own (the triggerer's trigger runner, task
        runners), which a signal to the leader's group misses: every descendant is collected first and
        killed as well, so nothing keeps running after this returns.
        """
        self.stop_components([name], grace=0.0 if crash else grace)

    def stop_components(self, names: list[str], grace: float) -> None:
        """``stop_component`` for several components at once: one SIGTERM each, one shared ``grace`` (0: no
        SIGTERM, SIGKILL at once), then SIGKILL to whatever is left of every tree."""
        import psutil  # an Airflow dependency

        procs: list[subprocess.Popen[bytes]] = []
        descendants: list[psutil.Process] = []
        for name in names:
            component = self.components.get(name)
            if component is None or component.process is None:
                continue
            component.stopped_on_purpose = True
            procs.append(component.process)
            with contextlib.suppress(psutil.Error):
                descendants += psutil.Process(component.process.pid).children(recursive=True)
        if grace > 0:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        # Children (task workers, gunicorn/uvicorn workers) may outlive the leader: kill the group anyway.
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        psutil.wait_procs(descendants, timeout=5)

    def drain_worker(self, name: str) -> subprocess.Popen[bytes]:
        """Celery's warm shutdown of one worker: SIGTERM to its main process only, so it takes no new message
        and exits once its running tasks end (a signal to the group would end those tasks too). Returns the
        process to wait for; the worker counts as stopped on purpose (``check_components`` leaves it)."""
        component = self.components[name]
        if name not in self.worker_names or component.process is None:
            raise AirflowEnvError(f"{name!r} is not a started Celery worker ({self.worker_names})")
        component.stopped_on_purpose = True
        os.kill(component.process.pid, signal.SIGTERM)
        return component.process

    def kill_component(self, name: str, sig: signal.Signals = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send ``sig`` to a component's main process only, like the OOM killer or a crash, and wait for its
        exit. Unlike ``stop_component`` it is not stopped on purpose: the harness sees a death."""
        component = self.components[name]
        if component.process is None or not component.running:
            raise AirflowEnvError(f"Airflow {name} is not running")
        os.kill(component.process.pid, sig)
        component.process.wait(timeout=timeout)

    def component_log(self, name: str) -> str:
        path = self.component_log_folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def component_logs_tail(self, lines: int = 120) -> dict[str, str]:
        """Last ``lines`` lines of every component log (attached to failing tests)."""
        if self._stopped and self._final_log_tails is not None:
            return dict(self._final_log_tails)
        out = {}
        for name in self.components:
            text = self.component_log(name).splitlines()
            out[name] = "\n".join(text[-lines:])
        return out

    def _job_type(self, name: str) -> str | None:
        if name in self.triggerer_names:
            return "TriggererJob"
        if name in self.scheduler_names:
            return "SchedulerJob"
        return {"dag-processor": "DagProcessorJob"}.get(name)

    def _max_job_id(self, name: str) -> int:
        job_type = self._job_type(name)
        if job_type is None or not self._db_ready():
            return 0
        rows = self.query("SELECT MAX(id) FROM job WHERE job_type = %s", (job_type,))
        return int(rows[0][0] or 0) if rows else 0

    def _db_ready(self) -> bool:
        try:
            self.query("SELECT 1 FROM job WHERE 1 = 0")
        except Exception:
            return False
        return True

    def _component_ready(self, name: str, after_job_id: int) -> bool:
        job_type = self._job_type(name)
        known = self.components[name].job_id
        if job_type is not None and known is not None:
            return bool(self.query("SELECT 1 FROM job WHERE id = %s AND state = 'running'", (known,)))
        if job_type is not None:
            rows = self.query(
                "SELECT MIN(id) FROM job WHERE job_type = %s AND state = 'running' AND id > %s",
                (job_type, after_job_id),
            )
            if not rows or rows[0][0] is None:
                return False
            self.components[name].job_id = int(rows[0][0])
            return True
        if name == "api-server":
            return self._http_ok(f"{self.api_url}/api/v2/monitor/health")
        if name == "webserver":
            return self._http_ok(f"http://127.0.0.1:{self.webserver_port}/health")
        if name in self.worker_names:  # Celery's own line once the worker consumes its queues
            return any(_CELERY_READY.search(line) for line in last_start(self.component_log(name)))
        return True

    def _wait_component(self, name: str, after_job_id: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            component = self.components[name]
            if not component.running:
                raise AirflowEnvError(
                    f"Airflow {name} exited with code {component.process and component.process.returncode}:\n"
                    + "\n".join(self.component_log(name).splitlines()[-60:])
                )
            if self._component_ready(name, after_job_id):
                return
            time.sleep(0.3)
        raise AirflowEnvError(
            f"Airflow {name} not healthy in time:\n" + "\n".join(self.component_log(name).splitlines()[-60:])
        )

    def wait_healthy(self, timeout: float = 180.0) -> None:
        """Until every started component is up (job heartbeat rows; api-server/webserver /health)."""
        deadline = time.monotonic() + timeout
        for name in list(self.components):
            self._wait_component(name, 0, deadline)

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return 200 <= resp.status < 300
        except (OSError, urllib.error.URLError):
            return False


def last_start(log: str) -> list[str]:
    """The lines a component's log holds since its last start (the log is appended across restarts)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("===== ")]
    return lines[starts[-1] :] if starts else lines
