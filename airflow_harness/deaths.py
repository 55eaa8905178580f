"""Component deaths: what the harness records when an Airflow process it started exits on its own, and the
known Airflow defects whose deaths may be restarted and their test re-run once (issue 41).

A death is never a pass. ``AirflowEnv.check_components()`` raises on one (it restarts nothing);
tests/integration/conftest.py fails the test the death happened in, restarts the component
(``AirflowEnv.restart_dead()``) so later tests run on a healthy Airflow, and re-runs the test once only when
every death in it matches ``KNOWN_DEFECTS``. Its terminal summary lists each death and counts the re-runs.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class KnownDefect:
    """An Airflow defect that ends a component: ``components`` (a regex, whole name) whose death cause (the
    exit status and the last error line of its log) matches ``cause`` (a regex, searched), with the evidence
    that it is Airflow's and not ours (``citation``)."""

    components: str
    cause: str
    citation: str

    def matches(self, component: str, cause: str) -> bool:
        return bool(re.fullmatch(self.components, component) and re.search(self.cause, cause))


# The one table of deaths the harness forgives once (a restart and one re-run of the test they happened in).
# Only exits Airflow itself made (a signal is never one of them), matched on the death's cause line.
KNOWN_DEFECTS: tuple[KnownDefect, ...] = (
    KnownDefect(
        components=r"scheduler(-\d+)?",
        cause=r"database is locked",
        citation=(
            "SQLite 'database is locked' ends the scheduler under CPU contention (sqlite3's 5 s busy timeout; "
            "seen on Airflow 3.3.2 in _orphan_unreferenced_assets): the project's AIRFLOW-NOTES.md, "
            "'Distributed deployments', SQLite bullet; the same exit reported upstream as apache/airflow#12999"
        ),
    ),
    KnownDefect(
        components=r"dag-processor|scheduler(-\d+)?|triggerer(-\d+)?",
        # mid-query: "server closed the connection"; reconnecting while the server is still down: "refused",
        # or while it stops or starts: "the database system is shutting down" / "starting up" (seen in CI's
        # rehearsal for a scheduler)
        cause=(
            r"server closed the connection unexpectedly|(?i:connection refused)"
            r"|the database system is (?:shutting down|starting up)"
        ),
        citation=(
            "a PostgreSQL restart ends an Airflow 3.3.2 component instead of a reconnect (an OperationalError "
            "its loop does not catch: seen for the dag-processor, a scheduler and a triggerer): "
            "docs/deployment.md, 'Run each component under a supervisor'"
        ),
    ),
)


def known_defect(component: str, returncode: int | None, cause: str) -> KnownDefect | None:
    """The known defect this death is, if any. A process ended by a signal (``returncode < 0``: the OOM
    killer, a test, an operator) did not exit of an Airflow defect, whatever its log said before."""
    if returncode is None or returncode < 0:
        return None
    return next((defect for defect in KNOWN_DEFECTS if defect.matches(component, cause)), None)


@dataclasses.dataclass
class ComponentDeath:
    """One component process that exited on its own (not stopped by the test), recorded once.

    ``test``/``when``/``attempt``: the test (phase, try) it failed, set by tests/integration/conftest.py.
    ``restart``: "" until handled; "restarted", "restarted by the supervisor", "restarted by the test" or
    "could not be restarted: ...". ``supervised``: why a supervisor restarted it (``AirflowEnv.supervised``):
    such a death is reported but fails no test.
    """

    component: str
    returncode: int | None
    cause: str
    tail: str
    known: KnownDefect | None
    test: str | None = None
    when: str | None = None
    attempt: int = 1
    restart: str = ""
    supervised: str | None = None

    @property
    def headline(self) -> str:
        kind = f"known Airflow defect: {self.known.citation}" if self.known else "not a known Airflow defect"
        supervised = f"; restarted by the test's supervisor ({self.supervised})" if self.supervised else ""
        return f"Airflow {self.component} died ({self.cause}); {kind}{supervised}"

    def describe(self) -> str:
        """The headline and the last lines of its log (since its last start)."""
        return f"{self.headline}. Last lines of its log:\n{self.tail}"
