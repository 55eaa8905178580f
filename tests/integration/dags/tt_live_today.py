"""The live timetable DAGs' "today" (tests/integration/test_timetables_live.py): one day per DAG for the
whole session, shared by every parse of its file and by the test.

A start_date computed at each parse ("three days ago") moves at local midnight: the dag-processor re-parses
every few seconds, so a DAG parsed before midnight and a test (or a re-parse) after it disagree on which days
are due — seen at 18:16 UTC, just after midnight in Asia/Kathmandu: the test expected runs from D-3 while the
DAG, parsed minutes earlier, had scheduled from D-4. So the first parse in an Airflow home stores its local
day in ``$AIRFLOW_HOME/tt_live_today/<dag_id>``; every later parse, and the test, read that day back.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from zoneinfo import ZoneInfo

import pendulum


def today_file(airflow_home: Path | str, dag_id: str) -> Path:
    return Path(airflow_home) / "tt_live_today" / dag_id


def session_today(dag_id: str, tz: str) -> pendulum.DateTime:
    """00:00 in ``tz`` of the local day of this Airflow home's first parse of ``dag_id``."""
    path = today_file(os.environ["AIRFLOW_HOME"], dag_id)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{dag_id}.{os.getpid()}")
        draft.write_text(dt.datetime.now(ZoneInfo(tz)).date().isoformat())
        try:
            os.link(draft, path)  # atomic, never replaces: of two first parses at once, one day wins
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    day = dt.date.fromisoformat(path.read_text())
    return pendulum.datetime(day.year, day.month, day.day, tz=tz)
