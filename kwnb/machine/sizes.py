"""Sizes in words, one rule everywhere kwnb shows one (the summary, the overview, the doctor, the warm
pool, the diagnoses, an export's files): binary units, as the limits themselves count. A cgroup's
memory.max, JupyterHub's mem_limit = '2G' and Kubernetes' '2Gi' are all 2 * 2**30 bytes, so a 2 GiB
limit reads "2.0 GiB", not "2.1 GB" in one place and "2.0 GB" in another.
"""
from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_size(count: float) -> str:
    """'2.0 GiB', '1.5 GiB', '657 MiB', '12 KiB', '512 B'.

    One decimal below 10 of a unit, none above: the rounding then never shifts a size by more than 5 %
    (0.05 of 1.0, 0.5 of 10), finer than what it measures varies (a task's RSS moves by more from one
    run to the next), and a size never shows as 1024 of a unit: 1023.5 MiB and up reads "1.0 GiB".
    Written here: humanize would be one more dependency for it, and psutil's bytes2human is private."""
    value, unit = float(count), 0
    while abs(value) >= 1023.5 and unit < len(UNITS) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0 or abs(value) >= 9.95:
        return f"{value:.0f} {UNITS[unit]}"
    return f"{value:.1f} {UNITS[unit]}"
