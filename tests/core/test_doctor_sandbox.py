"""``doctor`` shows where shell commands may write and whether they have the network, per agent
preset (issue 29): the workspace through its overlay and a private /tmp, the ``[sandbox]
writable`` places for agents that may write, no network for read-only agents unless
``[sandbox] network`` says so; an untrusted project cannot widen any of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coder_es.cli.main import main
from coder_es.userdirs import user_config_dir


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".coder-es").mkdir(parents=True)
    return root


def doctor(ws: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    main(["--workspace", str(ws), "--backend", "sqlite", "doctor", *flags])
    return capsys.readouterr().out


def user_config(text: str) -> None:
    user_config_dir().mkdir(parents=True, exist_ok=True)
    (user_config_dir() / "config.toml").write_text(text)


def test_writable_places_and_network_per_preset(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = Path.home() / ".cache" / "pip"
    cache.mkdir(parents=True)
    (Path.home() / ".gitconfig").write_text("")
    user_config('[sandbox]\nwritable = ["~/.cache/pip", "~/.npm", "~/.gitconfig"]\n')
    report = json.loads(doctor(ws, capsys, "--json"))["sandbox"]
    if report["presets"]["build"]["writes"][0].startswith("anywhere"):
        pytest.skip("the namespace sandbox is unavailable here")
    assert report["writable"] == [str(cache)]
    assert report["presets"]["build"] == {
        "writes": ["workspace (overlay)", "private /tmp", str(cache)],
        "network": True,
    }
    assert report["presets"]["plan"] == {"writes": ["private /tmp"], "network": False}
    assert report["refused"] == [
        {"place": "~/.npm", "why": "it does not exist"},
        {"place": "~/.gitconfig", "why": "it is not a directory"},
    ]
    lines = doctor(ws, capsys).splitlines()
    assert f"sandbox build: writes workspace (overlay), private /tmp, {cache}; network yes" in lines
    assert "sandbox plan: writes private /tmp; network no" in lines
    assert any("'~/.npm' is not writable: it does not exist" in line for line in lines)


def test_network_setting_applies_to_read_only_presets(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user_config("[sandbox]\nnetwork = true\n")
    presets = json.loads(doctor(ws, capsys, "--json"))["sandbox"]["presets"]
    assert presets["plan"]["network"] and presets["explore"]["network"]
    user_config("[sandbox]\nnetwork = false\n")
    presets = json.loads(doctor(ws, capsys, "--json"))["sandbox"]["presets"]
    assert not presets["build"]["network"]


def test_an_untrusted_project_cannot_widen_the_sandbox(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (ws / ".coder-es" / "config.toml").write_text(
        '[sandbox]\nwritable = ["/", "~"]\nnetwork = true\n'
    )
    report = json.loads(doctor(ws, capsys, "--json"))
    assert report["sandbox"]["writable"] == []
    assert not report["sandbox"]["presets"]["plan"]["network"]
    held = [line for line in report["ignored"] if "sandbox." in line]
    assert len(held) == 2, report["ignored"]


def test_a_relative_writable_place_is_a_config_problem(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user_config('[sandbox]\nwritable = ["cache"]\n')
    out = doctor(ws, capsys, "--json")
    assert "must be an absolute path or start with ~/" in out
