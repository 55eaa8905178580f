"""What the 3.x FastAPI glue and the 2.11 Flask glue share: the paths and the Calendars view's parameters.

Pure (no Airflow import): the glue modules differ only in how they authenticate and reach the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from airflow_smart_ext.ui.pages import URL_PREFIX
from airflow_smart_ext.ui.query_params import InvalidQuery, bounded_whole

DEFAULT_RUNS = 10
MAX_RUNS = 100
DEFAULT_PAST = 5


class CalendarsQuery(NamedTuple):
    """The Calendars view's parameters: one DAG (None: all), how many next and previous runs."""

    dag_id: str | None = None
    runs: int = DEFAULT_RUNS
    past: int = DEFAULT_PAST


def calendars_query(params: Mapping[str, str]) -> CalendarsQuery:
    """The Calendars view's URL parameters; an empty value means "not given" (an HTML form sends empty
    fields)."""
    known = ("dag_id", "runs", "past")
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InvalidQuery(f"unknown parameter(s) {unknown}; accepted parameters: {', '.join(known)}")
    given = {name: params[name].strip() for name in known if (params.get(name) or "").strip()}
    return CalendarsQuery(
        given.get("dag_id"),
        bounded_whole("runs", given["runs"], 1, MAX_RUNS) if "runs" in given else DEFAULT_RUNS,
        bounded_whole("past", given["past"], 0, MAX_RUNS) if "past" in given else DEFAULT_PAST,
    )


def single_params(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The URL's parameters, each given once and free of control characters (a NUL would reach the database
    driver: an error there is a 500, not the 400 a bad parameter gets)."""
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise InvalidQuery(f"parameter {name!r} is given more than once; give it once")
        if any(ord(char) < 32 or ord(char) == 127 for char in name + value):
            raise InvalidQuery(f"parameter {name!r} holds a control character")
        params[name] = value
    return params


def airflow_root(root_path: str) -> str:
    """Where Airflow is served, from the root path our pages are mounted at (a proxy's sub-path kept)."""
    return root_path[: -len(URL_PREFIX)] if root_path.endswith(URL_PREFIX) else root_path.rstrip("/")


#: For every page: Airflow 3.1+ shows our pages in an iframe sandboxed without ``allow-top-navigation`` and
#: without ``allow-popups``, so a ``target="_top"`` link to one of Airflow's own pages is blocked there, and
#: so is a ``target="_blank"`` one (our JSON). The frame is same-origin, so a ``_top`` link is handed to the
#: UI's router instead (history entry + ``popstate``): the page opens in the UI itself; a ``_blank`` link is
#: followed by a link in the top document (not sandboxed; the click's user activation reaches it): a new tab.
#: Outside a frame (2.11, or the page opened directly) links work as they are.
FRAME_LINKS_SCRIPT = """<script>
if (window.top !== window) {
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest('a[target="_top"], a[target="_blank"]');
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    var top = window.top;
    try { if (new URL(link.href).origin !== top.location.origin) return; } catch (e) { return; }
    event.preventDefault();
    if (link.target === "_blank") {
      var opener = top.document.createElement("a");
      opener.href = link.href; opener.target = "_blank"; opener.rel = "noopener";
      top.document.body.appendChild(opener); opener.click(); opener.remove();
      return;
    }
    top.history.pushState(null, "", link.href);
    top.dispatchEvent(new PopStateEvent("popstate", {state: null}));
  });
}
</script>"""
