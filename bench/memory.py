"""A process's memory as the benchmarks report it (light: no torch, so any bench may import it)."""

from __future__ import annotations

from pathlib import Path


def rss_mib(pid: int | str = "self") -> float:
    """A process's resident memory now (VmRSS, Linux), MiB; NaN where /proc does not say it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
