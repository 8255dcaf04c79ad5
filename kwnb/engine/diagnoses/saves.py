"""same_save_path: tasks that saved to one path. Under MultiWorkerMirroredStrategy every worker must save (saving
is collective), the chief to the real path and each other worker to a temporary folder of its own; a program that
gives every worker the same path has their writes collide.

How kwnb knows, from a task's traceback (TensorFlow 2.21, tests/data/replays/same-path-*): a SavedModel or a
checkpoint is written as temporary shards (`PATH/variables/variables_temp/part-00000-of-00001...` for
`model.save(PATH)`, `PREFIX_temp/part-...` for a checkpoint or `save_weights`), which `MergeV2Checkpoints` merges and
then deletes. One process never loses its own shards; a second one saving to the same path deletes them under it,
and the merge fails: `NotFoundError: ... variables_temp/part-00000-of-00001.data-00000-of-00001; No such file or
directory [Op:MergeV2Checkpoints]`, or `InvalidArgumentError: ... allow_missing_files was set to false and
.../variables_temp/part-00000-of-00001 did not exist`. Which task fails, and whether any does, is a race: a run
whose saves did not overlap finishes with one task's files.

And without a failure, from the program and its files: a save call in the script given one literal path
(`model.save("saved_model")`, `save_weights`, `tf.saved_model.save`, a `CheckpointManager`'s directory), under no
`if` that asks which task this is, is made by every worker with that path; once every worker of a
MultiWorkerMirroredStrategy run has finished, a file at that path written during the run (ProcessFacts.written,
which the supervisor stats) says the save was made. `literal_saves` reads the script once, at launch.

Keras' `ModelCheckpoint(filepath)` is read too, with its `{epoch}`-style fields matching any file. Under
MultiWorkerMirroredStrategy tf-keras' callback writes the other workers' files to temporary folders itself, so one
path is right there; it collides only where each task trains alone, which distribution.py's not_distributed says.

A task that reads such a path back (a restore, as the Keras guide's fault-tolerance section does at every start)
may find another task's file there, half-written or being replaced: `ValueError: File not found: filepath=./ckpt/
ckpt-1.keras` where it had just listed that file (the corpus' keras-guide-multi-gpu-tf-checkpoints, one run in many;
tests/data/tf-2.21/shared-checkpoint-read-worker-1.log). `shared_save_named` finds the save an error names, and the
`error` diagnosis adds `read_while_saved`'s words to it.
"""
from __future__ import annotations

import ast
import glob
import itertools
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from ... import python_source
from ..readers.tf_events import PythonTraceback
from ..tasks.view import TaskView
from .diagnosis import Diagnosis, Look

MERGE_OP = "MergeV2Checkpoints"
LOCKED = re.compile(r"unable to lock file")  # h5py's (HDF5 file locking), from a save to one .h5 file
# The path a save was given, before the temporary shard's part: a SavedModel's folder, or a checkpoint's prefix.
_SHARD = re.compile(r"""(?P<path>[^\s'"]+?)(?:/variables/variables_temp|_temp)/part-\d+-of-\d+""")
FILES_LOOKED_AT = 1000  # of a saved folder, for the newest one's time: a model's folder holds a dozen
SAVE_METHODS = ("save", "save_weights")  # model.save(PATH), model.save_weights(PATH), checkpoint.save(PREFIX)
JOINS = ("os.path.join", "posixpath.join", "path.join")  # a path built of literals: os.path.join(CKPT_DIR, "ckpt")
FIELD = re.compile(r"\{[^{}]*\}")  # ModelCheckpoint's filepath fields, "ckpt-{epoch:02d}.keras": any text
# What tasks training alone should know of ModelCheckpoint's one path (not_distributed's and error's words).
PER_WORKER = ("under MultiWorkerMirroredStrategy, tf-keras' ModelCheckpoint writes the other workers' files to "
              "temporary folders itself")
TUTORIAL = "https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras#model_saving_and_loading"


def collided_path(traceback: PythonTraceback) -> str | None:
    """The path whose save failed because another process removed its temporary shards, or None."""
    said = traceback.error[1]
    text = "\n".join((said, *traceback.lines))
    if MERGE_OP not in text:
        return None
    match = _SHARD.search(said) or _SHARD.search(text)
    return match.group("path") if match else None


def same_save_path(look: Look) -> list[Diagnosis]:
    """Each task whose save failed as saves to one path fail; else, once a run whose workers all finished saved
    to a literal path, that they all wrote it."""
    failed = [found for task in look.tasks if (found := _failed_save(task, look))]
    return failed or _saved_alike(look)


def _locked_save(traceback: PythonTraceback, look: Look) -> str | None:
    """The literal path of the script's save that failed because another process held the file open (h5py's
    "unable to lock file", errno 11: `model.save("model.h5")` by every worker, ray-project/ray#27938), or None."""
    if not LOCKED.search("\n".join((traceback.error[1], *traceback.lines))):
        return None
    lines = {f.line for f in traceback.frames if f.file.endswith(look.view.script)}
    return next((save.path for save in look.view.saves if save.line in lines), None)


