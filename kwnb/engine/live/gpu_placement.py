"""Which GPUs each task of a `--gpus` run sees (CUDA_VISIBLE_DEVICES), chosen among the session's
(machine/gpus.py).

TensorFlow maps nearly all the memory of every GPU it sees when it starts, so a second task on the
same GPU runs out of memory; and NCCL refuses two ranks on one GPU. With at least as many GPUs as
tasks, each task gets its own: an equal share each, since MultiWorkerMirroredStrategy wants the same
number of devices on every worker (8 GPUs, 3 tasks: 2 each, 2 left idle). With fewer, the tasks take
them in turn and share, each growing its memory as it needs it (TF_FORCE_GPU_ALLOW_GROWTH, unless
the user set it), and the run says once that all-reduce cannot use NCCL.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from ...machine.gpus import session_gpus

GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"


@dataclass(frozen=True)
class GpuPlacement:
    devices: tuple[str, ...]  # each task's CUDA_VISIBLE_DEVICES, by position
    shared: bool  # fewer GPUs than tasks: some tasks share one

    def env(self, position: int, session_env: Mapping[str, str]) -> dict[str, str]:
        """What task `position` gets on top of the session's environment."""
        env = {"CUDA_VISIBLE_DEVICES": self.devices[position]}
        if self.shared and GROWTH not in session_env:
            env[GROWTH] = "true"
        return env


def place_gpus(gpus: Sequence[str], tasks: int) -> GpuPlacement | None:
    """Each task its own GPUs (an equal share) if there are enough, else one each in turn, shared;
    None if there is no GPU to place."""
    if not gpus or tasks < 1:
        return None
    if len(gpus) >= tasks:
        share = len(gpus) // tasks
        return GpuPlacement(tuple(",".join(gpus[i * share:(i + 1) * share]) for i in range(tasks)), shared=False)
    return GpuPlacement(tuple(gpus[i % len(gpus)] for i in range(tasks)), shared=True)


def placement_note(placement: GpuPlacement | None, gpus: Sequence[str], source: str) -> str:
    """What the run says once about its GPUs: why it shares them, or that it found none."""
    if placement is None:
        return (f"--gpus: no GPU found ({source}); the tasks see whatever the machine shows them")
    if not placement.shared:
        return ""
    tasks = len(placement.devices)
    return (f"--gpus: {tasks} tasks share {len(gpus)} GPU{'s' * (len(gpus) != 1)} ({source}), with memory growth "
            f"({GROWTH}); all-reduce cannot use NCCL, which takes one GPU per task: leave the strategy's "
            "communication at AUTO (TensorFlow's ring all-reduce) or RING; NCCL would stop with 'Duplicate GPU detected'")


def plan_gpus(tasks: int, user_env: Mapping[str, str]) -> tuple[GpuPlacement | None, str]:
    """A --gpus run's placement on this machine, among the GPUs the session (or the run's own
    CUDA_VISIBLE_DEVICES) allows, and what the run says about it."""
    session = session_gpus({**os.environ, **user_env})
    placement = place_gpus(session.ids, tasks)
    return placement, placement_note(placement, session.ids, session.source)
