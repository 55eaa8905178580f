"""What our pages share to read like the Airflow around them: colours that follow its light or dark theme,
times in the timezone its UI has selected, ids that do not wrap, and a bad filter shown inline.

Pure (no Airflow import). The UI keeps both choices in the browser, not on the server, so a script reads
them where Airflow keeps them (same origin: the 3.x UI shows our pages in a same-origin frame):

* theme: Airflow 3.x's UI sets ``class="dark"`` on its ``<html>`` (next-themes, ``attribute: "class"``,
  stored under ``localStorage["theme"]``: light, dark or system). On 2.11 the pages sit in the webserver's
  layout, whose dark toggle inverts the whole page (``html[data-color-scheme=dark]``): ours with it.
* timezone: 3.x keeps it as JSON under ``localStorage["timezone"]`` (default: the browser's own zone);
  2.11 under ``localStorage["selected-timezone"]`` (default: ``[webserver] default_ui_timezone``, passed in).

Without the script (or before it runs) every time stays in UTC as ISO 8601, which is what the JSON has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

#: Light colours by default; the dark ones when the script puts ``dark`` on ``<html>``. Every rule is inside
#: ``.smart-ext`` (CSS nesting), so that inside 2.11's page layout ours and Airflow's do not meet.
STYLE = """
:root{--fg:#1a202c;--bg:#fff;--muted:#718096;--line:#cbd5e0;--head:#edf2f7;--bad:#c53030;--bad-bg:#fff5f5;
--link:#2b6cb0;color-scheme:light}
:root.dark{--fg:#e2e8f0;--bg:#1a202c;--muted:#a0aec0;--line:#4a5568;--head:#2d3748;--bad:#feb2b2;
--bad-bg:#3b1d1d;--link:#90cdf4;color-scheme:dark}
body.smart-ext{margin:1rem}
.smart-ext{font-family:system-ui,sans-serif;color:var(--fg);background:var(--bg)}
"""

#: The rules every page shares (nested in ``.smart-ext`` by :func:`scoped`).
COMMON_RULES = """
a{color:var(--link)} .muted{color:var(--muted)} .id{white-space:nowrap}
.alert{border:1px solid var(--bad);background:var(--bad-bg);color:var(--bad);padding:.5rem;font-weight:bold}
"""


def scoped(rules: str) -> str:
    """A page's own rules, with the shared ones, applied inside ``.smart-ext`` only."""
    return f"{STYLE}.smart-ext{{{COMMON_RULES}{rules}}}\n"


@dataclass(frozen=True)
class Page:
    """A page in parts, for a layout to put together: its own (:func:`standalone`) or Airflow 2.11's."""

    title: str
    style: str
    body: str
    scripts: str
    default_timezone: str | None = None


def standalone(page: Page) -> str:
    """The page as its own document (Airflow 3.x shows it in the UI's frame)."""
    return (
        f'<!doctype html><html {html_attributes(page.default_timezone)}><head><meta charset="utf-8">'
        f"<title>{escape(page.title)}</title><style>{page.style}</style></head>"
        f'<body class="smart-ext">{page.body}{page.scripts}</body></html>'
    )


Layout = Callable[[Page], str]

#: Applies Airflow's theme and the UI's timezone (see the module's docstring). Each ``<time datetime=ISO>``
#: shows the moment in that zone; its title keeps the UTC value.
LOOK_SCRIPT = """<script>
(function () {
  var root = document.documentElement;
  function stored(key) { try { return window.localStorage.getItem(key); } catch (e) { return null; } }
  var dark = false;
  try {
    if (window.top !== window) dark = window.top.document.documentElement.classList.contains("dark");
    else {
      var theme = stored("theme");
      dark = theme === "dark" || (theme === "system" &&
        window.matchMedia("(prefers-color-scheme: dark)").matches);
    }
  } catch (e) {}
  root.classList.toggle("dark", dark);
  var zone = stored("timezone"), fallback = root.dataset.defaultTimezone ||
    (document.querySelector(".smart-ext[data-default-timezone]") || {dataset: {}}).dataset.defaultTimezone;
  if (zone !== null) { try { zone = JSON.parse(zone); } catch (e) {} }
  else zone = stored("selected-timezone");
  if (!zone || zone === "local") zone = fallback && fallback !== "local" ? fallback : undefined;
  var format;
  try {
    format = new Intl.DateTimeFormat("sv-SE", {timeZone: zone, year: "numeric", month: "2-digit",
      day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"});
  } catch (e) { return; }
  root.dataset.uiTimezone = format.resolvedOptions().timeZone;
  document.querySelectorAll("time[datetime].ui-zone").forEach(function (node) {
    var moment = new Date(node.getAttribute("datetime"));
    if (isNaN(moment)) return;
    node.title = node.getAttribute("datetime");
    node.textContent = format.format(moment);
  });
})();
</script>"""


def html_attributes(default_timezone: str | None) -> str:
    """The ``<html>`` element's attributes: the server's default UI timezone for the script (2.11)."""
    zone = f' data-default-timezone="{escape(default_timezone)}"' if default_timezone else ""
    return f'lang="en"{zone}'


def ui_time(iso: str | None) -> str:
    """A moment the script shows in the UI's timezone (the ISO value until it runs)."""
    if iso is None:
        return ""
    value = escape(iso)
    # data-datetime-convert: 2.11's own script would rewrite it too (datetime_utils.js)
    return f'<time class="ui-zone" datetime="{value}" data-datetime-convert="false">{value}</time>'


def filter_error(message: str) -> str:
    """A refused filter, shown above the form that holds the value (instead of a page of raw JSON)."""
    return f'<p id="query-error" class="alert" role="alert">{escape(message)}</p>'


def asked_values(params: Mapping[str, str], names: Sequence[str]) -> dict[str, Any]:
    """What the form sent, to show it again as typed (unknown names dropped)."""
    return {name: params.get(name) for name in names}
