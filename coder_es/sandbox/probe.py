"""Which way shell commands run here, and why: the namespace sandbox or the stat-index fallback.

The answer comes from a real probe (a ``true`` command run through the whole sandbox, overlay
included, next to the workspace), cached for the process per file system: a kernel without
unprivileged user namespaces or overlayfs, a container that forbids ``unshare``, a missing
program or a non-Linux system all end in the fallback, with the reason ``coder-es doctor`` shows.

``CODER_ES_SANDBOX=off`` (or ``[sandbox] mode = "off"``) forces the fallback, so that both modes
can be exercised on one machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from coder_es.sandbox.namespaces import (
    SandboxSpec,
    read_report,
    tools_missing,
    unsupported,
    wrap,
)
from coder_es.sandbox.transaction import Transaction, tx_root

ENV_SWITCH = "CODER_ES_SANDBOX"
PROBE_TIMEOUT_S = 20

Mode = Literal["auto", "off"]


@dataclass(frozen=True)
class SandboxSettings:
    """How the bash tool runs commands for one session."""

    mode: Mode = "auto"
    network: bool | None = None
    """None: network for agents that may write (``build``), none for read-only ones (``plan``,
    ``explore``): a command that cannot change anything has little use for it, and reading
    secrets plus network is how they leave (``[sandbox] network`` sets it either way)."""
    read_only: bool = False
    """The agent's preset or rules make shell commands read-only (``plan``, ``explore``)."""
    hidden: tuple[Path, ...] = field(default=())
    """Paths no command may see or change (the store directory)."""
    writable: tuple[Path, ...] = field(default=())
    """Places outside the workspace commands may change in place (``[sandbox] writable``, or a
    caller's own: a harness's state directory). Everything else but the workspace and a private
    ``/tmp`` is read-only."""

    @property
    def network_on(self) -> bool:
        """Whether commands get the network: the setting, else on unless read-only."""
        return self.network if self.network is not None else not self.read_only

    @classmethod
    def configured(
        cls, mode: str, network: bool | None, read_only: bool, writable: Iterable[str]
    ) -> SandboxSettings:
        """From the ``[sandbox]`` configuration (``~`` in a writable place is expanded here)."""
        return cls(
            mode="off" if mode == "off" else "auto",
            network=network,
            read_only=read_only,
            writable=tuple(Path(os.path.expanduser(p)) for p in writable),
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ, **kw: object) -> SandboxSettings:
        mode: Mode = "off" if environ.get(ENV_SWITCH, "").strip().lower() == "off" else "auto"
        return cls(mode=mode, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Availability:
    active: bool
    reason: str

    @property
    def mode(self) -> str:
        return "namespaces+overlay" if self.active else "stat-index fallback"


_probed: dict[int, Availability] = {}  # a cache: per file system (st_dev) of the tx directory


def availability(settings: SandboxSettings, workspace: Path, *, probe: bool = True) -> Availability:
    """Whether commands run in the namespace sandbox here. ``probe=False``: the checks that cost
    nothing (mode, platform, programs, the path), not a sandboxed run: for a caller whose own run
    reports a failed set-up in one line anyway (a harness turn), where the probe would be a
    second sandbox start on every command line."""
    if settings.mode == "off":
        return Availability(False, f'turned off ({ENV_SWITCH}=off or [sandbox] mode = "off")')
    if not sys.platform.startswith("linux"):
        return Availability(False, f"namespaces are Linux-only (this is {sys.platform})")
    missing = tools_missing() or unsupported(workspace)
    if missing:
        return Availability(False, missing)
    try:
        tx_root(workspace).mkdir(parents=True, exist_ok=True)
        dev = os.stat(tx_root(workspace)).st_dev
    except OSError as e:
        return Availability(False, f"cannot create {tx_root(workspace)}: {e.strerror}")
    found = _probed.get(dev)
    if found is None and not probe:
        return Availability(True, "namespaces and overlay not probed: the command's run tells")
    if found is None:
        found = _probe(workspace)
        _probed[dev] = found
    return found


def _probe(workspace: Path) -> Availability:
    tx = Transaction.begin(workspace)
    read_end, write_end = os.pipe()
    try:
        spec = SandboxSpec(workspace, workspace, tx.upper, tx.work, tx.path / "mounts.fstab")
        try:
            done = subprocess.run(
                wrap(spec, ["sh", "-c", "echo probe > .coder-es-probe"]),
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
                stdin=write_end,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            os.close(read_end)
            return Availability(False, f"the sandbox probe failed: {e}")
        finally:
            os.close(write_end)
        report = read_report(read_end)
        wrote = (tx.upper / ".coder-es-probe").exists()
        if done.returncode == 0 and report.ready and wrote:
            return Availability(True, "user, mount and PID namespaces with an overlay work here")
        why = report.setup_failure or done.stderr.decode("utf-8", "replace").strip()
        return Availability(False, f"the sandbox probe failed: {why or 'no overlay'}")
    finally:
        tx.close()
