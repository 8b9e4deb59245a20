"""Whole sessions on a real git repository, a real store and the scripted provider."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from backends import BACKENDS

from coder_es.agent import updates as up
from coder_es.application import CoderApp
from coder_es.permissions.rules import Rule
from coder_es.providers.scripted import ScriptedProvider
from coder_es.records import event_kind
from coder_es.service.api import AgentService, SessionHandle, SessionOptions, auto_answerer
from coder_es.store.config import StoreConfig

Sleep = Callable[[float], Awaitable[None]]


def git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"],
        cwd=path,
        check=True,
    )
    return path


def tool(name: str, id: str | None = None, **input: Any) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_use", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def turn(*blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"blocks": list(blocks), **extra}


@dataclass
class Harness:
    root: Path
    app: CoderApp
    providers: list[ScriptedProvider] = field(default_factory=list)
    sleep: Sleep | None = None
    writable: tuple[Path, ...] = ()
    """Places outside the workspace the sandbox lets commands write (``[sandbox] writable``)."""

    def service(self, turns: Sequence[dict[str, Any]]) -> AgentService:
        def factory(name: str, model: str) -> ScriptedProvider:
            kwargs: dict[str, Any] = {"model": "scripted-test"}
            if self.sleep is not None:
                kwargs["sleep"] = self.sleep
            provider = ScriptedProvider(list(turns), **kwargs)
            self.providers.append(provider)
            return provider

        from coder_es.sandbox import SandboxSettings

        sandbox = SandboxSettings.from_environ(writable=self.writable)
        return AgentService(self.app, self.root, provider_factory=factory, sandbox=sandbox)

    def start(
        self,
        turns: Sequence[dict[str, Any]],
        *,
        agent: str = "build",
        rules: Sequence[Rule] = (),
        max_steps: int = 50,
    ) -> SessionHandle:
        options = SessionOptions(agent=agent, rules=tuple(rules), max_steps=max_steps)
        return asyncio.run(self.service(turns).create_session(options))

    def reopen(self, session_id: str, turns: Sequence[dict[str, Any]], **kw: Any) -> SessionHandle:
        return asyncio.run(self.service(turns).open_session(session_id, SessionOptions(**kw)))

    def events(self, handle: SessionHandle | str) -> list[Any]:
        sid = handle.loop.session.id if isinstance(handle, SessionHandle) else handle
        return self.app.session_events(self.app.get_session(sid).id)

    def kinds(self, handle: SessionHandle | str) -> list[str]:
        return [event_kind(e) for e in self.events(handle)]

    def of(self, handle: SessionHandle | str, kind: str) -> list[Any]:
        return [e for e in self.events(handle) if event_kind(e) == kind]


def collect(
    handle: SessionHandle,
    message: str | None,
    *,
    yes: bool | None = True,
    on_update: Callable[[SessionHandle, up.Update], Awaitable[None]] | None = None,
) -> list[up.Update]:
    """Run one turn to its end and return its updates."""

    async def go() -> list[up.Update]:
        answerer = None if yes is None else auto_answerer(yes)
        stream = (
            handle.send(message, answerer=answerer)
            if message is not None
            else handle.resume(answerer=answerer)
        )
        seen = []
        async for update in stream:
            seen.append(update)
            if on_update is not None:
                await on_update(handle, update)
        return seen

    return asyncio.run(go())


DEMO_FILES = {
    "README.md": "# Demo\n",
    "src/calc.py": "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
    "AGENTS.md": "Run the tests with pytest.\n",
    "secrets/key.txt": "hunter2\n",
}


def demo_repo(path: Path) -> Path:
    """The demo repository of ``make_harness`` at ``path``: ``DEMO_FILES``, committed."""
    return git_repo(path, DEMO_FILES)


def make_harness(
    tmp_path: Path, backend: str = "sqlite", *, config: StoreConfig | None = None
) -> Harness:
    """A demo repository under ``tmp_path`` and an app on ``config`` (default: ``backend`` in
    ``tmp_path/store``)."""
    root = demo_repo(tmp_path / "repo")
    config = config or StoreConfig(backend=backend, path=tmp_path / "store")
    # Tests signal commands through files beside the workspace (a command touches a flag, then
    # waits for one): the sandbox lets them write there.
    return Harness(root, CoderApp(config), writable=(tmp_path,))


ON_EVERY_BACKEND = pytest.mark.parametrize("h", BACKENDS, indirect=True)
"""Run a test taking the ``h`` fixture once per store backend instead of on SQLite only."""


def plan_commands_are_read_only(root: Path) -> bool:
    """Whether the plan agent's shell commands run on a read-only file system here (the
    namespace sandbox works), so that even an allowed command cannot write."""
    from coder_es.sandbox import SandboxSettings, availability

    return availability(SandboxSettings(), root).active
