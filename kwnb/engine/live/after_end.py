"""What an on_end callback goes on doing after its run's end. A callback gets the learner's Run (run.py),
which shows nothing of the engine; one with more to do after the end (kwnb.launch's pictures:
pictures/outputs.py) returns an AfterEnd, and the run's engine side (run_engine.py) runs its work in a thread
of its own, hands it the one way to add to the run's notes, and keeps the thread for `Run.wait(pictures=True)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class AfterEnd:
    """`work(note)` runs after the end, in a thread named `name`; `note(text)` adds to the run's notes."""

    name: str
    work: Callable[[Callable[[str], None]], None]
