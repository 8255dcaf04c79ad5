"""Worker for tests/test_run.py: plain Python (no TensorFlow) that sleeps, fails or spawns children on demand.

    --sleep S            sleep S seconds, then exit 0 (default 60)
    --fail-index I       the task with index I exits with --code instead of sleeping
    --fail-once MARKER   ...but only while MARKER does not exist (it creates it): fails on the first start only
    --child group|session  start a sleeping child in this process group, or in a session of its own
    --peers-started DIR  each task marks its start in DIR; the failing task fails only once every task has
                         (a test that counts every task's starts must not race a slow Python start)
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--sleep", type=float, default=60.0)
parser.add_argument("--fail-index", type=int)
parser.add_argument("--code", type=int, default=3)
parser.add_argument("--fail-once")
parser.add_argument("--child", action="append", default=[], choices=["group", "session"])
parser.add_argument("--peers-started")
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
index = tf_config["task"]["index"]
print(f"worker {index} started pid {os.getpid()}", flush=True)
if args.peers_started:
    Path(args.peers_started, f"started-{index}").touch()
children = [
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=(kind == "session"))
    for kind in args.child
]
if children:
    print(f"worker {index} children " + " ".join(str(c.pid) for c in children), flush=True)

if index == args.fail_index:
    if args.fail_once is None or not Path(args.fail_once).exists():
        if args.fail_once:
            Path(args.fail_once).write_text("failed once\n")
        while args.peers_started and len(list(Path(args.peers_started).iterdir())) < len(tf_config["cluster"]["worker"]):
            time.sleep(0.05)
        print(f"worker {index} failing with exit code {args.code}", flush=True)
        sys.exit(args.code)
    print(f"worker {index} second attempt: marker found", flush=True)

time.sleep(args.sleep)
print(f"worker {index} done", flush=True)
