"""One line for a `--framework jax` run of several processes on the CPU whose processes would each have more than
one CPU device: `XLA_FLAGS=--xla_force_host_platform_device_count=N` or `JAX_NUM_CPU_DEVICES=N` in the environment
the tasks get (the session's, which they inherit, under the user's --env), or set by the script itself (the flag
in a string, `jax.config.update("jax_num_cpu_devices", N)`). The script is read with `ast`, never run.

Told at launch, as a note, not refused: it fails only now and then. Measured on the 2-core VM (jax 0.10.2, Keras
3.15.1, 2 processes started by hand with the KERAS_DISTRIBUTION_* variables, 2 CPU devices each): notebook 07's
Conv2D fit hung in 5 runs of 8 (at a step of epoch 1 or 2; no line and no error for 45 to 130 s until killed,
each process blocked in the compiled step's execution), and finished in all of 3 runs with one device a process;
a Dense fit on NumPy arrays (5 runs), one on a tf.data.Dataset and a jit-compiled sum over a global array (1 each)
finished with 2 devices each. Under kwnb (--env XLA_FLAGS=...), 1 of 2 runs of that fit hung at epoch 2: `stalled`
told it after 60 s, without the cause. openxla/xla#16430 (open) reports a segfault with CPU collectives (MPI) and
device_count=2; no JAX issue found says more for Gloo.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Mapping

from ... import python_source

FLAG = "xla_force_host_platform_device_count"
NUM_CPU_DEVICES = "JAX_NUM_CPU_DEVICES"  # jax_num_cpu_devices from the environment: a number >= 0 wins over FLAG
_FLAG_VALUE = re.compile(rf"--{FLAG}=(\d+)")
_ONE_EACH = f"--env {NUM_CPU_DEVICES}=1"  # one device a process, whatever XLA_FLAGS says


def _flag_count(text: str) -> int | None:
    found = _FLAG_VALUE.findall(text)
    return int(found[-1]) if found else None  # XLA takes the last of a flag given twice


def env_devices(env: Mapping[str, str]) -> tuple[int, str] | None:
    """The CPU devices per process `env` asks for, and the variable that says so; None: JAX's default, one."""
    number = env.get(NUM_CPU_DEVICES, "").strip()
    if number.isdigit():
        return int(number), NUM_CPU_DEVICES
    count = _flag_count(env.get("XLA_FLAGS", ""))
    return None if count is None else (count, "XLA_FLAGS")


def script_devices(tree: ast.AST) -> tuple[int, str] | None:
    """The CPU devices per process the script sets itself, and how it says so: the flag in a string
    (`os.environ["XLA_FLAGS"] = ...`), or `jax.config.update("jax_num_cpu_devices", N)`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (count := _flag_count(node.value)):
            return count, f"--{FLAG}={count}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and len(node.args) == 2 and all(isinstance(arg, ast.Constant) for arg in node.args) \
                and node.args[0].value == "jax_num_cpu_devices" and isinstance(node.args[1].value, int):
            return node.args[1].value, f'jax.config.update("jax_num_cpu_devices", {node.args[1].value})'
    return None


def _asked(script: Path, env: Mapping[str, str], user: Mapping[str, str]) -> tuple[int, str, str] | None:
    """The CPU devices per process the run asks for, where it says so, and the fix; by JAX's order: the script's
    jax.config.update, then JAX_NUM_CPU_DEVICES, then the last XLA_FLAGS (the script's own over the environment's)."""
    in_script, in_env = script_devices(python_source.parse_file(script) or ast.Module(body=[], type_ignores=[])), env_devices(env)
    if in_script is not None and (in_script[1].startswith("jax.config") or in_env is None
                                  or in_env[1] != NUM_CPU_DEVICES):
        fix = "remove it" if in_script[1].startswith("jax.config") else f"remove it or add {_ONE_EACH}"
        return in_script[0], f"{script.name} sets {in_script[1]}", fix
    if in_env is not None:
        name = in_env[1]
        said = f"--env gives {name}" if name in user else f"the tasks inherit this session's {name}"
        return in_env[0], f"{said}={env[name].strip()}", f"add {_ONE_EACH}"
    return None


def cpu_devices_hint(script: Path, framework: str, tasks: int, env: Mapping[str, str],
                     user: Mapping[str, str]) -> str:
    """The hint, or "" (not JAX, one process, not on the CPU, one device a process). `env`: a task's environment
    as kwnb builds it (the session's, kwnb's variables, the user's --env); `user`: the --env alone."""
    if framework != "jax" or tasks < 2 or "cpu" not in env.get("JAX_PLATFORMS", "").split(","):
        return ""
    asked = _asked(script, env, user)
    if asked is None or asked[0] < 2:
        return ""
    devices, said, fix = asked
    return (f"{said}: {devices} CPU devices in each of the {tasks} JAX processes, and with several devices a "
            f"process JAX's CPU collectives across processes (Gloo) may hang a training step for good, with no "
            f"error (a Conv2D fit hung in 5 runs of 8 with jax 0.10.2; openxla/xla#16430); {fix} for one device "
            f"a process")
