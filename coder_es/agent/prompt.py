"""The system prompt: base instructions, the project's AGENTS.md / CLAUDE.md files, git status.

Instruction files and git status are read from the disk, so they are non-deterministic inputs:
they are gathered once, when a session starts, the resulting prompt is stored as a blob, and the
session's settings name that blob (``system_blob``) with the files and git status that went into
it. Every request of the session, a resumed run and a replay all use that recorded prompt.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coder_es.store.blobs import BlobStore
from coder_es.workspace.git_state import SETTINGS_KEY as GIT_SETTINGS_KEY
from coder_es.workspace.git_state import capture as capture_git_state
from coder_es.workspace.ignore import IgnoreMatcher
from coder_es.workspace.safe_git import SafeGit

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
MAX_INSTRUCTION_FILES = 20
MAX_INSTRUCTION_BYTES = 32_000
MAX_GIT_STATUS_CHARS = 4_000
# Directories deeper than this are not searched for instruction files.
MAX_INSTRUCTION_DEPTH = 4

BASE_PROMPT = """\
You are coder-es, a coding agent working in the user's workspace at {workspace}.
Use the tools to read, search, edit and run commands. Paths are relative to the workspace.
Read a file before editing it; prefer `edit` for changes to existing files. Keep the user
informed briefly, and stop when the task is done."""


@dataclass(frozen=True)
class PromptSources:
    """What went into a system prompt (recorded in the session's settings)."""

    text: str
    instructions: tuple[tuple[str, str], ...]  # (path, content) in the order used
    git_status: str

    def settings(self, blob: str) -> dict[str, Any]:
        return {
            "system_blob": blob,
            "instruction_files": [path for path, _ in self.instructions],
            "git_status": self.git_status,
        }


def find_instruction_files(root: Path) -> list[str]:
    """AGENTS.md / CLAUDE.md files from the root down (root first, then by path).

    Ignored directories (``.gitignore``) are not searched.
    """
    found: list[str] = []
    matcher = IgnoreMatcher(root)
    for rel in matcher.walk():
        name = rel.rsplit("/", 1)[-1]
        if name in INSTRUCTION_FILES and rel.count("/") < MAX_INSTRUCTION_DEPTH:
            found.append(rel)
            if len(found) >= MAX_INSTRUCTION_FILES:
                break
    return sorted(found, key=lambda p: (p.count("/"), p))


def git_status(root: Path, git: SafeGit | None = None) -> str:
    try:
        # Outside the sandbox, on a repository the workspace controls: every hook point off.
        git = git or SafeGit.at(root, timeout=10)
        proc = git.run(
            "status", "--porcelain=v1", "--branch", "--ignore-submodules=all", timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(git status unavailable: {e})"
    if proc.returncode != 0:
        return "(not a git repository)"
    text = proc.stdout.decode("utf-8", "replace").strip()
    if len(text) > MAX_GIT_STATUS_CHARS:
        text = text[:MAX_GIT_STATUS_CHARS] + "\n... (truncated)"
    return text or "(clean)"


def gather_prompt(root: Path, git: SafeGit | None = None) -> PromptSources:
    instructions: list[tuple[str, str]] = []
    for rel in find_instruction_files(root):
        try:
            data = (root / rel).read_bytes()[:MAX_INSTRUCTION_BYTES]
        except OSError:
            continue
        instructions.append((rel, data.decode("utf-8", "replace")))
    status = git_status(root, git)
    parts = [BASE_PROMPT.format(workspace=root)]
    parts.append(f"# Git status at session start\n{status}")
    for rel, content in instructions:
        parts.append(f"# Instructions from {rel}\n{content.strip()}")
    return PromptSources("\n\n".join(parts), tuple(instructions), status)


def record_prompt(root: Path, blobs: BlobStore) -> dict[str, Any]:
    """Gather the prompt, store it, and return the settings that name it, with the repository
    state a live replay rebuilds (``coder_es.workspace.git_state``)."""
    # One listing of the repository's drivers for every git call of the session's start.
    try:
        git: SafeGit | None = SafeGit.at(root, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        git = None
    sources = gather_prompt(root, git)
    blob = blobs.put(sources.text.encode("utf-8"))
    settings = sources.settings(blob)
    repository = capture_git_state(root, blobs, git)
    if repository is not None:
        settings[GIT_SETTINGS_KEY] = repository.to_json()
    return settings


def recorded_prompt(settings: dict[str, Any], blobs: BlobStore, workspace: str) -> str:
    """The system prompt a session recorded (sessions started elsewhere get the base prompt)."""
    blob = settings.get("system_blob")
    if isinstance(blob, str) and blobs.has(blob):
        return blobs.get(blob).decode("utf-8")
    return BASE_PROMPT.format(workspace=workspace)
