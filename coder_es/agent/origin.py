"""Where a recorded decision comes from: the host, the process and the client that made it.

A parked question may be asked on one machine and answered on another; the log says which
(``TurnParked.by``, ``DeferredAnswered.by``)."""

from __future__ import annotations

import getpass
import os
import socket
from typing import Any


def origin(client: str) -> dict[str, Any]:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's uid): say so, never fail
        user = str(os.getuid())
    return {"user": user, "host": socket.gethostname(), "pid": os.getpid(), "client": client}
