"""Free ports on this machine, for a cluster's tasks on localhost (backends/local.py) and for the
coordinator's own port (engine/live/cluster.py)."""
from __future__ import annotations

import socket

import portpicker

__all__ = ["HeldPorts", "free_ports"]


def free_ports(count: int) -> list[int]:
    """Ports that are free now; distinct, since portpicker never hands out the same port twice."""
    return [portpicker.pick_unused_port() for _ in range(count)]


class HeldPorts:
    """Free ports kept bound (not listening) from when they are chosen until the tasks that listen there start,
    so that no other picker here (another run's, portpicker's own) takes one in between: a JAX coordinator
    whose port is taken crashes at once, and one that takes a port an older JAX job still dials ends that job
    ("different incarnation")."""

    def __init__(self, count: int):
        self.ports, self._sockets = [], []
        while len(self.ports) < count:
            port = portpicker.pick_unused_port()
            held = socket.socket()
            try:
                held.bind(("", port))
            except OSError:  # taken since it was picked: pick again
                held.close()
                continue
            self.ports.append(port)
            self._sockets.append(held)

    def release(self) -> None:
        for held in self._sockets:
            held.close()
        self._sockets = []
