"""The run's static account: what a page that renders no widgets shows in the dashboard's place.

GitHub's notebook view, `jupyter nbconvert --to markdown`, and nbconvert's HTML without widget state
draw no widgets; nbconvert's HTML with widget state (nbclient keeps it by default: Jupyter Book,
`nbconvert --execute`) draws them only with JavaScript from a CDN. The account is therefore an output
of its own, after the widgets' output, not an alternative in their mimebundle (nbconvert's HTML and
JupyterLab render one mimetype an output, and with state saved that is the widget view). Visible
by default, it is hidden by a style rule the widgets' own HTML carries (hide_account_css): in
JupyterLab, Notebook 7 and a published page whose widgets load, the widgets only; on any page where
they do not render, the account. The widgets' output has an empty text/html, so a page without
widgets shows the account once. The dashboard sends it again when the run ends
(update_display_data on its display_id), so a saved or executed notebook keeps the final account:
the overview and diagnoses as HTML, the curves and the timeline as embedded palette PNGs, the
summary folded under its exit codes. A run still going when the page was made says so, and where
its end is kept.
"""
from __future__ import annotations

import base64
import html
import io

from ..engine.records.summary import format_summary
from .overview import OVERVIEW_CSS, badge, diagnoses_html, overview_html

STATIC_CLASS = "kwnb-static"  # what the browser test looks for: never shown beside the live widgets
# Pages style rendered HTML their own way (nbconvert's lab template right-aligns table cells and
# sets pre in the text font): these rules are more specific than theirs.
STATIC_CSS = (f".{STATIC_CLASS} .kwnb-overview th,.{STATIC_CLASS} .kwnb-overview td{{text-align:left}}"
              f".{STATIC_CLASS} pre{{font-family:monospace;font-size:0.85em;line-height:1.3;white-space:pre-wrap}}")
# The pictures are flat colours and anti-aliased text: 64 palette colours look the same and take a
# quarter of the bytes (the 2-worker fit's curves 36 KB -> 10 KB, its timeline 13 KB -> 4 KB), and
# every published run carries them in the page and the .ipynb. About 30 ms, once, when the run ends.
# (Median cut keeps the white background exactly white; the fast octree made it 254, a grey box on a page.)
PALETTE_COLOURS = 64


def hide_account_css(account_class: str) -> str:
    """The rules that hide one dashboard's account, for a style inside its widgets: present exactly where
    they render. The output holding it goes too where the browser knows :has() (JupyterLab's and the
    classic Notebook's output boxes), so no empty box is left under the widgets."""
    return (f".{account_class},.jp-OutputArea-child:has(.{account_class}),"
            f".output_area:has(.{account_class}){{display:none}}")


def title_html(snapshot) -> str:
    tasks = len(snapshot.tasks)
    unknown = snapshot.past and snapshot.started_at is None  # a folder that never got its result
    return (f"{badge(snapshot.status)} <b>{html.escape(snapshot.name)}</b> &nbsp;·&nbsp; {tasks} "
            f"task{'s' * (tasks != 1)}" + ("" if unknown else f" &nbsp;·&nbsp; {snapshot.elapsed:.1f} s")
            + (f" &nbsp;·&nbsp; restarts {snapshot.restarts}" if snapshot.restarts else "")
            + (f" &nbsp;·&nbsp; {html.escape(snapshot.reason)}" if snapshot.reason else ""))


def missing_html(missing) -> str:
    """What a past run's folder could not tell (an older kwnb wrote it, a file was deleted)."""
    return "".join(f'<div style="font-size:0.85em;opacity:0.8">not recorded: {html.escape(what)}</div>'
                   for what in missing)


def compact_png(png: bytes) -> bytes:
    """The same picture in palette mode, or the PNG as it was if that is not smaller (or not a PNG)."""
    from PIL import Image  # Pillow comes with matplotlib

    try:
        image = Image.open(io.BytesIO(png))
        if "A" in image.getbands() and image.getchannel("A").getextrema()[0] < 255:
            return png  # a transparent figure: a palette without alpha would blacken its background
        buffer = io.BytesIO()
        palette = image.convert("RGB").quantize(colors=PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT,
                                                dither=Image.Dither.NONE)
        palette.save(buffer, "PNG", optimize=True)
    except (OSError, ValueError):
        return png
    return min(buffer.getvalue(), png, key=len)


def png_tag(png: bytes | None, alt: str) -> str:
    if not png:
        return ""
    data = base64.b64encode(compact_png(png)).decode("ascii")
    return f'<div><img alt="{html.escape(alt)}" style="max-width:100%" src="data:image/png;base64,{data}"></div>'


def static_html(snapshot, curves: bytes | None = None, timeline: bytes | None = None, summary: bool = True) -> str:
    """The account as HTML: title, diagnoses, overview, curves and timeline, and (once ended) the summary, unless
    `summary` is False: `%kw_wait` prints it just below (notebook/dashboard.py), and a page shows it once."""
    parts = [f"<style>{OVERVIEW_CSS}{STATIC_CSS}</style>", f"<div>{title_html(snapshot)}</div>",
             missing_html(snapshot.missing), diagnoses_html(snapshot.diagnoses), overview(snapshot),
             png_tag(curves, f"{snapshot.name}: the chief's curves"),
             png_tag(timeline, f"{snapshot.name}: phases of each task")]
    if snapshot.done and summary:
        # Closed: the picture above says how it went; the exit codes stay in sight on the fold's label.
        codes = ", ".join("unknown" if code is None else str(code) for code in snapshot.exit_codes)
        parts.append(f"<details><summary>summary (exit codes {codes})</summary><pre>{pre_text(format_summary(snapshot))}"
                     "</pre></details>")
    elif not snapshot.done:
        name = html.escape(snapshot.name)
        parts.append(f"<div><i>Still going when this was drawn ({snapshot.elapsed:.1f} s after launch): the "
                     "kernel that runs it replaces this account when the run ends, and a notebook executed "
                     f"headless keeps that only if a later cell waits for it (<code>%kw_wait {name}</code>). "
                     f"How it ended is kept in its run folder: <code>%kw_show {name}</code>.</i></div>")
    return f'<div class="{STATIC_CLASS}">' + "".join(parts) + "</div>"


def overview(snapshot) -> str:
    # The session's memory line is read when drawn: on an ended run's page it would tell the machine's memory
    # at the end (the kernel's and whatever else ran), not the run's; the table's "peak" column is the run's own.
    return overview_html(snapshot, snapshot.diagnoses, session_memory=not snapshot.done)


def pre_text(text: str) -> str:
    """Escaped, and with no blank line: Markdown (`nbconvert --to markdown`, GitHub) ends an HTML
    block at the first blank line and would render the rest of the account as Markdown."""
    return "\n".join(line if line.strip() else "&#160;" for line in html.escape(text).split("\n"))