def failed_save_path(traceback: PythonTraceback, look: Look) -> str | None:
    """The path whose save failed because another task saved to it too (either way above), or None."""
    return collided_path(traceback) or _locked_save(traceback, look)


def _failed_save(task: TaskView, look: Look) -> Diagnosis | None:
    if task.signals.traceback is None or task.stop_requested:
        return None
    traceback = task.signals.traceback[1]
    path, locked = failed_save_path(traceback, look), collided_path(traceback) is None
    uncaught = any(f.function == "<module>" and f.file.endswith(look.view.script) for f in traceback.frames)
    if path is None or task.returncode in (None, 0) and not uncaught:
        return None  # (as `error`: an error once the task fails with it)
    short_type, _, frame = traceback.error
    where = f" ({frame})" if frame else ""
    others = [other for other in look.members if other is not task]
    names = " and ".join(str(other.id) for other in others) or "another task"
    how = (f"held the file open ({short_type}: unable to lock file)" if locked else
           f"deleted the temporary files {task.id} was merging ({short_type} in {MERGE_OP})")
    cause = f"{task.id}'s save to {path} failed{where}: {names} saved to the same path at the same time, and {how}"
    kept = [other for other in others if other.returncode == 0]
    holds = f"; {path} now holds {kept[0].id}'s save" if len(kept) == 1 else ""
    return Diagnosis("same_save_path", task.position, f"{cause}{holds}. {fix(path)}",
                     evidence=list(traceback.lines[-4:]), cause=cause)


def _saved_alike(look: Look) -> list[Diagnosis]:
    """Nothing failed: every worker of a cluster (servers started, no ps: each ran the script's saves) finished,
    and a file was written at a path the script saves to as a literal."""
    members = look.members
    if len(members) < 2 or any(t.task_type not in ("worker", "chief") for t in members):
        return []
    if any(t.alive or t.returncode != 0 or t.signals.server_at is None for t in members):
        return []
    save = next((save for save in look.view.saves if save.path in look.facts.written and not save.per_worker), None)
    if save is None:
        return []
    tasks = " and ".join([", ".join(str(t.id) for t in members[:-1]), str(members[-1].id)])
    return [Diagnosis(
        "same_save_path", None,
        f"{tasks} {'both' if len(members) == 2 else 'all'} saved to {save.path} ({save.where(look.view.script)}): "
        f"their files went to the same path, so {save.path} holds whichever task's writes came last; this run got through, but such "
        f"saves fail at random ({MERGE_OP} finding its temporary files gone). {fix(save.path)}",
        evidence=[save.evidence(look.view.script)])]


def shared_save_named(message: str, look: Look) -> SaveCall | None:
    """The script's save whose path (or a file in it, or one its fields made) an error's message names, where more
    than one task of the run writes that path: None for one task, or for ModelCheckpoint where a task started its
    server (the callback then gives the other workers paths of their own)."""
    if len(look.members) < 2:
        return None
    together = any(t.signals.server_at is not None for t in look.members)
    return next((save for save in look.view.saves if not (save.per_worker and together)
                 and posixpath.basename(save.path.rstrip("/")) not in ("", ".", "..")  # "./": in every path
                 and _named(save.path).search(message)), None)


def _named(path: str) -> re.Pattern:
    """A save's path as a message names it: "./ckpt/ckpt-1.keras", ".../program/ckpt/ckpt-1.keras" or
    "ckpt/ckpt-1.keras." at a sentence's end for "ckpt/ckpt-{epoch}.keras"; a checkpoint prefix's numbered files
    ("ckpt-3.index") and a folder's files too; not "my_ckpt" or "ckpt_old" for "ckpt"."""
    parts = [re.escape(part) for part in FIELD.split(path)]
    return re.compile(r"(?<![\w.-])" + r"[^\s'\"/]*?".join(parts) + r"(?:-\d+)?(?:\.[\w-]+)*(?![\w-])")


def read_while_saved(task: TaskView, save: SaveCall, look: Look) -> str:
    """What an error that names a path every task saves to may mean, and what to do."""
    said = (f"{save.path} is a path every task saves to ({save.where(look.view.script)}), so what {task.id} found "
            f"there may have been another task's file, half-written or being replaced")
    return f"{said}: once the tasks train together {PER_WORKER}" if save.per_worker else f"{said}. {fix(save.path)}"


def fix(path: str) -> str:
    """What to do, with the path the program gave: as TensorFlow's multi-worker tutorial and notebook 03 do."""
    folder, name = posixpath.split(path.rstrip("/"))
    temporary = posixpath.join(folder, "workertemp_<task index>", name)
    return (f"Every worker must save, but each to a path of its own: the chief to {path}, each other worker to a "
            f"temporary folder such as {temporary}, deleted after the save, as TensorFlow's tutorial ({TUTORIAL}) "
            f"and kwnb's notebook 03 do; else the saves collide at random, or one worker's files silently replace "
            f"the chief's")


