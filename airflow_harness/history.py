"""The states each task instance of one harness Airflow went through (``StateHistory``), sampled from the
metadata DB by a thread, so a test can tell that a wait deferred, rescheduled or ran in a worker."""

from __future__ import annotations

from airflow_harness.state import AirflowEnvError, EnvState

# Seconds between two samples of the task_instance table (state_history). Deferral and reschedule phases
# last at least one triggerer / scheduler loop (~1 s), and a worker phase at least a task process's start
# (seconds), so 0.25 s sees them; each sample reads the whole table (thousands of rows late in a session).
STATE_SAMPLE_INTERVAL = 0.25


class StateHistory(EnvState):
    def _sample_states(self) -> None:
        while not self._sampler_stop.is_set():
            try:
                rows = self.query("SELECT dag_id, run_id, task_id, map_index, state FROM task_instance")
            except Exception:  # DB briefly unavailable (restart, lock): sample again next tick
                rows = []
            with self._history_lock:
                for dag_id, run_id, task_id, map_index, state in rows:
                    if state is None:
                        continue
                    seen = self._history.setdefault((dag_id, run_id, task_id, int(map_index)), [])
                    if not seen or seen[-1] != state:
                        seen.append(str(state))
            self._sampler_stop.wait(self.state_sample_interval or STATE_SAMPLE_INTERVAL)

    def state_history(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[str]:
        """Task states observed so far, in order, consecutive duplicates collapsed (e.g. ``["scheduled",
        "queued", "running", "deferred", "scheduled", "queued", "running", "success"]``). Sampled every
        STATE_SAMPLE_INTERVAL (0.25 s) from the task_instance table, then the state now, plus evidence the
        DB keeps: a TaskReschedule row proves an ``up_for_reschedule`` phase the sampler may have missed."""
        if self.state_sample_interval is None:
            raise AirflowEnvError(
                "state_history: this AirflowEnv samples no states (state_sample_interval=None)"
            )
        with self._history_lock:
            history = list(self._history.get((dag_id, run_id, task_id, map_index), []))
        # The state now, which the last sample (up to one interval ago) may not have seen yet.
        now = self.query(
            "SELECT state FROM task_instance "
            "WHERE dag_id = %s AND run_id = %s AND task_id = %s AND map_index = %s",
            (dag_id, run_id, task_id, map_index),
        )
        if now and now[0][0] and (not history or history[-1] != now[0][0]):
            history.append(str(now[0][0]))
        if "up_for_reschedule" not in history:
            rows = self.query(
                "SELECT COUNT(*) FROM task_reschedule tr "
                + (
                    "JOIN task_instance ti ON ti.id = tr.ti_id WHERE ti.dag_id = %s AND ti.run_id = %s "
                    "AND ti.task_id = %s AND ti.map_index = %s"
                    if self.is_airflow3
                    else "WHERE tr.dag_id = %s AND tr.run_id = %s AND tr.task_id = %s AND tr.map_index = %s"
                ),
                (dag_id, run_id, task_id, map_index),
            )
            if rows and rows[0][0]:
                history.insert(max(len(history) - 1, 0), "up_for_reschedule")
        return history
