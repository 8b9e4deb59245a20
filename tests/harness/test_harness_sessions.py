"""Each harness kind, the REAL CLI against the fake model: a turn that writes a file with the
CLI's own tool, runs a command that creates another, and answers; then what a native session
offers works on it (tree, rewind, export + verify, search, a second turn through the harness's
own resume), and a file the user edits during the turn is the user's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_model import standard_script
from harness_helpers import HarnessEnv, make_env, sandbox_reason

# Claude Code runs in the default suite; the others take 40-60 s each on a loaded machine
# (Gemini CLI alone needs ~10 s to start and ~5 s to exit): ``-m slow``.
KINDS = [
    "claude",
    pytest.param("codex", marks=pytest.mark.slow),
    pytest.param("gemini", marks=pytest.mark.slow),
    pytest.param("acp:claude-agent-acp", marks=pytest.mark.slow),
]


@pytest.fixture
def henv(tmp_path: Path, harness_bin: Path) -> Iterator[HarnessEnv]:
    reason = sandbox_reason(tmp_path)
    if reason:
        pytest.skip(f"harness sessions need the namespace sandbox: {reason}")
    yield from make_env(tmp_path, harness_bin, standard_script(str(tmp_path / "ws")))


def _user_edits_during_the_turn(h: HarnessEnv) -> None:
    def act(count: int, body: dict[str, Any]) -> None:
        if count == 2 and not (h.workspace / "user.txt").exists():
            (h.workspace / "user.txt").write_text("the user's own words\n")

    h.model.on_request = act


def _session_id(lines: list[dict[str, Any]]) -> str:
    return next(line["session_id"] for line in lines if line["type"] == "session")


@pytest.mark.parametrize("kind", KINDS)
def test_a_harness_turn_is_a_recorded_rewindable_session(kind: str, henv: HarnessEnv) -> None:
    h = henv
    _user_edits_during_the_turn(h)
    done = h.cli("run", "--harness", kind, "--yes", "--json", "write the notes and make the file")
    assert done.returncode == 0, done.stderr
    lines = h.json_lines(done.stdout)
    sid = _session_id(lines)
    assert lines[-1]["type"] == "turn_ended" and lines[-1]["reason"] == "end_turn"
    assert (h.workspace / "notes.md").read_text() == "# Notes\nwritten by the harness\n"
    assert (h.workspace / "made.txt").exists(), done.stdout + done.stderr
    assert (h.workspace / "made.txt").read_text() == "made\n"
    assert (h.workspace / "user.txt").read_text() == "the user's own words\n"

    # tree: both calls, each with its own file
    tree = json.loads(h.cli("tree", sid, "--json").stdout)
    results = [n for n in tree["nodes"] if n["kind"] == "tool_result"]
    assert [sorted(n["files_changed"]) for n in results] == [["notes.md"], ["made.txt"]]

    # search finds the harness's answer
    found = h.cli("search", "FAKE-ANSWER-7Q", "--json")
    assert found.returncode == 0 and sid in found.stdout

    # export + verify
    exported = h.workspace.parent / "export.jsonl"
    assert h.cli("export", sid, "--format", "jsonl", "-o", str(exported)).returncode == 0
    assert h.cli("verify", str(exported)).returncode == 0
    assert h.cli("verify", sid).returncode == 0
    # the start event names the harness, its version and its own session id
    started = next(line for line in exported.read_text().splitlines() if "Started" in line)
    assert '"version"' in started and '"session_id"' in started, started
    assert "sk-" not in exported.read_text()  # no credential recorded

    # a second turn continues the harness's own session (its history reaches the model)
    before = len(h.model.requests)
    again = h.cli("run", "--session", sid, "--json", "--yes", "and now?")
    assert again.returncode == 0, again.stderr
    later = json.dumps([r.get("body") for r in h.model.requests[before:]])
    assert "write the notes and make the file" in later and "and now?" in later

    # rewind to the first message: the harness's files go, the user's stay
    first = tree["nodes"][0]["id"]
    rewound = h.cli("rewind", sid, first, "--json")
    assert rewound.returncode == 0, rewound.stderr + rewound.stdout
    assert not (h.workspace / "notes.md").exists()
    assert not (h.workspace / "made.txt").exists()
    assert (h.workspace / "user.txt").read_text() == "the user's own words\n"


def test_a_configured_harness_runs_and_no_other_continues_its_session(henv: HarnessEnv) -> None:
    h = henv
    config = h.home / ".config" / "coder-es"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        '[harnesses.mine]\nkind = "claude-code"\ncommand = ["claude"]\n'
        'env = { DISABLE_AUTOUPDATER = "1" }\n'
    )
    done = h.cli("run", "--harness", "mine", "--yes", "--json", "hello")
    assert done.returncode == 0, done.stderr
    sid = _session_id(h.json_lines(done.stdout))
    refused = h.cli("run", "--session", sid, "--harness", "claude", "more")
    assert refused.returncode == 2
    assert "run by the mine harness" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def _max_tokens_asked(h: HarnessEnv, since: int) -> set[int]:
    """The ``max_tokens`` of the model requests since the ``since``-th."""
    return {
        int(r["body"].get("max_tokens") or 0)
        for r in h.model.requests[since:]
        if r.get("method") == "POST" and r["path"].split("?")[0].endswith("/messages")
    }


def test_continuing_a_configured_harness_uses_its_configuration_env_included(
    henv: HarnessEnv,
) -> None:
    """``run --session S`` without ``--harness`` runs what ``--harness mine`` runs: with the
    ``env`` of ``[harnesses.mine]`` (only its names are recorded). Here it sets Claude Code's
    output limit, which every request it sends carries (a resume does not keep it). Then the
    configuration changes under the session."""
    h = henv
    config = h.home / ".config" / "coder-es" / "config.toml"
    config.parent.mkdir(parents=True)

    def configure(kind: str, command: str, limit: int) -> None:
        config.write_text(
            f'[harnesses.mine]\nkind = "{kind}"\ncommand = {command}\n'
            f'env = {{ CLAUDE_CODE_MAX_OUTPUT_TOKENS = "{limit}" }}\n'
        )

    configure("claude-code", '["claude"]', 1234)
    done = h.cli("run", "--harness", "mine", "--yes", "--json", "hello")
    assert done.returncode == 0, done.stderr
    sid = _session_id(h.json_lines(done.stdout))
    assert _max_tokens_asked(h, 0) == {1234}

    before = len(h.model.requests)
    again = h.cli("run", "--session", sid, "--yes", "--json", "and now?")
    assert again.returncode == 0, again.stderr
    assert _max_tokens_asked(h, before) == {1234}
    assert "configuration changed" not in again.stderr

    # The same kind under another command: the current entry, said in one line.
    import shutil

    claude = shutil.which("claude", path=h.env["PATH"])
    configure("claude-code", json.dumps([claude]), 2345)
    before = len(h.model.requests)
    changed = h.cli("run", "--session", sid, "--yes", "--json", "and then?")
    assert changed.returncode == 0, changed.stderr
    assert _max_tokens_asked(h, before) == {2345}
    lines = [line for line in changed.stderr.splitlines() if "configuration changed" in line]
    assert len(lines) == 1 and "mine" in lines[0] and sid in lines[0], changed.stderr

    # Another kind, or no entry at all: refused in one line naming the harness.
    configure("codex", '["codex"]', 1)
    refused = h.cli("run", "--session", sid, "more")
    assert refused.returncode == 2
    assert "mine harness of kind claude-code" in refused.stderr and "codex" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    config.write_text("")
    gone = h.cli("run", "--session", sid, "more")
    assert gone.returncode == 2
    assert "[harnesses.mine]" in gone.stderr and "no longer has" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1, gone.stderr


def test_a_missing_harness_program_is_one_clear_line(henv: HarnessEnv) -> None:
    h = henv
    h.env["PATH"] = "/usr/bin:/bin"
    missing = h.cli("run", "--harness", "codex", "hi")
    assert missing.returncode == 2
    assert "not on PATH" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("how", ["refused", "dropped"])
def test_an_unreachable_model_ends_the_turn_with_one_line(how: str, henv: HarnessEnv) -> None:
    # Refused: nothing listens. Dropped: a server that accepts and closes each connection at
    # once (the harness sees ECONNRESET). Either way the CLI would retry for minutes.
    import socket
    import threading
    import time

    h = henv
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    dead = listener.getsockname()[1]
    if how == "refused":
        listener.close()
    else:
        listener.listen(16)

        def drop() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                conn.close()

        threading.Thread(target=drop, daemon=True).start()
    h.env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{dead}"
    (h.workspace / "kept.txt").write_text("mine\n")
    t = time.monotonic()
    try:
        failed = h.cli("run", "--harness", "claude", "--yes", "hello", timeout=180)
    finally:
        listener.close()
    took = time.monotonic() - t
    assert failed.returncode == 1, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error")]
    said = "cannot be reached" if how == "refused" else "gives no answer"
    assert len(errors) == 1 and f"127.0.0.1:{dead} {said}" in errors[0], failed.stderr
    assert "Traceback" not in failed.stderr
    assert (h.workspace / "kept.txt").read_text() == "mine\n"
    # Bounded: a few of the CLI's first retries (seconds), not its minutes of them.
    assert took < 90, took


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_kills_the_harness_and_applies_what_it_did(sig: str, henv: HarnessEnv) -> None:
    # Ctrl-C, and a `kill` (TERM): the turn is cancelled, not lost with the process.
    import signal
    import subprocess
    import sys
    import threading
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from processes import gone

    h = henv
    asked = threading.Event()

    def hold(count: int, body: dict[str, Any]) -> None:
        if count == 2:  # the write is done; the model "thinks" for a long time
            asked.set()
            time.sleep(60)

    h.model.on_request = hold
    marker = "cancel-me-Q7Z"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coder_es.cli.main",
            "--workspace",
            str(h.workspace),
            "run",
            "--harness",
            "claude",
            "--yes",
            marker,
        ],
        cwd=h.workspace,
        env=h.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert asked.wait(120), "the harness never made its second request"
        proc.send_signal(getattr(signal, sig))
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert gone(marker, within_s=10), "the harness outlived the cancel"
    assert (h.workspace / "notes.md").exists()  # what it did before the cancel is applied
    assert "Traceback" not in err, err
    # ...and recorded: the write, the cancellation
    sid = h.json_lines(h.cli("sessions", "--json").stdout)[0]["id"]
    tree = json.loads(h.cli("tree", sid, "--json").stdout)
    results = [n for n in tree["nodes"] if n["kind"] == "tool_result"]
    assert results and results[0]["files_changed"] == ["notes.md"], tree
    assert h.cli("verify", sid).returncode == 0


def test_without_network_the_harness_reaches_only_its_recorded_model(henv: HarnessEnv) -> None:
    import sys

    from fake_model import Script

    h = henv
    config = h.home / ".config" / "coder-es"
    config.mkdir(parents=True)
    (config / "config.toml").write_text("[sandbox]\nnetwork = false\n")
    reach = (
        f'{sys.executable} -c "import urllib.request; '
        f"urllib.request.urlopen('{h.model.url}/v1/models', timeout=3)\" "
        "&& echo reached > out.txt || echo blocked > out.txt"
    )
    h.model.script = Script(steps=[("shell", reach)])
    done = h.cli("run", "--harness", "claude", "--yes", "--json", "try the network")
    assert done.returncode == 0, done.stderr
    assert (h.workspace / "out.txt").read_text() == "blocked\n"  # the model itself: unreachable
    assert any(r["method"] == "POST" for r in h.model.requests)  # ...except through the proxy
    assert not any(r["path"] == "/v1/models" for r in h.model.requests)


@pytest.mark.slow
def test_an_acp_agents_questions_are_decided_by_our_rules(henv: HarnessEnv) -> None:
    h = henv
    done = h.cli(
        "run", "--harness", "acp:claude-agent-acp", "--yes", "--deny", "bash", "--json", "go"
    )
    assert done.returncode == 0, done.stderr
    decided = [u for u in h.json_lines(done.stdout) if u["type"] == "permission_decided"]
    assert [(d["tool"], d["decision"], d["decided_by"]) for d in decided] == [
        ("edit", "allow", "rule"),  # the build preset allows edits
        ("bash", "deny", "rule"),  # --deny bash wins over --yes
    ]
    assert (h.workspace / "notes.md").exists()
    assert not (h.workspace / "made.txt").exists()
    exported = h.cli("export", _session_id(h.json_lines(done.stdout)), "--format", "jsonl")
    lines = exported.stdout.splitlines()
    assert sum(1 for line in lines if "PermissionDecided" in line) == 2


def test_claude_codes_prompts_are_decided_by_our_rules(henv: HarnessEnv) -> None:
    h = henv
    done = h.cli("run", "--harness", "claude", "--deny", "bash", "--json", "go")
    assert done.returncode == 0, done.stderr
    decided = [u for u in h.json_lines(done.stdout) if u["type"] == "permission_decided"]
    assert [(d["tool"], d["decision"], d["decided_by"]) for d in decided] == [
        ("edit", "allow", "rule"),  # the build preset allows edits
        ("bash", "deny", "rule"),  # --deny bash
    ], done.stdout
    assert (h.workspace / "notes.md").exists()
    assert not (h.workspace / "made.txt").exists()


@pytest.mark.slow
def test_chat_runs_one_harness_turn_per_line(henv: HarnessEnv) -> None:
    import subprocess
    import sys

    h = henv
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coder_es.cli.main",
            "--workspace",
            str(h.workspace),
            "chat",
            "--harness",
            "claude",
            "--yes",
        ],
        cwd=h.workspace,
        env=h.env,
        input="write the notes\nand again\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("FAKE-ANSWER-7Q") == 2
    assert done.stderr.count("started") == 1 and done.stderr.count("resumed") == 1


def _chat(h: HarnessEnv, kind: str, typed: str) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "coder_es.cli.main",
            "--workspace",
            str(h.workspace),
            "chat",
            "--harness",
            kind,
        ],
        cwd=h.workspace,
        env=h.env,
        input=typed,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("kind", "answer"),
    [
        ("claude", "o"),
        pytest.param("claude", "r", marks=pytest.mark.slow),
        pytest.param("acp:claude-agent-acp", "o", marks=pytest.mark.slow),
    ],
)
def test_chat_asks_the_user_what_no_rule_settles(kind: str, answer: str, henv: HarnessEnv) -> None:
    # The build preset allows everything; a rule of the user's asks for edits.
    h = henv
    config = h.home / ".config" / "coder-es"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[permissions.rules]\nedit = "ask"\n')
    done = _chat(h, kind, f"write the notes and make the file\n{answer}\n")
    assert done.returncode == 0, done.stderr
    assert "permission edit" in done.stderr and "notes.md" in done.stderr, done.stderr
    assert "allow [o]nce, or [r]eject?" in done.stderr
    assert (h.workspace / "made.txt").exists()  # the command: allowed by the preset
    assert (h.workspace / "notes.md").exists() == (answer == "o"), done.stderr
    sid = next(line.split()[1] for line in done.stderr.splitlines() if line.startswith("session "))
    exported = h.cli("export", sid, "--format", "jsonl").stdout
    decided = [json.loads(line) for line in exported.splitlines() if "PermissionDecided" in line]
    by_user = [d for d in decided if '"edit"' in json.dumps(d)]
    assert by_user and '"decided_by": "user"' in json.dumps(by_user[-1]), decided
    assert ('"decision": "allow"' in json.dumps(by_user[-1])) == (answer == "o")


def test_a_coder_es_killed_mid_turn_keeps_the_record_and_applies_nothing(henv: HarnessEnv) -> None:
    # kill -9 of coder-es while a second turn runs: the first turn's record and files stay,
    # nothing of the killed turn is half-applied, the harness dies with it, and the session
    # goes on.
    import signal
    import subprocess
    import sys
    import threading

    from fake_model import Script

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from processes import gone

    h = henv
    first = h.cli("run", "--harness", "claude", "--yes", "--json", "write the notes")
    assert first.returncode == 0, first.stderr
    sid = _session_id(h.json_lines(first.stdout))
    steps = list(h.model.script.steps)
    late = str(h.workspace / "late.txt")
    h.model.script = Script(steps=[*steps, ("write", late, "late\n"), ("shell", "echo x > x.txt")])
    asked = threading.Event()
    release = threading.Event()

    def hold(count: int, body: dict[str, Any]) -> None:
        if "late.txt" in json.dumps(body.get("messages", [])[-1:]):  # the write is done
            asked.set()
            release.wait(60)

    h.model.on_request = hold
    marker = "killed-turn-K9Q"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coder_es.cli.main",
            "--workspace",
            str(h.workspace),
            "run",
            "--session",
            sid,
            "--yes",
            marker,
        ],
        cwd=h.workspace,
        env=h.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert asked.wait(120), "the harness never wrote late.txt"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert gone(marker, within_s=10), "the harness outlived coder-es"
    assert not (h.workspace / "late.txt").exists()  # the killed turn: nothing applied
    assert (h.workspace / "notes.md").exists() and (h.workspace / "made.txt").exists()
    assert h.cli("verify", sid).returncode == 0
    tree = json.loads(h.cli("tree", sid, "--json").stdout)
    assert sum(1 for n in tree["nodes"] if n["kind"] == "tool_result") == 2

    h.model.on_request = None
    h.model.script = Script(steps=steps)
    again = h.cli("run", "--session", sid, "--yes", "--json", "and now?")
    assert again.returncode == 0, again.stderr
    assert not (h.workspace / "late.txt").exists()
    assert h.cli("verify", sid).returncode == 0


def test_chat_asks_in_a_real_terminal(henv: HarnessEnv, tmp_path: Path) -> None:
    # The same question at a terminal (tmux): shown, answered with a key, the turn goes on.
    import shlex
    import shutil
    import subprocess
    import sys
    import time

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (Debian package 'tmux')")
    h = henv
    config = h.home / ".config" / "coder-es"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[permissions.rules]\nedit = "ask"\n')
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in h.env.items() if k.isidentifier())
    cli = shlex.join([sys.executable, "-m", "coder_es.cli.main", "chat", "--harness", "claude"])
    command = f"cd {shlex.quote(str(h.workspace))} && env {exports} {cli}; echo EXITED $?; sleep 60"
    tmux = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    subprocess.run([*tmux, "new-session", "-d", "-x", "200", "-y", "50", command], check=True)

    def wait(text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = subprocess.run(
                [*tmux, "capture-pane", "-p", "-J", "-S", "-200"], capture_output=True, text=True
            ).stdout
            if text in screen:
                return screen
            time.sleep(0.2)
        pytest.fail(f"waited for {text!r}; the terminal shows:\n{screen}")

    try:
        wait(">")
        subprocess.run([*tmux, "send-keys", "write the notes and make the file", "Enter"])
        asked = wait("allow [o]nce, or [r]eject?")
        assert "permission edit" in asked and "notes.md" in asked
        assert not (h.workspace / "notes.md").exists()
        subprocess.run([*tmux, "send-keys", "o", "Enter"])
        wait("FAKE-ANSWER-7Q")
        subprocess.run([*tmux, "send-keys", "/exit", "Enter"])
        done = wait("EXITED")
        assert "EXITED 0" in done and "by user" in done, done
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert (h.workspace / "notes.md").exists() and (h.workspace / "made.txt").exists()


def test_a_read_only_agent_reaches_its_model_without_network_and_changes_nothing(
    henv: HarnessEnv,
) -> None:
    # plan: no network for its commands by default (as for bash), so the model is reached
    # through the route into the sandbox; the transaction is dropped.
    h = henv
    done = h.cli("run", "--harness", "claude", "--agent", "plan", "--yes", "--json", "look")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert h.json_lines(done.stdout)[-1]["reason"] == "end_turn"
    assert "FAKE-ANSWER-7Q" in done.stdout
    assert not (h.workspace / "notes.md").exists() and not (h.workspace / "made.txt").exists()
    assert sum(1 for r in h.model.requests if r["method"] == "POST") >= 2