@dataclass(frozen=True)
class SaveCall:
    """A save the script makes with one literal path, at `line`; `call` as written ("model.save")."""
    path: str
    line: int
    call: str
    per_worker: bool = False  # under MultiWorkerMirroredStrategy the call gives each worker its own path itself

    def where(self, script: str) -> str:
        """"main.py line 26, model.save": the call, as a message names it."""
        return f"{script} line {self.line}, {self.call}"

    def evidence(self, script: str) -> str:
        return f"{script} line {self.line}: {self.call}({self.path!r})"


def literal_saves(script: os.PathLike | str, text: str | None = None) -> tuple[SaveCall, ...]:
    """The script's saves to a literal path (or a module-level name bound once to one, or os.path.join of those)
    that every task makes: under no `if` (but `if __name__ == "__main__":`) or loop condition, since a branch may be
    one task's (`if is_chief:`, a chief-only save: uneven_steps' mistake) or a mode the run did not take; () for a
    script that cannot be read or parsed. Read once, when the run is made (`text`: the script's, where the caller
    read it)."""
    try:
        tree = python_source.parse(Path(script).read_text(encoding="utf-8", errors="replace") if text is None else text,
                                   str(script))
    except (OSError, SyntaxError, ValueError):
        return ()
    names = _literal_names(tree)
    found = []
    for node, guarded in _walk(tree, False):
        if isinstance(node, ast.Call) and not guarded:
            call, argument = _save_argument(node)
            path = _literal(argument, names)
            if path:
                found.append(SaveCall(_tidy(path), node.lineno, call, call.endswith("ModelCheckpoint")))
    return tuple(found)


def _tidy(path: str) -> str:
    """"ckpt/x" for "./ckpt/x", as the messages name it; a URL ("gs://bucket/ckpt") as written."""
    return path if "://" in path else posixpath.normpath(path)


def _walk(node: ast.AST, guarded: bool):
    """Every node with whether a condition encloses it (`if`, `x if c else y`, `while`, but `__name__`'s test)."""
    for child in ast.iter_child_nodes(node):
        inside = guarded or isinstance(child, (ast.If, ast.IfExp, ast.While)) and not _is_main(child.test)
        yield child, inside
        yield from _walk(child, inside)


def _is_main(test: ast.AST) -> bool:
    """`__name__ == "__main__"`: every task runs the script as its main module."""
    return "__name__" in {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}


def _save_argument(call: ast.Call) -> tuple[str, ast.AST | None]:
    """The path argument of a save call, with the call as written; (\"\", None) for any other call."""
    function = call.func
    name = ast.unparse(function)
    keywords = {k.arg: k.value for k in call.keywords}
    if name.endswith("saved_model.save"):  # tf.saved_model.save(obj, export_dir)
        return name, call.args[1] if len(call.args) > 1 else keywords.get("export_dir")
    if name.endswith("CheckpointManager"):  # tf.train.CheckpointManager(checkpoint, directory, ...)
        return name, call.args[1] if len(call.args) > 1 else keywords.get("directory")
    if name.endswith("ModelCheckpoint"):  # keras.callbacks.ModelCheckpoint(filepath, ...)
        return name, call.args[0] if call.args else keywords.get("filepath")
    if isinstance(function, ast.Attribute) and function.attr in SAVE_METHODS:
        return name, call.args[0] if call.args else keywords.get("filepath") or keywords.get("file_prefix")
    return "", None


def _literal_names(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound exactly once, to a string literal."""
    bound: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
    return {name: values[0].value for name, values in bound.items()
            if len(values) == 1 and isinstance(values[0], ast.Constant) and isinstance(values[0].value, str)}


def _literal(node: ast.AST | None, names: dict[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id, "")
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(JOINS) and node.args and not node.keywords:
        parts = [_literal(arg, names) for arg in node.args]
        return posixpath.join(*parts) if all(parts) else ""
    return ""


def written(saves: tuple[SaveCall, ...], cwd: os.PathLike | str, since: float | None) -> dict[str, float]:
    """The supervisor's step, once every task has ended: each save's path that holds a file written since the
    run started (a folder: its newest file), with that time. A stat per file of a saved model: microseconds."""
    found = {}
    for save in saves:
        times = [p.stat().st_mtime for path in _paths(Path(cwd), save.path) for p in _files(path)]
        if times and max(times) >= (since or 0.0):
            found[save.path] = max(times)
    return found


def _paths(cwd: Path, path: str) -> list[Path]:
    """The save's path, or every path its fields ("ckpt-{epoch}.keras") may have become."""
    if not FIELD.search(path):
        return [cwd / path]
    # Each field marked by a character no path holds, the rest escaped (a folder named "a[1]"), then the marks globbed
    pattern = glob.escape(str(cwd / FIELD.sub("\0", path))).replace("\0", "*")
    return [Path(p) for p in itertools.islice(glob.iglob(pattern), FILES_LOOKED_AT)]


def _files(path: Path) -> list[Path]:
    """The file, or a folder's files, or a checkpoint prefix's (`ckpt-1.index`, `ckpt-1.data-...`)."""
    try:
        if path.is_file():
            return [path]
        if path.is_dir():
            return [p for p in itertools.islice(path.rglob("*"), FILES_LOOKED_AT) if p.is_file()]
        return [p for p in path.parent.glob(path.name + ".*") if p.is_file()]
    except OSError:
        return []
