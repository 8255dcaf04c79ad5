"""The training job's stand-in for `--smoke` runs: train.py's markers and tf-keras progress lines, each
task's TF_CONFIG port listening as TensorFlow's server does, the tasks waiting for each other as a
collective does, and no TensorFlow.

A smoke run checks that the benchmarks' code works, not what TensorFlow costs: with train.py, its ~25
starts of TensorFlow workers (2 to 4 s of CPU each on 2 cores) were most of its 4-5 minutes.
tests/test_benchmarks_smoke.py runs train.py itself once.
argv: as train.py's, [--steps S] [--mark-a A] [--mark-b B] [--verbose V], parsed as train.py does:
one file that imports nothing of its own, as train.py, since the tutorial method copies it alone and
ipyparallel's engines run its source.
"""
import time

print(f"BENCH start {time.time():.6f}", flush=True)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402

print(f"BENCH imported {time.time():.6f}", flush=True)
STEP_SECONDS = 0.01  # train.py's model steps at about 85 a second here
WAIT_SECONDS = 120.0  # for the other tasks: the tutorial method starts its last one seconds later
# A TensorFlow task's port stays open a second or more (its server, the strategy's set-up, the steps, the
# shutdown); a single task of 3 steps would close it within 0.1 s, before a loaded machine's probe looked.
# So the port stays open until the benchmark's probe has seen it (it says PROBED; kwnb's own probe says
# nothing, and may come first), or PORT_SECONDS: with the benchmark's probe watching (section 1's methods,
# section 4, section 6's bare runs: 11 of the smoke run's ~24 runs of this job) a run ends ~0.1 s after its
# last step instead of 1 s after its port opened. Runs nobody probes wait it out, as before.
PORT_SECONDS = 1.0
PROBED = b"probed"  # benchmarks/common.py's PROBE_HELLO


def listen(port: int) -> socket.socket:
    """The task's own port, on every address as TensorFlow's gRPC server binds it ([::], else 0.0.0.0)."""
    try:
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    except (OSError, ValueError):
        return socket.create_server(("", port))


def hear(server: socket.socket, heard: set, probed: threading.Event) -> None:
    """Record each task that says its index, and that the benchmark's port probe has looked (it says PROBED)."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(1.0)
            try:
                data = conn.recv(16)
            except OSError:
                continue
            if data.strip().isdigit():
                heard.add(int(data))
            elif data.strip() == PROBED:
                probed.set()


def greet(address: str, me: int, deadline: float) -> None:
    host, _, port = address.rpartition(":")
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0) as conn:
                conn.sendall(str(me).encode())
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no task at {address} in {WAIT_SECONDS:.0f} s") from None
            time.sleep(0.02)


def progress(step: int, steps: int, loss: float, end: str = "") -> str:
    bar = "=" * (30 * step // steps - 1) + (">" if step < steps else "=") if step else ""
    timing = "ETA: 0s" if step < steps else f"0s {1000 * STEP_SECONDS:.0f}ms/step"
    return f"\r{step}/{steps} [{bar:.<30}] - {timing} - loss: {loss:.4f} - accuracy: {1 - loss / 2:.4f}{end}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--mark-a", type=int, default=10)
    parser.add_argument("--mark-b", type=int, default=60)
    parser.add_argument("--verbose", type=int, default=1)
    options = parser.parse_args()
    marks = {1, options.mark_a, options.mark_b}
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    addresses = config.get("cluster", {}).get("worker", [])
    me = config.get("task", {}).get("index", 0)
    deadline = time.monotonic() + WAIT_SECONDS
    heard: set = set()
    probed = threading.Event()
    server = listen(int(addresses[me].rpartition(":")[2])) if addresses else None
    opened = time.monotonic()
    if server:
        threading.Thread(target=hear, args=(server, heard, probed), daemon=True).start()
    for index, address in enumerate(addresses):
        if index != me:
            greet(address, me, deadline)
    print("Epoch 1/1", flush=True)
    for step in range(1, options.steps + 1):
        time.sleep(STEP_SECONDS)
        last = step == options.steps
        if options.verbose == 1 or last:
            print(progress(step, options.steps, 1.0 / step, "\n" if last else ""), end="", flush=True)
        if step in marks:
            print(f"\nBENCH step {step} {time.time():.6f}", flush=True)
    while server and len(heard) < len(addresses) - 1 and time.monotonic() < deadline:
        time.sleep(0.02)  # every other task has heard from this one before its port closes
    if server:
        probed.wait(max(0.0, opened + PORT_SECONDS - time.monotonic()))
        server.shutdown(socket.SHUT_RDWR)  # wakes the thread in accept(), which close() alone does not
        server.close()
    print(f"BENCH done {time.time():.6f}", flush=True)


main()
