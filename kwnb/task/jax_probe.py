"""`kwnb doctor`'s probe of Keras 3 on JAX (--framework jax), run by path with the tasks' Python and a JAX task's
environment (machine/jax_check.py): the versions of jax, jaxlib and keras, whether jaxlib is within what jax asks
for and keras is Keras 3 with keras.distribution.initialize(), and CPU collectives across 2 processes: a real
all-reduce over gloo (jax >= 0.5.1 by default) on a free loopback port, joined as keras.distribution.initialize()
joins (jax.distributed.initialize; not through keras, which imports TensorFlow where it is installed). One JSON line after MARK. Standard
library only: the tasks' Python may not have kwnb's dependencies.
"""
import json
import os
import re
import socket
import subprocess
import sys
from importlib import metadata

MARK = "KWNB-JAX "
DISTRIBUTIONS = ("jax", "jaxlib", "keras")
ALL_REDUCE_SECONDS = 120  # two imports of jax and keras on a loaded 2-core machine take up to ~60 s
CHILD = """
import os, sys
import jax, jax.numpy as jnp
jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2]))  # what keras.distribution.initialize() calls
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.ones(jax.local_device_count()))
print("KWNB-SUM", float(total[0]), jax.process_count(), flush=True)
"""


def _version(text: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def jaxlib_wanted() -> tuple:
    """jax's own bounds on jaxlib (its unconditional Requires-Dist), as (low, high) version tuples."""
    for requirement in metadata.requires("jax") or []:
        if requirement.startswith("jaxlib") and ";" not in requirement:
            low = re.search(r">=\s*([\d.]+)", requirement)
            high = re.search(r"<=\s*([\d.]+)", requirement)
            return (_version(low[1]) if low else (), _version(high[1]) if high else (9999,))
    return (), (9999,)


def all_reduce() -> str:
    """"" if 2 processes summed over gloo, else what went wrong."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    children = []
    for rank in range(2):
        env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}")
        children.append(subprocess.Popen([sys.executable, "-c", CHILD, f"127.0.0.1:{port}", str(rank)], env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True))
    said = []
    try:
        for child in children:
            said.append(child.communicate(timeout=ALL_REDUCE_SECONDS)[0])
    except subprocess.TimeoutExpired:
        return f"2 processes did not finish an all-reduce in {ALL_REDUCE_SECONDS} s"
    finally:
        for child in children:
            child.kill()
            child.wait()
    sums = [re.search(r"KWNB-SUM (\S+) (\d+)", text) for text in said]
    if all(found and float(found[1]) == 2.0 for found in sums):
        return ""
    last = next((text.strip().splitlines()[-1] for text in said if text.strip()), "no output")
    return f"2 processes could not all-reduce on the CPU: {last[:300]}"


def probe() -> dict:
    found = {"versions": {}, "problems": []}
    for dist in DISTRIBUTIONS:
        try:
            found["versions"][dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    versions, problems = found["versions"], found["problems"]
    if "jax" not in versions or "keras" not in versions:
        return found
    low, high = jaxlib_wanted()
    jaxlib = _version(versions.get("jaxlib", "0"))
    if not low <= jaxlib <= high:
        problems.append(f"jaxlib {versions.get('jaxlib', 'missing')} is not what jax {versions['jax']} asks for")
    if _version(versions["keras"]) < (3,):
        problems.append(f"keras {versions['keras']} is Keras 2: its distribution API needs Keras 3")
    if _version(versions["jax"]) < (0, 5, 1):
        problems.append(f"jax {versions['jax']} has no CPU collectives by default (they came in jax 0.5.1)")
    if not problems:
        problems += [problem for problem in [all_reduce()] if problem]
    return found


if __name__ == "__main__":
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # run by path: kwnb/task/'s modules are not the ones jax imports
    print(MARK + json.dumps(probe()))
