"""The GPUs this session may give its tasks, as CUDA_VISIBLE_DEVICES names them (an index or a UUID).

Looked up in the order that narrows them most: what CUDA_VISIBLE_DEVICES already allows (a
container, a scheduler or the user chose), a Slurm job's own GPUs (SLURM_JOB_GPUS, or
GPU_DEVICE_ORDINAL, which Slurm's GRES plugin sets), else every GPU `nvidia-smi -L` lists.
Which task gets which is the launch's choice (machine/task_env.py: place_gpus).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

SESSION_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL")
NVIDIA_SMI_SECONDS = 10  # it answers in well under a second; a wedged driver must not hang the launch
LISTED_GPU = re.compile(r"^GPU (\d+):", re.MULTILINE)  # "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)"


@dataclass(frozen=True)
class SessionGpus:
    ids: tuple[str, ...]
    source: str  # where they were read: a variable's name, or "nvidia-smi -L"


def visible_devices(value: str) -> tuple[str, ...]:
    """A device list as CUDA reads it: the entries before the first invalid one, so "-1", "" and
    Slurm's "NoDevFiles" mean none."""
    ids = []
    for entry in (part.strip() for part in value.split(",")):
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        ids.append(entry)
    return tuple(ids)


def listed_gpus(command: str = "nvidia-smi") -> tuple[str, ...]:
    """The indices `nvidia-smi -L` lists; none if it is missing or fails (no driver, no GPU)."""
    path = shutil.which(command)
    if path is None:
        return ()
    try:
        listed = subprocess.run([path, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_SECONDS, check=True)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(LISTED_GPU.findall(listed.stdout))


def session_gpus(environ: Mapping[str, str] = os.environ) -> SessionGpus:
    for name in SESSION_VARIABLES:
        if name in environ:
            return SessionGpus(visible_devices(environ[name]), name)
    return SessionGpus(listed_gpus(), "nvidia-smi -L")
