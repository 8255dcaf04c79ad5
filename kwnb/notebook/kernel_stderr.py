"""TensorFlow's C++ start-up lines from the kernel's own process kept out of the learner's cells.

A notebook that trains a baseline in the kernel imports TensorFlow there, and its C++ runtime writes to file
descriptor 2 (absl's warning, "Could not find cuda drivers", "failed call to cuInit", the CPU-instructions
notice): ipykernel forwards that descriptor into the running cell as red stderr, twice over in the tutorials'
set-up cells. TF_CPP_MIN_LOG_LEVEL is no cure: absl's line ignores it, and the workers would inherit it and
lose the joining lines kwnb reads. So `%load_ext kwnb` puts a line filter in front of ipykernel's pipe: the
runtime lines go to the kernel's own stderr (the Jupyter server's log, where a terminal user sees them), every
other line into the cell as before. Only what is written to the descriptor passes here (C++ code, child
processes that inherit it); Python's `sys.stderr` writes go straight to the cell.
"""
from __future__ import annotations

import os
import select
import sys
import threading

from ..engine.readers.tf_messages import is_runtime_line

PARTIAL_WAIT = 0.1  # s a line without its newline is held before it goes on as it is (a prompt, a bare "\r")
READ_SIZE = 65536  # bytes per read, ipykernel's own pipe buffer size

_filter: RuntimeLineFilter | None = None  # one per process: descriptor 2 is the process's


class RuntimeLineFilter:
    """Reads what is written to descriptor 2 and routes it line by line: runtime lines to `aside`, the rest to
    `cell` (the descriptor 2 it replaced). Its one thread owns both descriptors' writes."""

    def __init__(self, cell: int, aside: int):
        self.cell, self.aside = cell, aside
        self._read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        threading.Thread(target=self._pump, name="kwnb-kernel-stderr", daemon=True).start()

    def _pump(self) -> None:
        pending = b""
        while True:
            ready, _, _ = select.select([self._read], [], [], PARTIAL_WAIT if pending else None)
            if not ready:  # a partial line waited long enough: on as it is
                os.write(self.cell, pending)
                pending = b""
                continue
            chunk = os.read(self._read, READ_SIZE)
            if not chunk:
                return
            *lines, pending = (pending + chunk).split(b"\n")
            self._route(lines)

    def _route(self, lines: list[bytes]) -> None:
        shown, aside = bytearray(), bytearray()
        for line in lines:
            runtime = is_runtime_line(line.decode(errors="replace"))
            (aside if runtime else shown).extend(line + b"\n")
        if aside:
            os.write(self.aside, aside)
        if shown:
            os.write(self.cell, shown)


def keep_runtime_lines_out_of_cells() -> bool:
    """Installs the filter in an ipykernel that forwards descriptor 2 to cells; False where there is nothing to
    filter: a terminal IPython, or ipykernel under pytest (which it leaves uncaptured), or once done already."""
    global _filter
    if _filter is not None or type(sys.stderr).__module__ != "ipykernel.iostream":
        return False
    try:
        aside = sys.stderr.fileno()  # ipykernel's copy of the kernel's original stderr, while it captures
    except (OSError, ValueError):
        return False
    if aside == 2:
        return False
    sys.stderr.flush()
    _filter = RuntimeLineFilter(cell=os.dup(2), aside=aside)
    return True
