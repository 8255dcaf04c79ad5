"""The corpus (tests/corpus/, issue 29 item 6) under kwnb: every entry's verdict, clean ones silent and wrong ones
told with the right kind. The programs run one at a time, each once per session (outcomes). Four at a time, as they
ran until 2026-11-28: 6 min 41 s for the 27 entries on 2 cores with others' tests running (load average 4-10), over
the 4 minutes wished for; 15 on CI. Issue 39 added 11 (38 in all, 21 on CI): alone they took 1108 s at a load
average of 31-47, 390 s as it fell from 38 to 2. Issue 40 added 6 Keras 3 on JAX mistakes (44 in all, 27 on CI;
`-k jax`): alone, 4 at a time, 87 s at a load average of 11. An entry that `awaits` work kwnb's right verdict needs is a
strict expected failure. Public programs need a local snapshot of their repository (tests/corpus/snapshots.py):
where there is none (CI reaches only package registries) they are skipped, saying so. benchmarks/corpus.py also runs
each entry by hand and compares.

All 45 alone on a 2-core machine otherwise idle (`/usr/bin/time`): 4 at a time 372 s and 713 CPU-s, 2 at a time
330 s and 619 (one run each); one at a time, three runs: 366 s and 557 CPU-s, 325 s and 488, 450 s and 651. A 2-task
run keeps both cores busy by itself; more TensorFlow processes than cores spend more CPU for the same work
(collectives waiting on peers that are not running). In the whole suite the change took the corpus from 710 to 507
CPU-s and every other large file's CPU down with it (docs/testing.md, "Crowding costs CPU")."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from corpus.entries import ENTRIES, MISTAKES, REPORTS, Entry
from corpus.run import Outcome, kwnb_outcome, under_kwnb, verdict_problems
from corpus.snapshots import Unavailable

PARALLEL = 1  # runs at once: 2 TensorFlow processes on 2 cores (the module's docstring: more at a time cost more)
FIXED_PORTS = ("fixed-tf-config",)  # binds 12345 and 23456 itself: alone, after the others
_outcomes: dict[str, Outcome | Unavailable] = {}


def _run(entry: Entry, folder) -> Outcome | Unavailable:
    try:
        run = under_kwnb(entry, folder / entry.name)
    except Unavailable as missing:
        return missing
    return kwnb_outcome(run)


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory):
    """Every selected entry's outcome under kwnb, run once for the module, PARALLEL at a time."""
    wanted = [item.callspec.params["entry"] for item in request.session.items
              if getattr(item, "module", None) is request.module and hasattr(item, "callspec")]
    folder = tmp_path_factory.mktemp("corpus")
    together = [e for e in wanted if e.name not in FIXED_PORTS]
    with ThreadPoolExecutor(PARALLEL) as pool:
        _outcomes.update(zip([e.name for e in together], pool.map(lambda e: _run(e, folder), together)))
    _outcomes.update({e.name: _run(e, folder) for e in wanted if e.name in FIXED_PORTS})
    return _outcomes


@pytest.mark.slow
@pytest.mark.timeout(2700)  # the first test's setup runs the whole module's fixture: 45 entries, one at a time
@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_kwnb_gives_each_corpus_entry_its_verdict(entry, outcomes, request):
    outcome = outcomes[entry.name]
    if isinstance(outcome, Unavailable):
        pytest.skip(f"public program without its snapshot here: {outcome}")
    if entry.awaits:  # strict: once kwnb gives the right verdict, the entry's `awaits` must go
        request.applymarker(pytest.mark.xfail(reason=f"awaits {entry.awaits}", strict=True))
    assert verdict_problems(entry, outcome) == [], (outcome.kinds, outcome.messages, outcome.exit_codes)


def test_every_entry_declares_a_verdict_its_by_hand_exits_and_a_public_one_its_source():
    assert len([e for e in ENTRIES if e.public]) >= 10 and len([e for e in ENTRIES if not e.public]) >= 10
    assert len([e for e in ENTRIES if e.report]) >= 5
    assert len({e.name for e in ENTRIES}) == len(ENTRIES)
    for entry in ENTRIES:
        assert len(entry.by_hand) == entry.n + entry.ps + entry.chief, entry.name
        assert all(code in (0, 1, None, -9) for code in entry.by_hand), entry.name  # -9: SIGKILL (jax-process-killed)
        assert not entry.awaits or entry.kinds or entry.says, entry.name  # what kwnb should say is declared
        if entry.public:
            assert entry.license == "Apache-2.0" and entry.changes and len(entry.source.commit) == 40, entry.name
        elif entry.report:
            assert entry.report.startswith("https://github.com/"), entry.name
            thread = entry.report.removeprefix("https://github.com/").replace("/issues/", "#")
            assert thread in (REPORTS / entry.main).read_text(), entry.name  # the program names its thread
        else:
            assert (MISTAKES / entry.main).is_file(), entry.name
