"""Will `--framework jax` work here: `kwnb doctor`'s line for Keras 3 on JAX, from the probe run with the tasks'
Python and a JAX task's environment (task/jax_probe.py: versions, and a real 2-process all-reduce on the CPU)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ..task import jax_probe
from .task_env import CLUSTER_VARIABLES, JAX, TaskFacts, task_environment

PROBE = str(Path(jax_probe.__file__))
PROBE_SECONDS = jax_probe.ALL_REDUCE_SECONDS + 60
INSTALL = "pip install 'kwnb[jax]' (jax and keras 3) into the tasks' Python"


def jax_check(executable: str, environ: dict) -> tuple[bool, str, str]:
    """(ok, what was found, the fix); not installed is ok: --framework jax is optional."""
    env = task_environment(TaskFacts(framework=JAX), session=environ)
    for name in CLUSTER_VARIABLES:
        env.pop(name, None)
    try:
        done = subprocess.run([executable, PROBE], capture_output=True, text=True, env=env, timeout=PROBE_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"could not be checked: {type(error).__name__}: {error}", INSTALL
    line = next((line for line in reversed(done.stdout.splitlines()) if line.startswith(jax_probe.MARK)), None)
    if line is None:
        return False, f"could not be checked: exit code {done.returncode}", INSTALL
    found = json.loads(line[len(jax_probe.MARK):])
    versions = found["versions"]
    if "jax" not in versions or "keras" not in versions:
        return True, f"--framework jax not available here: {INSTALL}", ""
    named = ", ".join(f"{name} {version}" for name, version in versions.items())
    if found["problems"]:
        return False, f"{named}: {'; '.join(found['problems'])}", INSTALL.replace("pip install", "pip install -U")
    return True, f"{named} work together; 2 processes all-reduced on the CPU (gloo): --framework jax works here", ""
