"""The corpus (tests/corpus/, issue 29 item 6): every public multi-worker program and learner mistake run under
kwnb (kwnb.launch with its defaults, 2 workers unless the program needs a chief and ps) and by hand (plain
subprocess.Popen, each task its TF_CONFIG, or for Keras 3 on JAX the KERAS_DISTRIBUTION_* variables), compared:
the same pass or fail both ways, the by-hand exit codes the entry declares, and kwnb's verdict (clean entries: no
diagnosis; wrong ones: the declared kinds). An entry that awaits work kwnb's right verdict needs (entries.py) is
listed with what kwnb said and what it awaits; its verdict is no broken rule until then, and one that holds
already is (the entry's `awaits` must go).

    .venv/bin/python -m benchmarks.corpus [--only NAME,...] [--parallel 3] [--out benchmarks/results/corpus.md]

Writes the table to OUT and every outcome, with kwnb's messages in full, to OUT with .json.

Public programs are made from local snapshots of their repositories (tests/corpus/snapshots.py); an entry
whose snapshot is missing is listed as unavailable. Exits 1 if any entry broke a rule.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import ROOT
from tests.corpus.entries import ENTRIES, Entry
from tests.corpus.run import by_hand, kwnb_outcome, passed, under_kwnb, verdict_problems
from tests.corpus.snapshots import Unavailable

FIXED_PORTS = ("fixed-tf-config",)  # its script binds 12345 and 23456 itself: never beside another of its runs


def one(entry: Entry, folder: Path) -> dict:
    """One entry's result; a runner error is a broken rule too, not the end of the other entries."""
    try:
        return compare(entry, folder)
    except Exception as error:  # noqa: BLE001 (reported in the table)
        print(f"{entry.name}: runner error {error!r}", file=sys.stderr, flush=True)
        return {"entry": entry, "unavailable": f"runner error: {error!r}", "problems": [repr(error)]}


def compare(entry: Entry, folder: Path) -> dict:
    try:
        run = under_kwnb(entry, folder / "kwnb")
    except Unavailable as missing:
        return {"entry": entry, "unavailable": str(missing)}
    kwnb_side = kwnb_outcome(run)
    hand = by_hand(entry, folder / "hand")
    problems = verdict_problems(entry, kwnb_side)
    awaiting = {"awaits": f"awaits {entry.awaits}: {'; '.join(problems)}"} if entry.awaits and problems else {}
    if awaiting:
        problems = []
    elif entry.awaits:
        problems.append(f"the verdict holds: {entry.name} awaits nothing any more")
    if kwnb_side.passed != passed(hand.exit_codes) and not entry.race:
        problems.append(f"kwnb {'passed' if kwnb_side.passed else 'failed'}, by hand the other way")
    if not same_codes(entry, hand.exit_codes):
        problems.append(f"by hand {hand.exit_codes}, declared {list(entry.by_hand)}")
    print(f"{entry.name}: {'ok' if not problems else '; '.join(problems)}", file=sys.stderr, flush=True)
    return {"entry": entry, "kwnb": kwnb_side, "hand": hand, "problems": problems, **awaiting}


def same_codes(entry: Entry, codes: list) -> bool:
    if entry.race:  # the declared codes are the worst case: no more failures than those, and no other codes
        return all(code in (0, 1) for code in codes) and codes.count(1) <= entry.by_hand.count(1)
    if entry.any_order:
        return sorted(map(str, entry.by_hand)) == sorted(map(str, codes))
    return list(entry.by_hand) == codes


def row(result: dict) -> str:
    entry = result["entry"]
    origin = f"[{entry.source.repo}]({entry.source.url})" if entry.public else \
        f"[report]({entry.report})" if entry.report else "mistake"
    expected = ", ".join(entry.kinds) or "clean"
    if "unavailable" in result:
        return f"| {entry.name} | {origin} | {expected} | unavailable: {result['unavailable']} | | | |"
    kwnb_side, hand = result["kwnb"], result["hand"]
    said = ", ".join(kwnb_side.kinds) or "nothing"
    return (f"| {entry.name} | {origin} | {expected} | {said} | {kwnb_side.exit_codes} ({kwnb_side.seconds} s) | "
            f"{hand.exit_codes} ({hand.seconds} s) | {'; '.join(result['problems']) or result.get('awaits', 'ok')} |")


def details(result: dict) -> dict:
    """A result as JSON: what kwnb said in full, for the table's reader who wants the words."""
    return {"entry": result["entry"].name, **{key: dataclasses.asdict(value) if dataclasses.is_dataclass(value)
                                             else value for key, value in result.items() if key != "entry"}}


def table(results: list[dict], seconds: float) -> str:
    broken = [r for r in results if r.get("problems")]
    lines = [f"# Corpus: {len(results)} entries under kwnb and by hand", "",
             f"`python -m benchmarks.corpus`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{seconds:.0f} s in all; {len(broken)} broke a rule.", "",
             "| entry | from | kwnb must say | kwnb said | under kwnb: exit codes | by hand | result |",
             "|---|---|---|---|---|---|---|"]
    return "\n".join(lines + [row(r) for r in results]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "corpus.md")
    args = parser.parse_args()
    chosen = [e for e in ENTRIES if not args.only or e.name in args.only.split(",")]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="kwnb-corpus-") as tmp:
        folder = Path(tmp)
        together = [e for e in chosen if e.name not in FIXED_PORTS]
        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(lambda e: one(e, folder / e.name), together))
        results += [one(e, folder / e.name) for e in chosen if e.name in FIXED_PORTS]
    order = {e.name: i for i, e in enumerate(chosen)}
    results.sort(key=lambda r: order[r["entry"].name])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table(results, time.time() - started))
    args.out.with_suffix(".json").write_text(json.dumps([details(r) for r in results], indent=1) + "\n")
    print(args.out.read_text())
    return 1 if any(r.get("problems") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
