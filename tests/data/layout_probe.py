"""Not a module of kwnb: tests/test_layout.py reads it to check that type-only imports are seen."""
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kwnb.engine.live.run import Run
