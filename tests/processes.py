"""Finding processes by what they run (pids inside a PID namespace differ from the host's)."""

from __future__ import annotations

import os
import time


def running(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (pids inside a PID namespace differ
    from the host's, so processes are looked up by what they run)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{name}/stat") as f:
                zombie = f.read().rsplit(")", 1)[-1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmdline and not zombie:
            found.append(int(name))
    return found


def gone(marker: str, within_s: float = 5) -> bool:
    deadline = time.monotonic() + within_s
    while running(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
