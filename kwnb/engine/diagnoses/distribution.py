"""`not_distributed`: a run whose tasks trained, but not together. Three ways it shows, the surest first:

- the script deleted TF_CONFIG (`del os.environ[...]`, pop, clear, os.unsetenv: the task-side audit hook in
  kwnb/task/bootstrap.py records the file and line) before the task joined: each task trains alone;
- no task ever joined a cluster (TensorFlow never logged a coordination-service join) while epochs advanced;
- the tasks joined, but their epoch metrics differ where synchronous training makes them equal: under
  MultiWorkerMirroredStrategy gradients and metrics are all-reduced, so every worker prints the same epoch
  loss; different losses mean the model was built outside `strategy.scope()` (each task trains its own copy).

Said once, on one task, whether or not the run failed: a run that never distributed "finishes" normally. Where the
tasks trained alone and the script saves to one literal path (saves.py), once they have ended and a file is there,
it adds that every task saved to that one path: tasks that never formed a cluster have no chief, so each wrote the
chief's files (the Keras guide's ModelCheckpoint, in the corpus: every task wrote ckpt/ckpt-1.keras).
"""
from __future__ import annotations

import dataclasses
import math
import os

from ..tasks.view import TaskView
from .diagnosis import Diagnosis, Look
from .saves import PER_WORKER, SaveCall, fix

# Equal epoch values, as printed (4 decimals): identical on every clean 2-worker capture and test run
# (tests/data/tf-2.21/clean-*: 0.7040 and 0.7040); outside strategy.scope() they differed by 3 % (issue 29: 2.227
# against 2.158) and by more on the test runs. Two units of the last printed digit, or 0.1 %, whichever is larger.
SAME_ABSOLUTE = 2e-4
SAME_RELATIVE = 1e-3
# Keras' own metrics (and their val_ twins): under MultiWorkerMirroredStrategy each is all-reduced, so the tasks
# print the same values (tests/data/tf-2.21/clean-*: accuracy 0.4563 on both).
METRIC_WORDS = ("loss", "acc", "crossentropy", "error", "auc", "precision", "recall")
ALONE = "each task trained alone (a single-worker strategy) and nothing was distributed"
FIX_TF_CONFIG = "delete that line: kwnb gives each task its TF_CONFIG, which TensorFlow reads when the strategy is made"
FIX_SCOPE = "build and compile the model inside `with strategy.scope():`"
SHARED_SAVE = "Each task also saved to the same path,"


def not_distributed(look: Look) -> Diagnosis | None:
    said = next((d for d in look.current if d.kind == "not_distributed"), None)  # said once: keeps task and words
    if said is None:
        members = [t for t in look.tasks if t.training]
        if len(members) < 2:
            return None
        never_joined = None if look.view.framework == "jax" else _never_joined(members)  # jax_faults.py: jax_alone
        said = _deleted(members) or never_joined or _outside_scope(members)
    return _with_shared_save(said, look) if said else None


def _with_shared_save(said: Diagnosis, look: Look) -> Diagnosis:
    """The finding, and that every task saved to one path, where no task started its server (each trained alone:
    MultiWorkerMirroredStrategy's saves collide otherwise, which same_save_path tells) and the file is there."""
    save = next((save for save in look.view.saves if save.path in look.facts.written), None)
    if save is None or any(t.signals.server_at is not None for t in look.tasks) or SHARED_SAVE in said.message:
        return said
    return dataclasses.replace(said, message=f"{said.message}. {_shared_save(save, look.view.script)}",
                               evidence=[*said.evidence, save.evidence(look.view.script)])


def _shared_save(save: SaveCall, script: str) -> str:
    said = f"{SHARED_SAVE} {save.path} ({save.where(script)}), so it holds whichever task's files came last"
    if save.per_worker:
        return f"{said}; trained together {PER_WORKER}"
    return f"{said}. Once they train together: {fix(save.path)}"


def _deleted(tasks: list[TaskView]) -> Diagnosis | None:
    for task in tasks:
        record = task.signals.tf_config_set
        if not record or not record.get("deleted"):
            continue
        joined = task.signals.connected_at
        if joined is not None and joined < record.get("time", 0.0):
            continue  # deleted after the task joined: TensorFlow had already read it
        where = changed_at(record)
        return Diagnosis("not_distributed", task.position,
                         f"{task.id}'s script deletes TF_CONFIG{where}, so {ALONE}. {FIX_TF_CONFIG[0].upper()}"
                         f"{FIX_TF_CONFIG[1:]}", evidence=[f"TF_CONFIG deleted{where}"])
    return None


