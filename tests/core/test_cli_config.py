"""The command line honours the validated configuration files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coder_es.cli.main import main
from coder_es.sandbox import SandboxSettings, availability

SCRIPT = {
    "turns": [
        {
            "blocks": [
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "rm -f x"}}
            ],
            "stop_reason": "tool_use",
        },
        {"blocks": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
    ]
}


def _run(ws: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[dict]]:
    script = ws / "turns.json"
    script.write_text(json.dumps(SCRIPT))
    code = main(
        [
            "--workspace",
            str(ws),
            "--backend",
            "sqlite",
            "run",
            "go",
            "--provider",
            "scripted",
            "--script",
            str(script),
            "--json",
            *extra,
        ]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    return code, lines


def test_a_project_deny_rule_denies_a_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".coder-es").mkdir()
    (tmp_path / ".coder-es" / "config.toml").write_text(
        '[permissions.rules]\nbash = {"rm *" = "deny"}\n'
    )
    code, updates = _run(tmp_path, capsys)
    decision = next(u for u in updates if u["type"] == "permission_decided")
    assert code == 0
    assert decision["decision"] == "deny"
    # The project is not trusted: its deny applies all the same, named as untrusted.
    assert decision["matched_rule"] == "untrusted-project:deny bash:rm *"


def test_the_command_line_overrides_the_project_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".coder-es").mkdir()
    (tmp_path / ".coder-es" / "config.toml").write_text(
        '[permissions.rules]\nbash = {"rm *" = "deny"}\n'
    )
    _, updates = _run(tmp_path, capsys, "--allow", "bash:rm *")
    decision = next(u for u in updates if u["type"] == "permission_decided")
    # Flags beat files (docs/configuration.md), so the user's explicit allow wins.
    assert decision["decision"] == "allow"
    assert decision["matched_rule"] == "user:allow bash:rm *"


def test_a_broken_config_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".coder-es").mkdir()
    (tmp_path / ".coder-es" / "config.toml").write_text("permisions = 1\n")
    # A turn needs a valid configuration (its rules may be in the broken file)...
    assert main(["--workspace", str(tmp_path), "--backend", "sqlite", "run", "hi"]) == 2
    assert "did you mean 'permissions'" in capsys.readouterr().err
    # ...a command that only reads what is recorded runs with the defaults and says why.
    assert main(["--workspace", str(tmp_path), "--backend", "sqlite", "sessions"]) == 0
    err = capsys.readouterr().err
    assert "warning: the configuration has problems" in err and "did you mean" in err


NEW_FILE_SCRIPT = {
    "turns": [
        {
            "blocks": [
                {
                    "type": "tool_use",
                    "id": "w1",
                    "name": "bash",
                    "input": {"command": "touch notes.txt"},
                }
            ],
            "stop_reason": "tool_use",
        },
        {"blocks": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
    ]
}


@pytest.mark.parametrize(("default", "expected"), [("deny", "deny"), ("allow", "allow")])
def test_the_configured_default_decides_calls_no_rule_covers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], default: str, expected: str
) -> None:
    # The plan agent's preset asks about commands it does not know, such as `touch`; with a
    # configured default, that answer is given instead of asking.
    (tmp_path / ".coder-es").mkdir()
    (tmp_path / ".coder-es" / "config.toml").write_text(f'[permissions]\ndefault = "{default}"\n')
    # A project's looser default applies only once the user trusts the workspace.
    assert main(["--workspace", str(tmp_path), "trust"]) == 0
    capsys.readouterr()
    script = tmp_path / "turns.json"
    script.write_text(json.dumps(NEW_FILE_SCRIPT))
    code = main(
        [
            "--workspace",
            str(tmp_path),
            "--backend",
            "sqlite",
            "run",
            "go",
            "--provider",
            "scripted",
            "--script",
            str(script),
            "--json",
            "--agent",
            "plan",
            "--allow",
            "write:docs/**",
        ]
    )
    updates = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    decision = next(u for u in updates if u["type"] == "permission_decided")
    assert code == 0
    assert (decision["decision"], decision["matched_rule"]) == (expected, f"default:{default}")
    # The rules decide whether the command runs; where the sandbox works, the plan agent's
    # commands run on a read-only file system, so even an allowed `touch` changes nothing.
    read_only = availability(SandboxSettings(), tmp_path).active
    assert (tmp_path / "notes.txt").exists() == (expected == "allow" and not read_only)


def test_a_configured_redaction_pattern_keeps_a_secret_out_of_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".coder-es").mkdir()
    (tmp_path / ".coder-es" / "config.toml").write_text(
        "[redaction]\npatterns = ['zz-internal-[0-9]{6}']\n"
    )
    # A project's patterns apply once the workspace is trusted (coder_es.config.untrusted).
    assert main(["--workspace", str(tmp_path), "trust"]) == 0
    capsys.readouterr()
    script = tmp_path / "turns.json"
    script.write_text(
        json.dumps(
            {"turns": [{"blocks": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}]}
        )
    )
    args = ["--workspace", str(tmp_path), "--backend", "sqlite"]
    run = [*args, "run", "deploy with zz-internal-424242", "--provider", "scripted"]
    assert main([*run, "--script", str(script), "--json"]) == 0
    sid = json.loads(capsys.readouterr().out.splitlines()[0])["session_id"]
    assert main([*args, "show", sid, "--json"]) == 0
    shown = capsys.readouterr().out
    assert "zz-internal-424242" not in shown
    assert "[REDACTED:user:config1:" in shown
    raw = b"".join(p.read_bytes() for p in (tmp_path / ".coder-es").glob("events.sqlite*"))
    assert b"zz-internal-424242" not in raw


def _write_script(path: Path) -> Path:
    path.write_text(json.dumps({"turns": [{"blocks": [{"type": "text", "text": "from config"}]}]}))
    return path


@pytest.mark.parametrize("where", ["user", "trusted project"])
def test_provider_and_model_from_a_config_file_are_used_by_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Documented keys must act: `provider = "scripted"` with the script as the model, no flags.
    for var in ("CODER_ES_PROVIDER", "CODER_ES_MODEL", "CODER_ES_SCRIPT", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    script = _write_script(tmp_path / "fix.json")
    text = f'provider = "scripted"\nmodel = "{script}"\n'
    if where == "user":
        config = Path.home() / ".config" / "coder-es" / "config.toml"
    else:
        config = ws / ".coder-es" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)
    if where == "trusted project":
        assert main(["--workspace", str(ws), "trust"]) == 0
    capsys.readouterr()
    code = main(["--workspace", str(ws), "--backend", "sqlite", "run", "hi", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    updates = [json.loads(line) for line in out.out.splitlines() if line]
    assert any("from config" in json.dumps(u) for u in updates)
    # `--provider scripted` alone takes the script from the config too.
    code = main(
        ["--workspace", str(ws), "--backend", "sqlite", "run", "hi", "--provider", "scripted"]
    )
    assert code == 0, capsys.readouterr().err
