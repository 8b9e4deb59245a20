"""``coder-es doctor``: where shell commands may write, and whether they have the network, for
each agent preset (``[sandbox] writable`` and ``network``; docs/DESIGN.md, "The sandbox is an
allow-list")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from coder_es.permissions.presets import PRESETS
from coder_es.sandbox import SandboxSettings
from coder_es.sandbox.namespaces import refused_place, writable_places

WORKSPACE = "workspace (overlay)"
PRIVATE_TMP = "private /tmp"


def sandbox_places(sandbox: Any, workspace: Path, contained: bool) -> dict[str, Any]:
    """The report: ``sandbox`` is the ``[sandbox]`` configuration, ``contained`` whether the
    namespace sandbox runs here (in the fallback, commands write wherever the user can)."""
    settings = SandboxSettings.configured(
        sandbox.mode, sandbox.network, sandbox.read_only, sandbox.writable
    )
    root = Path(os.path.realpath(workspace))
    places = [str(p) for p in writable_places(settings.writable, root)]
    refused = []
    for written, place in zip(sandbox.writable, settings.writable, strict=True):
        why = refused_place(Path(os.path.realpath(place)), root)
        if why is not None:
            refused.append({"place": written, "why": why})
    presets = {}
    for name, preset in PRESETS.items():
        read_only = settings.read_only or preset.read_only_shell
        if not contained:
            writes = ["anywhere the user can (no sandbox here)"]
        elif read_only:
            writes = [PRIVATE_TMP]  # not even a writable place (coder_es.agent.runner)
        else:
            writes = [WORKSPACE, PRIVATE_TMP, *places]
        network = settings.network if settings.network is not None else not read_only
        presets[name] = {"writes": writes, "network": network}
    return {"writable": places, "refused": refused, "presets": presets}


def sandbox_lines(report: dict[str, Any]) -> list[str]:
    """The report as doctor prints it for a person."""
    lines = []
    for name, preset in report["presets"].items():
        network = "yes" if preset["network"] else "no"
        lines.append(f"sandbox {name}: writes {', '.join(preset['writes'])}; network {network}")
    for r in report["refused"]:
        lines.append(f"note: [sandbox] writable {r['place']!r} is not writable: {r['why']}")
    return lines
