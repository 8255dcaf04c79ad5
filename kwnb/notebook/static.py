"""The run's static account: what a page that renders no widgets shows in the dashboard's place.

nbconvert's HTML without widget state (Jupyter Book, nbviewer), GitHub's notebook view and
`jupyter nbconvert --to markdown` draw no widgets. The dashboard's output carries this account in
the same mimebundle as its widget view (text/html, and the summary as text/plain): a front end
that renders widgets picks the widget view (JupyterLab and Notebook 7 rank it above text/html)
and shows only that; the others show this. The dashboard sends it again when the run ends
(update_display_data on the output's display_id), so a saved or executed notebook keeps the final
account: the overview and diagnoses as HTML, the curves and the timeline as embedded PNGs.
"""
from __future__ import annotations

import base64
import html

from .overview import OVERVIEW_CSS, badge, diagnoses_html, overview_html

STATIC_CLASS = "kwnb-static"  # what the browser test looks for: never shown beside the live widgets
# Pages style rendered HTML their own way (nbconvert's lab template right-aligns table cells and
# sets pre in the text font): these rules are more specific than theirs.
STATIC_CSS = (f".{STATIC_CLASS} .kwnb-overview th,.{STATIC_CLASS} .kwnb-overview td{{text-align:left}}"
              f".{STATIC_CLASS} pre{{font-family:monospace;font-size:0.85em;line-height:1.3;white-space:pre}}")


def title_html(snapshot) -> str:
    tasks = len(snapshot.tasks)
    return (f"{badge(snapshot.status)} <b>{html.escape(snapshot.name)}</b> &nbsp;·&nbsp; {tasks} "
            f"task{'s' * (tasks != 1)} &nbsp;·&nbsp; {snapshot.elapsed:.1f} s"
            + (f" &nbsp;·&nbsp; restarts {snapshot.restarts}" if snapshot.restarts else "")
            + (f" &nbsp;·&nbsp; {html.escape(snapshot.reason)}" if snapshot.reason else ""))


def missing_html(missing) -> str:
    """What a past run's folder could not tell (an older kwnb wrote it, a file was deleted)."""
    return "".join(f'<div style="font-size:0.85em;opacity:0.8">not recorded: {html.escape(what)}</div>'
                   for what in missing)


def png_tag(png: bytes | None, alt: str) -> str:
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<div><img alt="{html.escape(alt)}" style="max-width:100%" src="data:image/png;base64,{data}"></div>'


def static_html(snapshot, curves: bytes | None = None, timeline: bytes | None = None) -> str:
    """The account as HTML: title, diagnoses, overview, curves and timeline, and (once ended) the summary."""
    parts = [f"<style>{OVERVIEW_CSS}{STATIC_CSS}</style>", f"<div>{title_html(snapshot)}</div>",
             missing_html(snapshot.missing), diagnoses_html(snapshot.diagnoses), overview_html(snapshot, snapshot.diagnoses),
             png_tag(curves, f"{snapshot.name}: the chief's curves"),
             png_tag(timeline, f"{snapshot.name}: phases of each task")]
    if snapshot.done:
        parts.append(f"<details open><summary>summary</summary><pre>{html.escape(snapshot.summary())}</pre></details>")
    else:
        parts.append("<div><i>The run was still going when this was saved: its final account replaces "
                     "this when it ends while the notebook runs.</i></div>")
    return f'<div class="{STATIC_CLASS}">' + "".join(parts) + "</div>"
