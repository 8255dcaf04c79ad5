"""Checks of a recorded dashboard session (ui_support/dashboard_page.py's record_session): the overview,
the late worker's wait, the quiet logs and the timeline, shared by the JupyterLab and Notebook 7 tests.
"""
from __future__ import annotations

import re


def running(snapshot) -> bool:
    return bool(snapshot and snapshot["labels"]) and all(l.endswith(": running") for l in snapshot["labels"])


def during_run(ui):
    return [s for s in ui["snapshots"] if running(s)]


COLUMNS = ["task", "status", "phase", "progress", "rate", "CPU", "memory", "restarts", "time in phases"]


def phases(snapshot) -> list[str]:
    """Each overview row's phase, in the words the page shows ("waiting for peers")."""
    overview = snapshot and snapshot["overview"]
    return [row[COLUMNS.index("phase")] for row in overview["rows"]] if overview else []


def check_late_worker_shown_waiting(ui) -> None:
    """The chief waits in words while worker 1 starts; the banner names worker 1; then both train."""
    shown = [(s["t"], phases(s)) for s in ui["snapshots"]]
    waiting = [t for t, p in shown if p == ["waiting for peers", "starting"]]
    assert waiting, f"never the chief waiting while worker 1 starts: {sorted({tuple(p) for _, p in shown})}"
    assert any(p == ["training", "training"] and t > waiting[-1] for t, p in shown), "no training after the wait"
    banners = [s for s in ui["snapshots"] if s["banner"]]
    assert banners, "no diagnosis while the chief waited 14 s for worker 1"
    for s in banners:
        assert "waiting for peers" in s["banner"] and "for worker 1 to join" in s["banner"], s["banner"]
    # the banner and the table are two widgets, updated one after the other: some sample has both
    assert any(s["overview"]["rows"][1][0] == "\u26a0 worker 1" for s in banners), "no \u26a0 on worker 1's row"
    assert not ui["final"]["banner"], f"a diagnosis left after a clean run: {ui['final']['banner']}"


def check_overview_rows(ui) -> None:
    """Every task's row at once, with a recent rate and memory while training; at the end, peaks and
    each task's rate over its training."""
    live = [s["overview"] for s in ui["snapshots"] if phases(s) == ["training", "training"]]
    assert live and all(o["columns"] == COLUMNS and all(o["rows_shown"]) for o in live)
    full = [o for o in live if all(re.fullmatch(r"\d+\.\d steps/s", r[4]) and float(r[4].split()[0]) > 0
                                   and re.fullmatch(r"\d+(\.\d)? [KMG]iB", r[6]) and r[5].endswith(" %") for r in o["rows"])]
    assert full, f"no moment with both rows' rate, CPU and memory: {live[-1]['rows']}"
    assert [r[0] for r in full[0]["rows"]] == ["worker 0 (chief)", "worker 1"]
    for state in (ui["final"], ui["dark"]):
        rows = state["overview"]["rows"]
        assert [r[1] for r in rows] == ["FINISHED"] * 2 and phases(state) == ["finished"] * 2, rows
        assert all(re.fullmatch(r"peak \d+(\.\d)? [KMG]iB", r[6]) and r[7] == "0" for r in rows), rows
        assert all(re.fullmatch(r"\d+\.\d steps/s", r[4]) for r in rows), rows  # over each task's training


def toggle_text(snapshot) -> str:
    """What the visible tab's fold toggle says, e.g. "21 TensorFlow runtime messages hidden - show"."""
    return next((f["text"] for f in snapshot["folds"] if f["shown"]), "")


def check_runtime_lines_folded(ui) -> None:
    """TensorFlow's runtime lines are out of the log while the toggle says so, in until it is clicked back."""
    folded = [s for s in ui["snapshots"] if s["visible_log"] and toggle_text(s).endswith("hidden - show")]
    assert folded and toggle_text(ui["folded"]).endswith("hidden - show"), ui["folded"]["folds"]
    assert int(toggle_text(ui["folded"]).split()[0]) >= 3, "fewer than 3 runtime lines counted"
    for s in folded:
        assert "I0000" not in s["visible_log"], f"a runtime line shows while folded, at {s['t']:.1f} s"
    assert "I0000" in ui["unfolded"]["visible_log"] and toggle_text(ui["unfolded"]).endswith("shown - hide")
    assert "I0000" not in ui["refolded"]["visible_log"] and toggle_text(ui["refolded"]).endswith("hidden - show")


END_UPDATES = 2  # the run's end sends its bundle from the cell running then and from the dashboard's


def check_dashboard_shown_once(ui) -> None:
    """The live view shows the widgets only: one dashboard in the cell that started the run, and not
    the static account its output also carries, while the run goes and after its end updated that
    output; in the reopened page (whose unsaved outputs are gone) the one the last cell shows again."""
    live = [s["first_output"] for s in ui["snapshots"] if s] + [ui["final"]["first_output"]]
    seen = {(o["dashboards"], o["dashboards_in_page"], o["static_in_page"], o["account_boxes"]) for o in live}
    assert seen == {(1, 1, 0, 0)}, ("(dashboards in the run's cell, in the page, static accounts shown, their "
                                    f"output boxes shown): {seen}")
    # The same element while the run goes. Its end replaces the output's bundle (update_display_data), sent from
    # the cell running then and from the cell that showed the dashboard (notebook/dashboard.py, _update_display):
    # JupyterLab with ipykernel 7 applies both, 72 ms apart when measured, so a look between them sees one element
    # more. Never more than those.
    going = {s["first_output"]["node"] for s in ui["snapshots"] if s and not s["stop_disabled"]}
    drawn = {o["node"] for o in live}
    changes = [(round(s["t"], 1), s["first_output"]["node"], s["labels"]) for before, s in
               zip(ui["snapshots"], ui["snapshots"][1:]) if s and before and
               s["first_output"]["node"] != before["first_output"]["node"]]
    assert len(going) == 1 and len(drawn) <= 1 + END_UPDATES, \
        f"the dashboard's element changed {len(drawn) - 1} times: {drawn}, at (s, node, tabs) {changes}"
    reopened = ui["dark"]["first_output"]
    assert reopened["static_in_page"] == 0, reopened
    # The end's update_display_data reached the page's own copies of the outputs: the saved file holds
    # the widgets, then the final static account (an output holds the last bundle sent for its display id).
    widgets, saved = ui["saved"]
    assert "application/vnd.jupyter.widget-view+json" in widgets and "kwnb-static" not in widgets["text/html"]
    assert "kwnb-static" in saved["text/html"] and "exit codes: 0, 0" in saved["text/html"], saved["text/html"][:300]
    assert saved["text/html"].count("data:image/png;base64,") == 2 and "still going" not in saved["text/html"]


def check_timeline_drawn(ui) -> None:
    """The timeline under the curves, redrawn while the run goes, drawn again in the reopened page."""
    live = {s["timeline"]["src"] for s in during_run(ui) if s["timeline"] and s["timeline"]["rendered"]}
    assert len(live) >= 2, "the timeline did not change while the run went on"
    for state in (ui["final"], ui["dark"], ui["narrow_snapshot"]):
        timeline = state["timeline"]
        assert timeline["rendered"] and timeline["shown"] and timeline["width"] > 300 and timeline["below_curves"]
        assert timeline["box_width"] <= timeline["width"] * 1.05, "the timeline is upscaled (blurred)"
