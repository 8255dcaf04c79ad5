"""Capture real TensorFlow multi-worker logs for tests/data/tf-2.21/ (see its README.md).

Runs each scenario on localhost with 2 workers started by subprocess.Popen, each with its own TF_CONFIG
(free ports from portpicker), CUDA_VISIBLE_DEVICES=-1 and stdout+stderr going to one file per worker,
as kwnb starts them. The worker scripts below are written to --workdir (default /tmp/kwnb-tf-capture, so
the paths in the captured tracebacks are stable). Timings are measured by tailing the logs every 10 ms and
printed as one JSON object at the end.

    .venv/bin/python tests/scripts/capture_tf_logs.py [--out tests/data/tf-2.21] [--only clean,waiting,...]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import portpicker

TRAIN = '''\
"""A tiny MultiWorkerMirroredStrategy fit with tf.keras; flags choose how it goes wrong."""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--batch-sleep", type=float, default=0.0)
parser.add_argument("--raise-on", type=int, default=-1, help="this task index raises ValueError at batch 2")
parser.add_argument("--linger", type=float, default=0.0, help="the chief's seconds of work after fit (saving, say)")
args = parser.parse_args()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker {index}: starting", flush=True)


def check_batch(batch):
    if index == args.raise_on and batch == 2:
        raise ValueError(f"bad batch {batch} on worker {index}")


class Check(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        print(f"worker {index}: training", flush=True)

    def on_train_batch_end(self, batch, logs=None):
        check_batch(batch)
        time.sleep(args.batch_sleep)


strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps, verbose=1, callbacks=[Check()])
if index == 0 and args.linger:
    print(f"worker {index}: fit done, saving for {args.linger:g} s", flush=True)
    time.sleep(args.linger)
print(f"worker {index}: done", flush=True)
'''

KERAS3 = '''\
"""The same fit written with Keras 3 (`import keras`), which MultiWorkerMirroredStrategy cannot run."""
import json
import os

import keras
import numpy as np
import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker {index}: keras {keras.__version__}", flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(ds, epochs=2, steps_per_epoch=5, verbose=1)
print(f"worker {index}: done", flush=True)
'''

OWN_TF_CONFIG = '''\
"""The tutorial's way: the script sets its own TF_CONFIG with fixed ports (and index 0 on every task)."""
import json
import os

import numpy as np
import tensorflow as tf

tf_config = {
    'cluster': {
        'worker': ['localhost:12345', 'localhost:23456']
    },
    'task': {'type': 'worker', 'index': 0}
}
os.environ['TF_CONFIG'] = json.dumps(tf_config)
print("TF_CONFIG set by the script", flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(ds, epochs=2, steps_per_epoch=5, verbose=1)
print("done", flush=True)
'''

LOOP = '''\
"""A custom training loop under MultiWorkerMirroredStrategy; flags make the tasks differ."""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", default="40,40", help="steps of worker 0,worker 1")
parser.add_argument("--examples", type=int, default=0, help="no repeat(): this many examples in all")
parser.add_argument("--chief-reduce-at", type=int, default=-1, help="the chief alone reduces a tensor at this step")
parser.add_argument("--sleep", type=float, default=0.05)
args = parser.parse_args()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
steps = int(args.steps.split(",")[index])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds.take(args.examples).batch(16) if args.examples else ds.repeat().batch(16)
iterator = iter(strategy.experimental_distribute_dataset(ds))
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(0.1)
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


@tf.function
def train_step(batch):
    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_object(labels, model(features, training=True)), global_batch_size=32)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(step_fn, args=(batch,)), axis=None)


def chief_only_summary():
    return strategy.reduce("SUM", strategy.run(lambda: tf.ones([3])), axis=None)


for step in range(steps):
    if index == 0 and step == args.chief_reduce_at:
        print("worker 0: summary", chief_only_summary(), flush=True)
    loss = train_step(next(iterator))
    print(f"worker {index}: step {step + 1}/{steps}, loss: {float(loss):.4f}", flush=True)
    time.sleep(args.sleep)
print(f"worker {index}: done", flush=True)
'''

DATA_FIT = '''\
"""A tiny tf.keras fit with the learner's data mistakes: too little data (no repeat()), or a loss that diverges."""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--examples", type=int, default=0, help="no repeat(): this many examples in all")
parser.add_argument("--lr", type=float, default=0.001)
parser.add_argument("--scale", type=float, default=1.0, help="inputs this large (unscaled data)")
parser.add_argument("--chief-save", default="", help="after fit, the chief alone calls model.save(this path)")
args = parser.parse_args()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = (np.random.rand(256, 8) * args.scale).astype("float32")
y = (x.sum(1) > 4 * args.scale).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds.take(args.examples).batch(32) if args.examples else ds.batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile(tf.keras.optimizers.SGD(args.lr), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps, verbose=1)
if args.chief_save and index == 0:  # a learner's "only the chief saves": a collective the other task never runs
    model.save(args.chief_save)
