"""What JAX and Keras 3 on JAX say in a task's log across processes (`--framework jax`): pure functions, standard
library only. The shapes are jax 0.10's with keras 3.15 on 2 CPU processes (gloo collectives):

- `Starting JAX distributed service on ADDRESS` (process 0) and `Connecting to JAX distributed service on ADDRESS`
  (every process): jax.distributed.initialize() began; jax logs them at INFO, which kwnb's bootstrap shows in
  a JAX task's log (task/bootstrap.py), so a task is told joining from then.
- `[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1`: the CPU
  collectives formed, at the process's first JAX call after initialize(): it has joined.
- `Gloo all-reduce failed: [.../pair.cc:538] Read error [127.0.0.1]:28362: Connection reset by peer` (or
  `Gloo AllGather failed: ... Connection closed by peer`): a peer went away mid-collective; the collective raises
  (JaxRuntimeError, or ValueError from pmap), and JAX then waits ~80 s for the peer's heartbeats before it aborts.
- `DEADLINE_EXCEEDED ... RegisterTask` / `heartbeat timeout`: the coordinator gave up on a process (300 s, 100 s).
- `Failed to add port to server: No address added out of total 1 resolved for 'localhost:PORT'`, then SIGSEGV: the
  coordinator's port was taken. TensorFlow's server says the same line before its own (tf_messages.py reads that
  pair); JAX says only this one, read here as the same BindFailure, so that the run relaunches on new ports.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .tf_events import BindFailure, Event

MARKERS = ("JAX distributed service on", "[Gloo] Rank", "Gloo ", "RegisterTask", "heartbeat timeout",
           "Failed to add port to server")

_JOINING = re.compile(r"(Starting|Connecting to) JAX distributed service on (\S+)")
_GLOO = re.compile(r"\[Gloo\] Rank (\d+) is connected to (\d+) peer ranks")
_ADD_PORT = re.compile(r"Failed to add port to server.*resolved for '([^']+)'")
_GLOO_FAILED = re.compile(r"Gloo ([\w-]+) failed: ")  # "Gloo all-reduce failed: ", "Gloo AllGather failed: "
_GLOO_REASONS = ("Connection closed by peer", "Connection reset by peer", "Connection refused", "Timed out")


@dataclass(frozen=True, kw_only=True)
class JaxJoining(Event):
    """jax.distributed.initialize() began: `coordinator`, process 0 starting the service, else connecting to it."""
    coordinator: bool
    address: str
    kind = "jax_joining"


@dataclass(frozen=True, kw_only=True)
class GlooConnected(Event):
    """The process's CPU collectives reached every peer: it has joined."""
    rank: int
    peers: int
    kind = "gloo_connected"


@dataclass(frozen=True, kw_only=True)
class GlooFailed(Event):
    """A collective failed because a peer went away (`reason` as Gloo says it)."""
    collective: str
    reason: str
    kind = "gloo_failed"


@dataclass(frozen=True, kw_only=True)
class CoordinationTimeout(Event):
    """The coordination service gave up on a process: it never registered, or its heartbeats stopped."""
    kind = "coordination_timeout"


def jax_events(body: str) -> list[Event]:
    """The events of whole lines of a task's output (as its reader hands them: each ended by `\\n` or `\\r`); text
    holding none of MARKERS, nearly all of a log, costs a few substring scans."""
    if not any(marker in body for marker in MARKERS):
        return []
    events: list[Event] = []
    for line in body.replace("\r", "\n").split("\n"):
        if not any(marker in line for marker in MARKERS):
            continue
        if match := _JOINING.search(line):
            events.append(JaxJoining(coordinator=match[1] == "Starting", address=match[2], lines=(line,)))
        elif match := _GLOO.search(line):
            events.append(GlooConnected(rank=int(match[1]), peers=int(match[2]), lines=(line,)))
        elif match := _GLOO_FAILED.search(line):
            reason = next((reason for reason in _GLOO_REASONS if reason in line), "a peer went away")
            events.append(GlooFailed(collective=match[1], reason=reason, lines=(line,)))
        elif match := _ADD_PORT.search(line):
            events.append(BindFailure(address=match[1], lines=(line,)))
        elif "RegisterTask" in line and "DEADLINE_EXCEEDED" in line or "heartbeat timeout" in line:
            events.append(CoordinationTimeout(lines=(line[:300],)))
    return events
