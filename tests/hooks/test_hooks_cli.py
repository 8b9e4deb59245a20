"""``coder-es hooks import|list|test`` and ``run`` with hooks, as a user types them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "cli"))

from cli_helpers import Cli, git_repo, script, text, tool, turn
from hook_helpers import VALIDATOR

SETTINGS = {
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {
                        "type": "command",
                        "command": '"$CLAUDE_PROJECT_DIR"/.claude/hooks/validate.py',
                        "timeout": 10,
                    }
                ],
            }
        ],
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "prompt", "prompt": "review it"}]}
        ],
        "TaskCreated": [{"hooks": [{"type": "command", "command": "true"}]}],
    }
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODER_ES_SCRIPT", "CODER_ES_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CODER_ES_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CODER_ES_BACKEND", "sqlite")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = git_repo(tmp_path / "repo", {"keep/a.txt": "precious\n"})
    hook = root / ".claude" / "hooks" / "validate.py"
    hook.parent.mkdir(parents=True)
    hook.write_text(VALIDATOR)
    hook.chmod(0o755)
    (root / ".claude" / "settings.json").write_text(json.dumps(SETTINGS))
    return root


@pytest.fixture
def cli(repo: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(repo, capsys)


def test_import_then_trust_then_run_blocks_rm_rf(cli: Cli, repo: Path, tmp_path: Path) -> None:
    done = cli("hooks", "import")
    assert done.code == 0, done.err
    assert "1 hook(s) imported" in done.out
    assert "a prompt handler (only commands run)" in done.out
    assert "TaskCreated: an event coder-es does not have" in done.out
    project = repo / ".coder-es" / "config.toml"
    assert 'dialect = "claude-code"' in project.read_text()
    # A second import adds nothing.
    assert "1 already there" in cli("hooks", "import").out

    # Untrusted: the project's hook is held back and listed as such.
    listed = cli("hooks", "list")
    assert "held back" in listed.out and "validate.py" in listed.out

    trusted = cli("trust")
    assert trusted.code == 0, trusted.err
    assert ".claude/hooks/validate.py, a script its hooks run" in trusted.out
    listed = cli("hooks", "list", "--json")
    (hook,) = json.loads(listed.out)["hooks"]
    assert hook["event"] == "PreToolUse" and hook["matcher"] == "Bash"

    tested = cli("hooks", "test", "PreToolUse")
    assert tested.code == 0 and "exit 0" in tested.out
    sample = tmp_path / "in.json"
    sample.write_text(json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf keep"}}))
    tested = cli("hooks", "test", "PreToolUse", "--input", str(sample))
    assert tested.code == 1
    assert "exit 2" in tested.out and "Blocked: rm -rf is not allowed" in tested.out

    path = script(tmp_path / "s.json", turn(tool("bash", command="rm -rf keep")), turn(text("ok")))
    ran = cli("run", "clean", "--script", path, "--json")
    assert ran.code == 0, ran.err
    assert (repo / "keep" / "a.txt").exists()
    kinds = [u["type"] for u in ran.json_lines()]
    assert "hook" in kinds
    denied = next(u for u in ran.json_lines() if u["type"] == "permission_decided")
    assert denied["decision"] == "deny"


def test_import_refuses_a_linked_settings_file(cli: Cli, repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps(SETTINGS))
    settings = repo / ".claude" / "settings.json"
    settings.unlink()
    settings.symlink_to(secret)
    done = cli("hooks", "import")
    assert done.code == 2
    assert "not a regular file" in done.err and "Traceback" not in done.err
    assert not (repo / ".coder-es" / "config.toml").exists()


def test_an_edited_hook_script_needs_trusting_again(cli: Cli, repo: Path) -> None:
    assert cli("hooks", "import").code == 0
    assert cli("trust").code == 0
    listed = json.loads(cli("hooks", "list", "--json").out)
    assert [h["event"] for h in listed["hooks"]] == ["PreToolUse"]
    # The config entry is unchanged; the script it runs is not.
    hook = repo / ".claude" / "hooks" / "validate.py"
    hook.write_text(VALIDATOR.replace("sys.exit(2)", "sys.exit(0)"))
    listed = cli("hooks", "list")
    assert "held back" in listed.out, listed.out
    assert json.loads(cli("hooks", "list", "--json").out)["hooks"] == []
    shown = cli("trust", "--show")
    assert "changed since you trusted it" in shown.out
    assert "the hook script .claude/hooks/validate.py changed" in shown.out
    # Trusted again (the user reviewed the edit): it runs.
    assert cli("trust").code == 0
    assert len(json.loads(cli("hooks", "list", "--json").out)["hooks"]) == 1
    # Replacing the script by a link is an edit too.
    hook.unlink()
    hook.symlink_to("/bin/true")
    assert json.loads(cli("hooks", "list", "--json").out)["hooks"] == []
