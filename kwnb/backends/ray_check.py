"""`kwnb doctor --backend ray`: the Ray cluster checked before class, in a child Python (which joins the
cluster and leaves it, so the doctor's own process never does): Ray installed here, a cluster at the address,
the same Ray version there, its nodes and what is free, and kwnb importable where the tasks will run.
Returns (topic, ok, text, fix) rows; kwnb/doctor.py shows them as its checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ..errors import LaunchError
from .catalog import RAY_INSTALL
from . import ray_words

PROBE_SECONDS = 90.0  # joining a loaded cluster and a task on each node
PROBE = r"""
import json, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
try:
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
except Exception as error:
    print(json.dumps({"error": type(error).__name__, "message": str(error)})); sys.exit(0)
nodes = [n for n in ray.nodes() if n["Alive"]]

@ray.remote(num_cpus=0)
def where():
    import kwnb.task.ray_host, ray
    return ray.util.get_node_ip_address()

reached, missing = [], []
for node in nodes:
    strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
    try:
        reached.append(ray.get(where.options(scheduling_strategy=strategy).remote(), timeout=60))
    except Exception as error:
        missing.append(node["NodeManagerAddress"] + ": " + str(error).strip().splitlines()[-1])
print(json.dumps({"version": ray.__version__, "address": ray.get_runtime_context().gcs_address,
                  "nodes": [[n["NodeManagerAddress"], n["Resources"]] for n in nodes],
                  "free": ray.available_resources(), "reached": reached, "missing": missing}))
"""


def ray_rows(address: str | None = None) -> list[tuple[str, bool, str, str, bool]]:
    """(topic, ok, text, fix, blocking) rows, in the order shown."""
    try:
        import ray
    except ImportError:
        return [("ray", False, "Ray is not installed here", RAY_INSTALL, True)]
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    rows = [("ray", True, f"Ray {ray.__version__} here", "", False)]
    if address != "auto" and not address.startswith("ray://"):
        from .ray import reachable
        try:
            reachable(address)
        except LaunchError as error:
            words = str(error)
            return rows + [("ray cluster", False, words.split("; ", 1)[0], words.split("; ", 1)[-1], True)]
    try:
        result = subprocess.run([sys.executable, "-c", PROBE, address], capture_output=True, text=True,
                                timeout=PROBE_SECONDS)
        found = json.loads(result.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return rows + [("ray cluster", False, f"no answer from the Ray cluster at {address} within "
                        f"{PROBE_SECONDS:g} s", "check `ray status` on the head", True)]
    except (ValueError, IndexError):
        return rows + [("ray cluster", False, f"the Ray probe failed: {result.stderr.strip()[-300:]}", "", True)]
    if "error" in found:
        error = (ConnectionError if found["error"] == "ConnectionError" else RuntimeError)(found["message"])
        words = ray_words.no_cluster(address, error) if isinstance(error, ConnectionError) else \
            ray_words.init_failed(address, error)
        return rows + [("ray cluster", False, words.split("; ", 1)[0], words.split("; ", 1)[-1], True)]
    nodes = "; ".join(f"{ip} ({ray_words.resources(resources)})" for ip, resources in found["nodes"])
    rows.append(("ray cluster", True, f"{found['address']}: {len(found['nodes'])} nodes: {nodes}; free now: "
                 f"{ray_words.resources(found['free'])}", "", False))
    if found["missing"]:
        rows.append(("ray nodes", False, f"kwnb could not run on {len(found['missing'])} node(s): "
                     + "; ".join(found["missing"]), "install kwnb (and your script's packages) on every node", True))
    else:
        rows.append(("ray nodes", True, f"kwnb runs on every node ({len(found['reached'])})", "", False))
    return rows
