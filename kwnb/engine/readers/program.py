"""What a training script does with its data, read from its source (Python's `ast`) once, when the run is made:
where it shards a dataset by hand after batching it.

`dataset.batch(b).shard(n, i)` deals whole batches out to the tasks, and under MultiWorkerMirroredStrategy the
strategy shards the dataset again (its auto-sharding, on unless the script sets `AutoShardPolicy.OFF`): when the
batches do not divide evenly among the tasks, they plan different numbers of steps and meet in a collective
with different tensors (tests/scripts/shard_after_batch.py: 17 batches, 9 on one task and 8 on the other). The
diagnoses name the line (engine/diagnoses/training_faults.py: uneven_steps); a value, read once: a pass reads no
file.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from ... import python_source

BATCHING = ("batch", "padded_batch")
MAX_CODE = 80  # characters of the call quoted


@dataclass(frozen=True)
class HandSharding:
    """One `.shard(...)` applied to a batched dataset: its file's name, line and code, and whether the script
    turns the strategy's auto-sharding off."""

    file: str
    line: int
    code: str
    auto_shard_off: bool

    @property
    def where(self) -> str:
        return f"{self.file} line {self.line}: {self.code}"


def hand_sharding(path: str, text: str) -> tuple[HandSharding, ...]:
    """The places in `text` (the source of the file at `path`) that shard a dataset after batching it: the
    batch in the same chain (`.batch(b).shard(n, i)`), or a name bound to a batched dataset earlier in the file
    (`ds = ds.batch(b)` ... `ds.shard(n, i)`). () when the text is not Python."""
    try:
        tree = python_source.parse(text, path)
    except (SyntaxError, ValueError):
        return ()
    batched = {}  # name -> the first line it was bound to a batched dataset
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _batches(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    batched[target.id] = min(node.lineno, batched.get(target.id, node.lineno))
    off = any(isinstance(node, ast.Attribute) and node.attr == "OFF" and _named(node.value) == "AutoShardPolicy"
              for node in ast.walk(tree))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "shard"):
            continue
        receiver = node.func.value
        bound = _root_name(receiver)
        if _batches(receiver) or (bound in batched and batched[bound] < node.lineno):
            code = " ".join((ast.get_source_segment(text, node) or "").split())
            start = max(code.rfind(f".{name}(") for name in BATCHING)  # from the batch on, where the chain has it
            code = code[start:] if start > 0 else code
            code = code if len(code) <= MAX_CODE else "..." + code[-(MAX_CODE - 3):]
            found.append(HandSharding(os.path.basename(path), node.lineno, code, off))
    return tuple(sorted(found, key=lambda place: place.line))


def _batches(node: ast.AST) -> bool:
    """A method chain with a `.batch(...)` call in it (`tf.data.Dataset.from_tensor_slices(x).batch(64)`)."""
    while isinstance(node, (ast.Call, ast.Attribute)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BATCHING:
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _root_name(node: ast.AST) -> str | None:
    """The name a method chain starts from (`ds` in `ds.prefetch(1).shard(2, 0)`)."""
    while isinstance(node, (ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _named(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