def changed_at(record: dict) -> str:
    """' (main.py line 35)': where the script changed TF_CONFIG, as the audit hook recorded it, or ''."""
    file, line = record.get("file"), record.get("line")
    return f" ({os.path.basename(file)} line {line})" if file and line else ""


def _never_joined(tasks: list[TaskView]) -> Diagnosis | None:
    """Epochs advanced in TensorFlow tasks and none logged a join. Not under a parameter server (its tasks
    serve, and whether its chief logs a join was not measured) nor in scripts that ran no TensorFlow
    (no runtime line: a plain Python script that prints epochs forms no cluster by design)."""
    if any(t.task_type == "ps" for t in tasks):
        return None
    # An earlier attempt's join counts: after a restart the epochs it trained are kept, its signals are new.
    if any(t.signals.connected_at is not None or t.joined_before for t in tasks):
        return None
    trained = [t for t in tasks if t.epochs and t.runtime_lines]
    if len(trained) < 2:
        return None
    first = trained[0]
    return Diagnosis("not_distributed", first.position,
                     f"no task joined a cluster although {', '.join(str(t.id) for t in trained)} trained "
                     f"({_places(trained)}): {ALONE}. Create the strategy from the TF_CONFIG kwnb gives "
                     f"(tf.distribute.MultiWorkerMirroredStrategy()), and do not change or delete TF_CONFIG in "
                     f"the script or a module it imports", evidence=[f"{t.id}: no coordination-service join"
                                                                     for t in trained])


def _places(tasks: list[TaskView]) -> str:
    return "; ".join(f"{t.id} at epoch {len(t.epochs)}" for t in tasks)


def _outside_scope(tasks: list[TaskView]) -> Diagnosis | None:
    """The first epoch where the loss, or else one of the model's metrics, differs between joined tasks."""
    joined = [t for t in tasks if t.signals.connected_at is not None and t.epochs]
    if len(joined) < 2 or any(t.alive for t in joined):
        # Judged once the tasks have ended: a second fit replaces epoch 1's row on one task a moment before the
        # other, and the two rows then differ (the corpus' save-and-load tutorial read as not distributed so)
        return None
    rows = {t.position: {row["epoch"]: row for row in t.epochs} for t in joined}
    first = joined[0]
    for epoch, row in sorted(rows[first.position].items()):
        for other in joined[1:]:
            theirs = rows[other.position].get(epoch)
            name = _differing_metric(row, theirs)
            if name:
                return Diagnosis(
                    "not_distributed", first.position,
                    f"the tasks' epoch {name} differ (epoch {epoch + 1}: {row[name]:.4g} on {first.id}, "
                    f"{theirs[name]:.4g} on {other.id}) where synchronous training makes them equal: the model was "
                    f"built outside strategy.scope(), so each task trained its own copy. {FIX_SCOPE[0].upper()}"
                    f"{FIX_SCOPE[1:]}", evidence=[f"{first.id}: {row}", f"{other.id}: {theirs}"])
    return None


def _differing_metric(row: dict, theirs: dict | None) -> str | None:
    """The loss if it differs, else the first of the model's other metrics that does. The copies trained outside
    the scope start alike and see the same data, so their losses can agree to the printed digits: the corpus'
    save-and-load tutorial, run alone, gave 0.7145 and 0.7142 (equal within 0.1 %) while its accuracies were 0.8115
    and 0.8164. Only the loss and what Keras computes and all-reduces are compared (METRIC_WORDS): a value a
    callback adds to the logs (a time, a counter) may differ between tasks that trained together."""
    if not theirs:
        return None
    names = [k for k in row if k in theirs and any(word in k for word in METRIC_WORDS)]
    for name in sorted(names, key=lambda k: k != "loss"):
        if not _same(row[name], theirs[name]):
            return name
    return None


def _same(a: float, b: float) -> bool:
    """Equal as synchronous training prints them. A NaN or infinite value proves nothing either way (NaN is not
    equal to itself: a run whose loss became NaN on both workers read as not distributed): nan_loss tells it."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return True
    return abs(a - b) <= max(SAME_ABSOLUTE, SAME_RELATIVE * max(abs(a), abs(b)))