print(f"worker {index}: done", flush=True)
'''

HOG = '''\
"""The same fit, then worker 1 holds ever more memory (a learner loading a big data set into RAM)."""
import json
import os
import time

import numpy as np
import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Hog(tf.keras.callbacks.Callback):
    held = []

    def on_train_batch_end(self, batch, logs=None):
        if index == 1:
            self.held.append(np.ones(50 * 2**20, dtype=np.uint8))  # 50 MB a step, touched
        time.sleep(0.1)


model.fit(ds, epochs=2, steps_per_epoch=40, verbose=2, callbacks=[Hog()])
print(f"worker {index}: done", flush=True)
'''

# The same loop diverging (unscaled inputs, a huge learning rate), printed as learners do: the loss tensor itself
# ("step 3 loss tf.Tensor(nan, shape=(), dtype=float32)"), no step count. Line for line as loop.py.
NAN_LOOP = LOOP.replace('x = np.random.rand(256, 8).astype("float32")', 'x = (np.random.rand(256, 8) * 1000).astype("float32")') \
    .replace("y = (x.sum(1) > 4).astype", "y = (x.sum(1) > 4000).astype").replace("SGD(0.1)", "SGD(1e30)") \
    .replace('print(f"worker {index}: step {step + 1}/{steps}, loss: {float(loss):.4f}", flush=True)',
             'print("step", step, "loss", loss, flush=True)')
# data_fit.py whose chief alone has a ModelCheckpoint callback (to --chief-save's path): a collective inside fit,
# at the chief's epoch end, that the other task never runs. Line for line as data_fit.py.
CHIEF_CHECKPOINT_FIT = DATA_FIT.replace(
    "model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps, verbose=1)",
    "model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps, verbose=1, callbacks=[tf.keras.callbacks."
    "ModelCheckpoint(args.chief_save)] if index == 0 else [])")
SCRIPTS = {"train.py": TRAIN, "keras3.py": KERAS3, "own_tf_config.py": OWN_TF_CONFIG, "loop.py": LOOP,
           "data_fit.py": DATA_FIT, "hog.py": HOG, "nan_loop.py": NAN_LOOP,
           "chief_checkpoint_fit.py": CHIEF_CHECKPOINT_FIT}
OOM_GROUP = Path("/sys/fs/cgroup/memory/kwnb-capture-oom")  # cgroup v1, as root; 2 is v2's memory.max
OOM_LIMIT = 600 * 2**20
POLL = 0.01  # seconds between log reads: enough to time the ~30 ms UnavailableError of the issue


class Cluster:
    """Two (or fewer) worker processes of one scenario, and what was seen in their logs and when."""

    def __init__(self, name: str, out: Path, workdir: Path, ports: list[int]):
        self.name, self.out, self.workdir, self.ports = name, out, workdir, ports
        self.addresses = [f"localhost:{p}" for p in ports]
        self.procs: dict[int, subprocess.Popen] = {}
        self.texts: dict[int, str] = {}
        self.offsets: dict[int, int] = {}
        self.seen: dict[tuple[int, str], float] = {}
        self.exits: dict[int, tuple[int, float]] = {}
        self.t0 = time.time()

    def log(self, index: int) -> Path:
        return self.out / f"{self.name}-worker-{index}.log"

    def tf_config(self, index: int) -> dict:
        return {"cluster": {"worker": self.addresses}, "task": {"type": "worker", "index": index}}

    def start(self, index: int, script: str, args=(), legacy_keras=True, cgroup: Path | None = None) -> None:
        env = dict(os.environ, TF_CONFIG=json.dumps(self.tf_config(index)), CUDA_VISIBLE_DEVICES="-1", PYTHONUNBUFFERED="1")
        env.pop("TF_USE_LEGACY_KERAS", None)
        if legacy_keras:
            env["TF_USE_LEGACY_KERAS"] = "1"
        with open(self.log(index), "wb") as log:  # the child keeps its own descriptor
            command = [sys.executable, str(self.workdir / script), *args]
            if cgroup is not None:  # the shell joins the group, then becomes the worker
                command = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *command]
            self.procs[index] = subprocess.Popen(
                command, cwd=self.workdir, env=env,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.texts[index], self.offsets[index] = "", 0

    def poll(self, marks=()) -> None:
        """Read what the logs gained, note the first time each (index, substring) mark shows, and exits."""
        now = time.time()
        for index, proc in self.procs.items():
            with open(self.log(index), "rb") as f:
                f.seek(self.offsets[index])
                data = f.read()
            self.offsets[index] += len(data)
            self.texts[index] += data.decode("utf-8", "replace")
            for mark in marks:
                if mark[0] == index and mark not in self.seen and mark[1] in self.texts[index]:
                    self.seen[mark] = now
            if index not in self.exits and proc.poll() is not None:
                self.exits[index] = (proc.returncode, now)

    def wait(self, done, timeout: float, marks=()) -> bool:
        """Poll until done(self) is true (True) or timeout seconds pass (False)."""
        end = time.time() + timeout
        while time.time() < end:
            self.poll(marks)
            if done(self):
                return True
            time.sleep(POLL)
        return False

    def signal(self, index: int, sig: int) -> float:
        self.procs[index].send_signal(sig)
        return time.time()

    def kill_all(self) -> None:
        """SIGKILL every process group still there (TF catches SIGTERM), then reap."""
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            proc.wait()

    def exit_report(self, since: float) -> dict:
        return {f"worker {i}": {"exit": code, "after_s": round(t - since, 3)}
                for i, (code, t) in sorted(self.exits.items())}


def after(t0: float, t) -> float | None:
    return None if t is None else round(t - t0, 3)


def all_exited(cluster: Cluster) -> bool:
    return len(cluster.exits) == len(cluster.procs)


def clean(c: Cluster) -> dict:
    c.start(0, "train.py"), c.start(1, "train.py")
    ok = c.wait(all_exited, 120)
    return {"finished": ok, **c.exit_report(c.t0)}


def clean_chief_last(c: Cluster) -> dict:
    """Worker 1 ends first; the chief goes on for 15 s, past the 10 s heartbeat timeout."""
    c.start(0, "train.py", ["--linger", "15"]), c.start(1, "train.py")
    mark = (0, "stopped sending heartbeats")
    ok = c.wait(all_exited, 120, [mark])
    t1 = c.exits.get(1, (None, c.t0))[1]
    return {"finished": ok, "unhealthy line after worker 1's exit_s": after(t1, c.seen.get(mark)),
            **c.exit_report(c.t0)}


def waiting(c: Cluster, index: int = 0) -> dict:
    """Only one worker starts; it waits 25 s (the registration timeout is an hour) and is killed."""
    c.start(index, "train.py")
    marks = [(index, "Started server"), (index, "Waiting for 1/2 tasks to connect.")]
    c.wait(lambda c: False, 25, marks)
    return {"from start": {m[1]: after(c.t0, t) for m, t in c.seen.items()}, **c.exit_report(c.t0)}


def _started_training(c: Cluster) -> bool:
    return all(f"worker {i}: training" in c.texts[i] for i in c.procs)


def peer_killed(c: Cluster, victim: int = 1) -> dict:
    """SIGKILL one worker a second into fit; the survivor's reaction is timed."""
    args = ["--epochs", "2", "--steps", "100", "--batch-sleep", "0.1"]
    c.start(0, "train.py", args), c.start(1, "train.py", args)
    c.wait(_started_training, 120)
    time.sleep(1.0)
    t_kill = c.signal(victim, signal.SIGKILL)
    other = 1 - victim
    marks = [(other, s) for s in ("UnavailableError", "Connection reset by peer", "Socket closed",
                                   "Connection refused", "unhealthy", "Traceback")]
    c.wait(lambda c: other in c.exits, 40, marks)
    c.poll(marks)
    return {f"from SIGKILL of worker {victim}": {m[1]: after(t_kill, t) for m, t in c.seen.items()},
            f"worker {other} exited by itself": other in c.exits, **c.exit_report(t_kill)}


REASONS = ("Connection reset by peer", "Socket closed", "Connection refused")


def peer_killed_until_reset(c: Cluster, tries: int = 6) -> dict:
    """peer_killed until the survivor reads "Connection reset by peer" (the issue's shape), at most `tries` times.

    Which error the survivor gets varies from run to run (reset, refused, socket closed): the report
    lists each try's, and the files keep the first try with a reset, else the last try.
    """
    reports = []
    for attempt in range(tries):
        ports = [portpicker.pick_unused_port() for _ in range(2)]
        cluster = c if attempt == 0 else Cluster(c.name, c.out, c.workdir, ports)
        try:
            report = peer_killed(cluster)
        finally:
            cluster.kill_all()
        report["reasons"] = [r for r in REASONS if r in cluster.texts[0]]
        reports.append(report)
        if "Connection reset by peer" in report["reasons"]:
            break
    return {"tries": reports}


def peer_raises(c: Cluster) -> dict:
    args = ["--epochs", "2", "--steps", "20", "--raise-on", "1"]
    c.start(0, "train.py", args), c.start(1, "train.py", args)
    marks = [(1, "ValueError: bad batch"), (0, "Socket closed"), (0, "UnavailableError"), (0, "unhealthy")]
    c.wait(lambda c: 1 in c.exits, 120, marks)
    t1 = c.exits.get(1, (None, time.time()))[1]
    c.wait(all_exited, 60, marks)
    return {"from worker 1's exit": {f"worker {m[0]}: {m[1]}": after(t1, t) for m, t in c.seen.items()},
            **c.exit_report(t1)}


def peer_stopped(c: Cluster) -> dict:
    args = ["--epochs", "2", "--steps", "100", "--batch-sleep", "0.1"]
    c.start(0, "train.py", args), c.start(1, "train.py", args)
    c.wait(_started_training, 120)
    time.sleep(1.0)
    t_stop = c.signal(1, signal.SIGSTOP)
    marks = [(0, "stopped sending heartbeats"), (0, "UnavailableError"), (0, "Traceback")]
    c.wait(lambda c: False, 20, marks)
    return {"from SIGSTOP of worker 1": {m[1]: after(t_stop, t) for m, t in c.seen.items()},
            **c.exit_report(t_stop)}


def keras3(c: Cluster, legacy: bool) -> dict:
    c.start(0, "keras3.py", legacy_keras=legacy), c.start(1, "keras3.py", legacy_keras=legacy)
    c.wait(all_exited, 120)
    return {"TF_USE_LEGACY_KERAS": "1" if legacy else "unset", **c.exit_report(c.t0)}


def own_tf_config(c: Cluster) -> dict:
    """Worker 0 starts first and gets localhost:12345; worker 1, told the same, finds it taken (or not)."""
    free = bool(portpicker.is_port_free(12345))
    c.start(0, "own_tf_config.py")
    marks = [(0, "Waiting for 1/2"), (1, "Could not start gRPC server"), (1, "Waiting for 1/2")]
    c.wait(lambda c: (0, "Waiting for 1/2") in c.seen or 0 in c.exits, 60, marks)
    t1 = time.time()
    c.start(1, "own_tf_config.py")
    c.wait(lambda c: 1 in c.exits, 30, marks)
    c.wait(lambda c: False, 3, marks)
    return {"12345 free before": free,
            "from worker 1's start": {f"worker {m[0]}: {m[1]}": after(t1, t) for m, t in c.seen.items()},
            **c.exit_report(t1)}


def port_taken(c: Cluster) -> dict:
    """Another socket listens on worker 0's port before the workers start."""
    blocker = socket.socket()
    blocker.bind(("localhost", c.ports[0]))  # no SO_REUSEPORT: gRPC's own reuse-port cannot share it
    blocker.listen()
    try:
        c.start(0, "train.py"), c.start(1, "train.py")
        marks = [(0, "Could not start gRPC server"), (1, "Waiting for 1/2")]
        c.wait(lambda c: 0 in c.exits, 60, marks)
        c.wait(lambda c: False, 3, marks)
    finally:
        blocker.close()
    return {"from start": {f"worker {m[0]}: {m[1]}": after(c.t0, t) for m, t in c.seen.items()},
            **c.exit_report(c.t0)}


def loop_scenario(args: list, marks=(), script="loop.py") -> callable:
    def scenario(c: Cluster) -> dict:
        c.start(0, script, args), c.start(1, script, args)
        seen = [(i, m) for i in range(2) for m in marks]
        ok = c.wait(all_exited, 120, seen)
        t1 = min(t for _, t in c.exits.values()) if c.exits else c.t0
        return {"finished": ok, "args": args, "from the first exit": {f"worker {m[0]}: {m[1]}": after(t1, t)
                                                                      for m, t in c.seen.items()},
                **c.exit_report(c.t0)}
    return scenario


def data_fit(args: list, marks=(), script="data_fit.py") -> callable:
    def scenario(c: Cluster) -> dict:
        c.start(0, script, args), c.start(1, script, args)
        ok = c.wait(all_exited, 120, [(i, m) for i in range(2) for m in marks])
        return {"finished": ok, "args": args, "from start": {f"worker {m[0]}: {m[1]}": after(c.t0, t)
                                                             for m, t in c.seen.items()}, **c.exit_report(c.t0)}
    return scenario


def oom_counter() -> int | None:
    for line in (OOM_GROUP / "memory.oom_control").read_text().splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return None


def out_of_memory(c: Cluster) -> dict:
    """Worker 1 runs in a memory cgroup of OOM_LIMIT bytes and grows by 50 MB a step until the OOM killer ends it."""
    try:
        OOM_GROUP.mkdir(exist_ok=True)
        (OOM_GROUP / "memory.limit_in_bytes").write_text(str(OOM_LIMIT))
    except OSError as error:
        return {"skipped": f"cannot make a memory cgroup v1 at {OOM_GROUP}: {error}"}
    try:
        before = oom_counter()
        c.start(0, "hog.py"), c.start(1, "hog.py", cgroup=OOM_GROUP)
        c.wait(lambda c: 1 in c.exits, 120)
        t1 = c.exits.get(1, (None, time.time()))[1]
        c.wait(all_exited, 30)
        kernel = subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()
        pid = c.procs[1].pid
        return {"limit": OOM_LIMIT, "oom_kill before": before, "oom_kill after": oom_counter(),
                "kernel log": [line for line in kernel if f"pid={pid}," in line or f"process {pid} " in line],
                **c.exit_report(t1)}
    finally:
        c.kill_all()
        OOM_GROUP.rmdir()


SCENARIOS = {
    "clean": clean, "clean-chief-last": clean_chief_last,
    "waiting": waiting, "waiting-for-chief": lambda c: waiting(c, index=1),
    "peer-killed": peer_killed_until_reset, "chief-killed": lambda c: peer_killed(c, victim=0),
    "peer-raises": peer_raises, "peer-stopped": peer_stopped,
    "keras3": lambda c: keras3(c, legacy=False), "keras3-legacy-env": lambda c: keras3(c, legacy=True),
    "own-tf-config": own_tf_config, "port-taken": port_taken,
    "uneven-steps": loop_scenario(["--steps", "60,25"], ["unhealthy", "UnavailableError", "Socket closed"]),
    "shape-mismatch": loop_scenario(["--steps", "20,20", "--chief-reduce-at", "5"], ["Shape mismatch"]),
    "input-exhausted-loop": loop_scenario(["--steps", "20,20", "--examples", "160"], ["End of sequence"]),
    "input-exhausted-fit": data_fit(["--examples", "128"], ["Your input ran out of data"]),
    "nan-loss": data_fit(["--lr", "1e30", "--scale", "1000", "--epochs", "3"], ["loss: nan"]),
    "nan-loss-loop": loop_scenario(["--steps", "20,20"], ["nan"], script="nan_loop.py"),
    "chief-only-checkpoint": data_fit(["--chief-save", "/tmp/kwnb-tf-capture/ckpt.keras", "--epochs", "3"],
                                      ["mismatch", "Collective instance"], script="chief_checkpoint_fit.py"),
    "chief-only-save": data_fit(["--chief-save", "/tmp/kwnb-tf-capture/saved"], ["unhealthy", "UnavailableError"]),
    "out-of-memory": out_of_memory,
}


def run(name: str, out: Path, workdir: Path) -> dict:
    ports = [portpicker.pick_unused_port() for _ in range(2)]
    cluster = Cluster(name, out, workdir, ports)
    try:
        return SCENARIOS[name](cluster)
    finally:
        cluster.kill_all()
        for index in range(2):  # a scenario that starts one worker leaves no file for the other
            if index not in cluster.procs:
                cluster.log(index).unlink(missing_ok=True)


def versions() -> dict:
    code = ("import sys, tensorflow as tf, tf_keras, keras, numpy; print(sys.version.split()[0], "
            "tf.__version__, tf_keras.__version__, keras.__version__, numpy.__version__)")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    keys = ["python", "tensorflow", "tf_keras", "keras", "numpy"]
    return dict(zip(keys, out.stdout.split()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "data" / "tf-2.21")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kwnb-tf-capture"))
    parser.add_argument("--only", default=",".join(SCENARIOS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    for name, text in SCRIPTS.items():
        (args.workdir / name).write_text(text)
    report = {"versions": versions()}
    for name in args.only.split(","):
        print(f"capturing {name}", file=sys.stderr, flush=True)
        report[name] = run(name, args.out, args.workdir)
        print(json.dumps(report[name]), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
