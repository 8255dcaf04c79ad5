"""The few ipywidgets APIs that differ between 7 and 8, bridged here and nowhere else.

Colab's front end renders ipywidgets 7 only (its runtime holds 7.7.1), and classic Notebook 6 is usually
paired with it; JupyterLab 4 and Notebook 7 come with 8. What kwnb's notebook/ uses of ipywidgets and
the two differ on (read from 7.7.1's and 8.1's sources):

- a Tab's titles: 8 has the `titles` tuple; 7 has `set_title(i, title)` and `get_title(i)` over a
  `_titles` dict keyed by the position as a string;
- a widget's display bundle: 8 has `_repr_mimebundle_`; 7 displays itself in `_ipython_display_`, with
  the same `application/vnd.jupyter.widget-view+json` data (model_id, version 2.0) made by hand.

Everything else kwnb builds (HTML, Image, Button and ToggleButton with `tooltip`, FloatProgress, Label,
VBox, HBox, Layout(display=...), add_class, observe) reads the same in both, and 7.6+ draws its tabs with
lumino's `lm-` classes as 8 does, so the dashboard's style rules reach both.
"""
from __future__ import annotations

import ipywidgets as widgets

# ipywidgets 7's own palette, which classic Notebook's pages (.output_area) take, draws a danger button in
# white on Material red 500 (#f44336): 3.7:1, below WCAG AA's 4.5:1 for the Stop button's word. Red 700, which
# JupyterLab's light theme gives it, is 5.0:1. JupyterLab's and Notebook 7's pages keep their theme's own.
CLASSIC_STOP_CSS = ".output_area .kwnb-dashboard .jupyter-button.mod-danger{background-color:#d32f2f}"

# What the dashboard needs of ipywidgets, each as the attribute 8 has and the one 7 has.
NEEDED = {"way to title a Tab's pages (Tab.titles, Tab.set_title)": (lambda: widgets.Tab, ("titles", "set_title")),
          "way to display a widget (_repr_mimebundle_, _ipython_display_)":
              (lambda: widgets.DOMWidget, ("_repr_mimebundle_", "_ipython_display_"))}


def unbridged() -> list[str]:
    """What the dashboard needs that this ipywidgets has in neither form: [] where the bridge below works.
    Read on the classes: no widget is made (a notebook saved by nbclient would keep its state)."""
    return [what for what, (where, names) in NEEDED.items() if not any(hasattr(where(), name) for name in names)]


def tab_titles(tab) -> tuple[str, ...]:
    """A Tab's titles in the order of its children ('' where none is set)."""
    if hasattr(tab, "titles"):
        return tuple(title or "" for title in tab.titles)
    return tuple(tab.get_title(i) or "" for i in range(len(tab.children)))


def set_tab_titles(tab, titles) -> None:
    """Set every title of a Tab, one message to the browser either way."""
    titles = tuple(titles)
    if hasattr(tab, "titles"):
        tab.titles = titles
    elif hasattr(tab, "set_title"):  # which sends the whole dict each time: set them all, then send once
        tab._titles = {str(i): title for i, title in enumerate(titles)}
    else:
        raise AttributeError(f"{type(tab).__name__} has neither titles (ipywidgets 8) nor set_title (7)")


def widget_bundle(widget) -> dict:
    """The display bundle of a widget: what `display(widget)` sends, as a dict that can be amended."""
    if hasattr(widget, "_repr_mimebundle_"):
        return dict(widget._repr_mimebundle_())
    plain = repr(widget)
    return {"text/plain": plain if len(plain) <= 110 else plain[:110] + "\u2026",
            "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                         "model_id": widget.model_id}}
