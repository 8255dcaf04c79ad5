"""Free ports on this machine, for a cluster's tasks on localhost (backends/local.py) and for the
coordinator's own port (engine/live/cluster.py)."""
from __future__ import annotations

import portpicker

__all__ = ["free_ports"]


def free_ports(count: int) -> list[int]:
    """Ports that are free now; distinct, since portpicker never hands out the same port twice."""
    return [portpicker.pick_unused_port() for _ in range(count)]
