"""Which harness a session runs: ``--harness claude|codex|gemini|acp:'CMD ARGS'|NAME``.

``NAME`` is a ``[harnesses.NAME]`` entry of the configuration (``kind``, ``command``, ``env``);
the three built-in names are shorthands for the kinds with their default commands. A harness is
recorded in the session's ``Started`` settings (``settings["harness"]``) and a later
``--harness`` must name the same one.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coder_es.errors import UsageError

if TYPE_CHECKING:
    from coder_es.agent.settings import RecordedHarness

KINDS = ("claude-code", "codex", "gemini", "acp")
BUILTIN = {
    "claude": "claude-code",
    "claude-code": "claude-code",
    "codex": "codex",
    "gemini": "gemini",
}
DEFAULT_COMMANDS = {"claude-code": ("claude",), "codex": ("codex",), "gemini": ("gemini",)}


@dataclass(frozen=True)
class HarnessSpec:
    name: str
    kind: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def to_settings(self) -> dict[str, Any]:
        # The env's values may be credentials: only its names are recorded.
        return {
            "name": self.name,
            "kind": self.kind,
            "command": list(self.command),
            "env": sorted(self.env),
        }


def parse_harness(
    value: str, configured: Mapping[str, Mapping[str, Any]] | None = None
) -> HarnessSpec:
    """The harness ``value`` names (``--harness``), from the built-ins and ``[harnesses.NAME]``."""
    configured = configured or {}
    if value.startswith("acp:"):
        command = tuple(shlex.split(value[4:]))
        if not command:
            raise UsageError("--harness acp: needs a command, e.g. --harness acp:'gemini --acp'")
        return HarnessSpec(value, "acp", command)
    if value in configured:
        entry = configured[value]
        kind = str(entry.get("kind", ""))
        if kind not in KINDS:
            msg = f"[harnesses.{value}] kind must be one of {', '.join(KINDS)}, not {kind!r}"
            raise UsageError(msg)
        raw = entry.get("command") or DEFAULT_COMMANDS.get(kind)
        if not raw:
            raise UsageError(f"[harnesses.{value}] needs a command")
        command = tuple(shlex.split(raw) if isinstance(raw, str) else (str(c) for c in raw))
        env = {str(k): str(v) for k, v in (entry.get("env") or {}).items()}
        return HarnessSpec(value, kind, command, env)
    if value in BUILTIN:
        kind = BUILTIN[value]
        return HarnessSpec(value, kind, DEFAULT_COMMANDS[kind])
    known = sorted({*BUILTIN, *configured})
    msg = f"unknown harness {value!r}: use one of {', '.join(known)} or acp:'COMMAND ARGS'"
    raise UsageError(msg)


def continuing(
    session: str,
    recorded: RecordedHarness,
    given: HarnessSpec | None,
    configured: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[HarnessSpec, str | None]:
    """The harness that runs the recorded session ``session`` again (``run --session``, a
    fork, ACP ``session/load``, live replay: the one rule), and a line to say when it is not
    the recorded one. ``given``: a ``--harness`` given again, which must name the recorded one.
    Without it, it is what ``--harness NAME`` gives now (a ``[harnesses.NAME]``'s ``env``
    included: only its names are recorded, the values may be credentials). The configuration
    may have changed since: the current entry of that name is used if it is of the recorded
    kind (the harness's own resume needs the same CLI), else, or when the entry is gone,
    refused."""
    if given is not None and given.name != recorded.name:
        msg = (
            f"session {session} is run by the {recorded.name} harness, not {given.name}; "
            f"continue it with --harness {recorded.name} (or without --harness)"
        )
        raise UsageError(msg)
    if given is None:
        try:
            given = parse_harness(recorded.name, configured)
        except UsageError:
            msg = (
                f"session {session} was started with the {recorded.name} harness, which the "
                f"configuration no longer has: add [harnesses.{recorded.name}] back (kind = "
                f'"{recorded.kind}") to run it'
            )
            raise UsageError(msg) from None
    if given.kind != recorded.kind:
        msg = (
            f"session {session} was started with the {recorded.name} harness of kind "
            f"{recorded.kind}; [harnesses.{recorded.name}] is now of kind {given.kind}, which "
            f'cannot run it: set kind = "{recorded.kind}" again to run the session'
        )
        raise UsageError(msg)
    now = (given.command, tuple(sorted(given.env)))
    if now == (recorded.command, tuple(sorted(recorded.env))):
        return given, None
    return given, (
        f"the {recorded.name} harness's configuration changed since session {session} started "
        f"(command {shlex.join(given.command)}, env {', '.join(sorted(given.env)) or 'none'}); "
        "running the current one"
    )


def resolve_command(spec: HarnessSpec, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The command with its program found on PATH; one clear line when it is missing."""
    program = spec.command[0]
    found = shutil.which(program, path=environ.get("PATH"))
    if found is None:
        hint = {
            "claude-code": "npm install -g @anthropic-ai/claude-code",
            "codex": "npm install -g @openai/codex",
            "gemini": "npm install -g @google/gemini-cli",
        }.get(spec.kind, "install it or give its full path")
        msg = (
            f"the {spec.name} harness needs the program {program!r}, which is not on PATH ({hint})"
        )
        raise UsageError(msg)
    return [found, *spec.command[1:]]


def program_places(program: str) -> tuple[Path, ...]:
    """The directories the harness's program is read from: for the path it was found at and for
    the file a link there points to (npm's ``.bin/x``), the outermost ``node_modules`` above it
    (the packages it loads), else its own directory. The sandbox carries those that lie under
    ``/tmp`` over its private one (``SandboxSpec.readable``)."""
    places: list[Path] = []
    for path in (Path(os.path.abspath(program)), Path(os.path.realpath(program))):
        modules = [p for p in path.parents if p.name == "node_modules"]
        place = modules[-1] if modules else path.parent
        if place not in places:
            places.append(place)
    return tuple(places)


def package_version(program: str, package: str) -> str | None:
    """The version of the npm package ``program`` belongs to, read from its package.json (no
    process started): npm links ``bin/x`` to a file inside ``node_modules/<package>/``."""
    real = Path(os.path.realpath(program))
    for parent in real.parents:
        candidate = parent / "package.json"
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            if data.get("name") == package:
                return str(data.get("version") or "") or None
            if parent.name == "node_modules":
                return None
    # A wrapper script in .bin next to node_modules: look the package up there.
    modules = real.parent.parent
    candidate = modules / package / "package.json"
    if modules.name == "node_modules" and candidate.is_file():
        try:
            return (
                str(json.loads(candidate.read_text(encoding="utf-8")).get("version") or "") or None
            )
        except (OSError, ValueError):
            return None
    return None
