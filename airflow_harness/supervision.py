"""Component deaths of one harness Airflow (``Supervision``): found, described (exit status, cause, log tail,
the known Airflow defect it is), restarted as a supervisor would; a death is never silent."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

from airflow_harness.deaths import ComponentDeath, known_defect
from airflow_harness.processes import last_start
from airflow_harness.state import ComponentDeadError, EnvState


class Supervision(EnvState):
    def check_components(self) -> None:
        """Raise ``ComponentDeadError`` while a component that died on its own is not restarted, naming it and
        its cause; waits call this, so a test fails at once instead of waiting for a dead Airflow.

        Never restarts anything: a death fails the test it happens in (tests/integration/conftest.py, which
        restarts the component after that test, ``restart_dead()``). Components stopped on purpose
        (``stop_component``, ``drain_worker``) are no death.
        """
        if not self._started or self._stopped:
            return
        self.detect_deaths()
        if self._supervisor is not None:
            for death in self.pending_deaths():
                if death.known is not None:
                    death.supervised = self._supervisor
                    self._restart(death)
        problems = [f"{death.headline} (not restarted yet)" for death in self.pending_deaths()]
        problems += [f"Airflow {name} is dead: {cause}" for name, cause in sorted(self.dead.items())]
        if problems:
            raise ComponentDeadError("; ".join(problems))

    def detect_deaths(self) -> list[ComponentDeath]:
        """Record every component that exited on its own since the last call (``deaths``: name, exit status
        and cause, the last lines of its log, the known Airflow defect it is if any), each once, also on
        stderr; returns the new ones. Restarts nothing, raises nothing."""
        if not self._started or self._stopped:
            return []
        found = []
        for name, component in list(self.components.items()):
            process = component.process
            if component.stopped_on_purpose or component.death is not None or process is None:
                continue
            if process.poll() is None:
                continue
            log = self.component_log(name)
            cause = _death_cause(process.returncode, log)
            tail = "\n".join(last_start(log)[-40:])
            death = ComponentDeath(
                name, process.returncode, cause, tail, known_defect(name, process.returncode, cause)
            )
            component.death = death
            self.deaths.append(death)
            found.append(death)
            print(f"[airflow_harness] {death.describe()}", file=sys.stderr, flush=True)
        return found

    def pending_deaths(self) -> list[ComponentDeath]:
        """Deaths whose component was not started again since (by ``restart_dead`` or the test) and is not
        given up on (``dead``)."""
        return [
            death
            for death in self.deaths
            if (component := self.components.get(death.component)) is not None
            and component.death is death
            and death.component not in self.dead
        ]

    @property
    def incidents(self) -> list[str]:
        """Every death so far, described (headline and log tail), in order."""
        return [death.describe() for death in self.deaths]

    def restart_dead(self) -> list[ComponentDeath]:
        """Start again, as a supervisor would, every component whose death was recorded and that nobody
        started since; returns the deaths it handled (``restart`` says how). One that cannot be started lands
        in ``dead`` and stays down: every later ``check_components()`` raises naming it and its cause."""
        if not self._started or self._stopped:
            return []
        self.detect_deaths()
        for death in self.deaths:
            if not death.restart and death not in self.pending_deaths():
                death.restart = "restarted by the test"
        handled = self.pending_deaths()
        for death in handled:
            self._restart(death)
        return handled

    def _restart(self, death: ComponentDeath) -> None:
        name, old = death.component, self.components[death.component]
        self.stop_component(name, crash=True)  # its children (workers, parsers) may outlive it
        try:
            self.start_component(name)
        except Exception as failed:  # whatever stops it from starting: it stays down, named in dead
            first = str(failed).splitlines()[0] if str(failed) else type(failed).__name__
            death.restart = f"could not be restarted: {first}"
            self.dead[name] = f"{death.cause}; its restart failed: {first}"
            self.stop_component(name, crash=True)  # whatever is left of the failed start
        else:
            self.components[name].restarts = old.restarts + 1
            death.restart = "restarted by the supervisor" if death.supervised else "restarted"
        print(f"[airflow_harness] Airflow {name}: {death.restart}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def supervised(self, why: str) -> Iterator[None]:
        """Within the block, a component whose death is a known Airflow defect (``deaths.KNOWN_DEFECTS``) is
        started again at its next ``check_components()`` (every wait calls it), as the supervisor
        docs/deployment.md requires would (systemd's ``Restart=on-failure``), and that death does not fail the
        test: for a test whose subject is the fault that defect answers (a metadata-database restart). ``why``
        is shown with each such death. Any other death still fails the test."""
        self._supervisor = why
        try:
            yield
        finally:
            self._supervisor = None


def _death_cause(returncode: int | None, log: str) -> str:
    """One line: the exit status and, for a process that exited, the last error line among the last lines of
    its log. A signal is the whole cause: the process wrote nothing as it died, and an earlier error line (a
    task's failure the scheduler logged long before) would be read as the reason."""
    if returncode is not None and returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    errors = [
        line.strip()
        for line in last_start(log)[-40:]
        if any(word in line for word in ("Error:", "Exception:", "Error(", "error:"))
    ]
    status = f"exit {returncode}"
    return f"{status}: {errors[-1][:300]}" if errors else status
