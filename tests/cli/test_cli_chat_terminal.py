"""``coder-es chat`` in a real terminal (tmux): streaming, a permission prompt, Ctrl-C."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import subprocess_env

from coder_es.userdirs import user_config_dir

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None,
    reason="tmux is not installed (Debian package 'tmux'; .ci/run installs it)",
)


class Terminal:
    """A tmux pane of 160x50 running one command, on a server of its own."""

    def __init__(self, socket: Path, command: str) -> None:
        self.base = ["tmux", "-S", str(socket)]
        subprocess.run(
            [*self.base, "new-session", "-d", "-x", "160", "-y", "50", command],
            check=True,
            timeout=30,
        )

    def screen(self) -> str:
        done = subprocess.run(
            [*self.base, "capture-pane", "-p", "-J", "-S", "-200"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", *keys], check=True, timeout=30)

    def wait(self, found: Callable[[str], bool], what: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if found(screen):
                return screen
            time.sleep(0.1)
        pytest.fail(f"waited {timeout}s for {what}; the terminal shows:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal(repo: Path, tmp_path: Path) -> Iterator[Callable[[list[str]], Terminal]]:
    opened: list[Terminal] = []

    def start(args: list[str]) -> Terminal:
        env = subprocess_env()
        keep = ("PYTHONPATH", "CODER_ES_STORE", "CODER_ES_BACKEND", "HOME", "PATH")
        exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in keep if k in env)
        exports += " " + " ".join(
            f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith("XDG_")
        )
        cli = shlex.join([sys.executable, "-m", "coder_es.cli.main", *args])
        where = shlex.quote(str(repo))
        command = f'cd {where} && env {exports} {cli}; echo "[chat exited $?]"; sleep 600'
        term = Terminal(tmp_path / "tmux.sock", command)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def _prompt_count(screen: str) -> int:
    # An empty prompt is ">" once tmux trims the line; a typed one is "> text".
    return len(re.findall(r"^>( |$)", screen, flags=re.M))


def test_chat_permission_prompt_ctrl_c_and_idle_ctrl_c(
    repo: Path, terminal: Callable[[list[str]], Terminal]
) -> None:
    (repo / "s.json").write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "blocks": [
                            {"type": "text", "text": "Streaming some text"},
                            {
                                "type": "tool_use",
                                "name": "bash",
                                "input": {"command": "touch made"},
                            },
                        ]
                    },
                    {"blocks": [{"type": "text", "text": "second answer"}]},
                ]
            }
        )
    )
    term = terminal(["chat", "--agent", "plan", "--script", "s.json"])
    term.wait(lambda s: _prompt_count(s) == 1, "the first prompt")
    term.keys("hello", "Enter")
    screen = term.wait(lambda s: "allow [o]nce" in s, "the permission question")
    # The question starts on a line of its own, after the streamed text.
    assert re.search(r"^Streaming some text$", screen, flags=re.M), screen
    assert re.search(r"^permission bash touch made", screen, flags=re.M), screen

    term.keys("C-c")  # at the permission prompt: the turn is cancelled, the prompt comes back
    screen = term.wait(lambda s: _prompt_count(s) == 2, "a new prompt after Ctrl-C")
    assert re.search(r"^  ✗ bash Not run: the user cancelled", screen, flags=re.M), screen
    assert "cancelled" in screen
    assert not (repo / "made").exists()

    term.keys("C-c")  # at an idle prompt: how to quit, and the prompt again
    screen = term.wait(lambda s: _prompt_count(s) == 3, "a prompt after Ctrl-C when idle")
    assert "(Ctrl-D or /exit to quit)" in screen

    term.keys("again", "Enter")
    screen = term.wait(lambda s: "second answer" in s and _prompt_count(s) == 4, "the answer")
    assert "no permission question is waiting" not in screen
    assert len(re.findall(r"session \S+ (started|resumed)", screen)) == 1, screen

    term.keys("/exit", "Enter")
    screen = term.wait(lambda s: "[chat exited " in s, "chat to exit")
    assert "[chat exited 0]" in screen and "Traceback" not in screen


def test_chat_answers_a_permission_question(
    repo: Path, terminal: Callable[[list[str]], Terminal]
) -> None:
    (repo / "s.json").write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "blocks": [
                            {
                                "type": "tool_use",
                                "name": "bash",
                                "input": {"command": "touch ../made"},
                            }
                        ]
                    },
                    {"blocks": [{"type": "text", "text": "made it"}]},
                ]
            }
        )
    )
    # A write outside the workspace asks even the build agent (the plan agent's commands run on
    # a read-only file system, so an allowed write could not land there). Allowing the call does
    # not make the place writable: the sandbox's [sandbox] writable does.
    config = user_config_dir() / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[sandbox]\nwritable = [{json.dumps(str(repo.parent))}]\n")
    term = terminal(["chat", "--agent", "build", "--script", "s.json"])
    term.wait(lambda s: _prompt_count(s) == 1, "the first prompt")
    term.keys("make it", "Enter")
    term.wait(lambda s: "allow [o]nce" in s, "the permission question")
    term.keys("o", "Enter")
    screen = term.wait(lambda s: "made it" in s and _prompt_count(s) == 2, "the answer")
    assert (repo.parent / "made").exists()
    assert "allow bash touch ../made" in screen
    term.keys("C-d")
    assert "[chat exited 0]" in term.wait(lambda s: "[chat exited " in s, "chat to exit on Ctrl-D")


def test_chat_commands_history_completion_and_how_to_resume(
    repo: Path, terminal: Callable[[list[str]], Terminal]
) -> None:
    (repo / "s.json").write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "blocks": [
                            {
                                "type": "tool_use",
                                "name": "write",
                                "input": {"path": "made.txt", "content": "one\n"},
                            }
                        ]
                    },
                    # Long enough to see the spinner that waits for the model's first token.
                    {"blocks": [{"type": "text", "text": "wrote it"}], "delay_ms": 2500},
                ]
            }
        )
    )
    term = terminal(["chat", "--script", "s.json"])
    term.wait(lambda s: _prompt_count(s) == 1, "the first prompt")
    term.keys("/he", "Tab")  # completion of a slash command
    term.wait(lambda s: re.search(r"^> /help", s, flags=re.M) is not None, "/help completed")
    term.keys("Enter")
    screen = term.wait(lambda s: "/undo" in s and _prompt_count(s) == 2, "the command list")
    assert "/rewind" in screen and "/search" in screen
    # Esc then Enter: a line break inside the message; Enter sends it.
    term.keys("write", "Escape", "Enter", "the file", "Enter")
    screen = term.wait(lambda s: "waiting for the model" in s, "the spinner", timeout=60)
    screen = term.wait(lambda s: "wrote it" in s and _prompt_count(s) == 3, "the answer")
    assert (repo / "made.txt").read_text() == "one\n"
    term.keys("/tree", "Enter")  # a command of the product, not a message to the model
    screen = term.wait(lambda s: "head=" in s and _prompt_count(s) == 4, "the tree")
    term.keys("/undo", "Enter")
    term.wait(lambda s: _prompt_count(s) == 5, "undo done")
    assert not (repo / "made.txt").exists()  # the turn's file change is undone
    term.keys("/nonsense", "Enter")
    screen = term.wait(lambda s: "unknown command /nonsense" in s, "an unknown command")
    term.keys("Up", "Up")  # the history: /nonsense, then /undo
    term.wait(lambda s: re.search(r"^> /undo$", s, flags=re.M) is not None, "history recalled")
    term.keys("C-u", "C-d")
    screen = term.wait(lambda s: "[chat exited " in s, "chat to exit")
    assert "[chat exited 0]" in screen
    resume = re.search(r"resume this session: coder-es chat --session (\w+)", screen)
    assert resume is not None, screen
    assert "Traceback" not in screen
