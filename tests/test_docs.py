"""The README and docs/ hold together: every relative link reaches a file (and its anchor), the README
stays a landing page, each docs page says what it is for, and every diagnosis kind has its row."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "notebooks" / "README.md",
         REPO / "benchmarks" / "README.md"]
README_MAX_LINES = 260  # a landing page: about 250 lines, the rest in docs/

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")  # [text](target), text may hold a badge's [..]
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(markdown: str) -> str:
    """The text a reader sees as prose: code blocks and code spans cannot hold links."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base, n = slug(heading), 0
        while (name := base if n == 0 else f"{base}-{n}") in found:  # GitHub numbers repeated headings
            n += 1
        found.add(name)
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not this repository's
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{page.relative_to(root)}: {target} (no heading #{anchor} in {file.name})")
    return broken


def test_every_relative_link_reaches_its_file_and_anchor():
    assert all(page.exists() for page in PAGES)
    broken = [problem for page in PAGES for problem in broken_links(page)]
    assert broken == []


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Roles: chief, evaluator\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[fine](other.md#roles-chief-evaluator) [fine](#page) `[code](gone.md)`\n"
                    "[gone](gone.md) [no anchor](other.md#nowhere) [self](#nowhere-here) [web](https://x.org/a.md)\n"
                    "```\n[in a block](also-gone.md)\n```\n")
    assert broken_links(page, root=tmp_path) == [
        "page.md: gone.md (no such file)", "page.md: other.md#nowhere (no heading #nowhere in other.md)",
        "page.md: #nowhere-here (no heading #nowhere-here in page.md)"]


def test_anchors_are_githubs():
    assert slug("kwnb doctor: will a run work here?") == "kwnb-doctor-will-a-run-work-here"
    assert slug("kwnb — watch multi-worker TensorFlow training") == "kwnb--watch-multi-worker-tensorflow-training"
    assert slug("Re-runs start `warm`") == "re-runs-start-warm"


def test_the_readme_is_a_landing_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_each_docs_page_has_a_title_and_a_purpose():
    for page in sorted((REPO / "docs").glob("*.md")):
        title, blank, purpose, *_ = page.read_text().splitlines()
        assert title.startswith("# ") and blank == "" and purpose and not purpose.startswith("#"), page.name


def kinds_made() -> set[str]:
    """Every kind a Diagnosis(...) in kwnb/engine/diagnoses/ is made with (its first argument)."""
    kinds = set()
    for path in (REPO / "kwnb" / "engine" / "diagnoses").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Diagnosis" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                kinds.add(node.args[0].value)
    return kinds


def test_every_diagnosis_kind_is_a_row_of_the_table_and_has_its_docs_row():
    """The table of kinds (engine/diagnoses/diagnose.py: KINDS) lists every kind the diagnoses make, and
    docs/diagnoses.md has a row for each kind in it and for no other."""
    from kwnb.engine.diagnoses.diagnose import KINDS

    table = [kind.name for kind in KINDS]
    assert len(table) == len(set(table)) and {"waiting_for_peers", "peer_lost", "out_of_memory"} <= set(table)
    made = kinds_made()
    assert {"waiting_for_peers", "peer_lost", "out_of_memory", "uneven_steps"} <= made  # the scan sees them
    assert sorted(made - set(table)) == [], "a kind made but not in KINDS"
    rows = set(re.findall(r"^\| `(\w+)` \|", (REPO / "docs" / "diagnoses.md").read_text(), re.M))
    assert sorted(set(table) - rows) == [], "a kind of KINDS without its row in docs/diagnoses.md"
    assert sorted(rows - set(table)) == [], "a row of docs/diagnoses.md for no kind of KINDS"
