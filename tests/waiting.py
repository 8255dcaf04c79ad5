"""Polling for a condition in tests: the one `wait_until` every test module imports."""
from __future__ import annotations

import time
from typing import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 90.0, interval: float = 0.1) -> bool:
    """Poll `predicate` until it holds or `timeout` seconds pass; returns whether it held (it is asked
    once more at the deadline, so a slow machine's last look still counts)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def pool_ready(count: int, timeout: float = 90.0) -> bool:
    """The warm pool (kwnb/backends/warm.py) holds at least `count` interpreters, every one ready."""
    from kwnb.backends.warm import POOL

    def ready() -> bool:
        idle = POOL.status()
        return len(idle) >= count and all(warm["ready"] for warm in idle)

    return wait_until(ready, timeout, interval=0.3)
