"""``run --image PATH`` and chat's ``/image PATH``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_helpers import Cli, script, subprocess_env, text, turn

PNG_1x1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
    "3a7e9b550000000a49444154789c636800000082008177cd72b60000000049454e44ae426082"
)


def _user_content(cli: Cli, sid: str) -> list[dict[str, object]]:
    events = cli("show", sid, "--json").json_lines()
    user = next(e for e in events if e["kind"] == "UserMessageAdded")
    content: list[dict[str, object]] = user["fields"]["content"]
    return content


def test_run_with_images_records_them_as_blobs(repo: Path, cli: Cli) -> None:
    (repo / "a.png").write_bytes(PNG_1x1)
    (repo / "b.dat").write_bytes(PNG_1x1)  # the name does not matter, the bytes do
    s = script(repo / "s.json", turn(text("Two grey pixels.")))
    result, sid = cli.run_script(
        "Describe these", s, "--image", str(repo / "a.png"), "--image", str(repo / "b.dat")
    )
    assert result.code == 0, result.err
    content = _user_content(cli, sid)
    assert [b["type"] for b in content] == ["text", "image", "image"]
    assert content[1]["media_type"] == "image/png" and content[1]["size"] == len(PNG_1x1)


def test_run_with_a_bad_image_exits_2_with_a_clear_message_and_records_nothing(
    repo: Path, cli: Cli
) -> None:
    (repo / "notes.png").write_text("not really a picture")
    s = script(repo / "s.json", turn(text("unused")))
    missing = cli("run", "look", "--script", s, "--image", str(repo / "missing.png"))
    assert missing.code == 2
    assert "missing.png': cannot read the image" in missing.err and "Traceback" not in missing.err
    wrong = cli("run", "look", "--script", s, "--image", str(repo / "notes.png"))
    assert wrong.code == 2
    assert "notes.png': not a PNG, JPEG, GIF or WebP image" in wrong.err
    assert cli("sessions", "--json").json_lines() == []


def test_chat_image_command_attaches_to_the_next_message(repo: Path, cli: Cli) -> None:
    (repo / "pic.png").write_bytes(PNG_1x1)
    s = script(repo / "s.json", turn(text("A pixel.")))
    done = subprocess.run(
        [sys.executable, "-m", "coder_es.cli.main", "chat", "--script", s, "--json"],
        cwd=repo,
        env=subprocess_env(),
        input="/image nope.png\n/image pic.png\nwhat is it?\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "'nope.png': cannot read the image" in done.stderr
    assert "image attached (1)" in done.stderr
    sid = json.loads(done.stdout.splitlines()[0])["session_id"]
    content = _user_content(cli, sid)
    assert content[0] == {"type": "text", "text": "what is it?"}
    assert content[1]["type"] == "image" and content[1]["media_type"] == "image/png"
