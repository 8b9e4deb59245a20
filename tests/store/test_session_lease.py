"""One writer per session (issue 18.1): the lease on every backend, across processes, kill -9."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from backends import REPO, cli_store_args, cli_store_env

from coder_es.application import CoderApp
from coder_es.errors import SessionBusyError
from coder_es.store.config import StoreConfig

# A process that takes a session's lease, says so on stdout, then waits to be killed.
HOLDER = """
import sys, time
from coder_es.store.config import StoreConfig
import json
cfg = json.loads(sys.argv[1])
config = StoreConfig(backend=cfg["backend"], path=__import__("pathlib").Path(cfg["path"]),
                     extra=cfg["extra"])
leases = config.open_lease_store()
lease = leases.acquire(sys.argv[2], "test holder")
print("held", flush=True)
time.sleep(600)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    return env


def hold_in_child(config: StoreConfig, session: str) -> subprocess.Popen[str]:
    cfg = {"backend": config.backend, "path": str(config.path), "extra": dict(config.extra)}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, json.dumps(cfg), session],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_second_holder_is_refused_at_once_and_told_who_holds(store_config: StoreConfig) -> None:
    leases = store_config.open_lease_store()
    # A second opening of the store in this process (another client); popo stores are each
    # their own store, so there the second client shares the one store.
    other = leases if store_config.backend == "popo" else store_config.open_lease_store()
    sid = str(uuid.uuid4())
    try:
        with leases.hold(sid, "turn") as lease:
            started = time.monotonic()
            with pytest.raises(SessionBusyError) as busy:
                other.acquire(sid)
            assert time.monotonic() - started < 1.0
            message = str(busy.value)
            assert message.startswith(f"session {sid} is busy (pid {os.getpid()} on host ")
            assert socket.gethostname() in message and " since " in message
            assert lease.holder.pid == os.getpid()
            # Another session is not affected.
            other.acquire(str(uuid.uuid4())).release()
        # Released: the next one gets it.
        other.acquire(sid).release()
        other.acquire(sid).release()
    finally:
        leases.close()
        other.close()


def test_another_process_is_refused_and_kill_9_frees_the_lease(
    persistent_store_config: StoreConfig,
) -> None:
    config = persistent_store_config
    sid = str(uuid.uuid4())
    child = hold_in_child(config, sid)
    leases = config.open_lease_store()
    try:
        with pytest.raises(SessionBusyError, match=rf"\(pid {child.pid} on host "):
            leases.acquire(sid)
        assert leases.holder(sid) is not None
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 10
        while True:
            try:
                leases.acquire(sid).release()
                break
            except SessionBusyError:
                assert time.monotonic() < deadline, "a dead holder's lease was never freed"
                time.sleep(0.01)
        took = 10 - (deadline - time.monotonic())
        assert took < 5
        assert leases.holder(sid) is None  # free again, whatever the lease file still says
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        leases.close()


# ---------------------------------------------------------------------- the reproduction

# A's turn: a bash call that asks (it writes outside the workspace), so A waits for the answer
# mid-turn for as long as the test needs; then the final reply.
A_TURNS = [
    {"blocks": [{"type": "tool_use", "name": "bash", "input": {"command": "touch ../made-by-a"}}]},
    {"blocks": [{"type": "text", "text": "the final reply of A"}]},
]


def _cli(ws: Path, config: StoreConfig, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "coder_es.cli.main",
        "--workspace",
        str(ws),
        *cli_store_args(config),
        *args,
    ]


def _updates_until(stream: Any, wanted: str) -> None:
    for line in stream:
        # The chat's own prompts ("> ", "allow [o]nce...") share the line with the JSON.
        if "{" in line and json.loads(line[line.index("{") :])["type"] == wanted:
            return
    raise AssertionError(f"the stream ended before {wanted!r}")


@pytest.fixture
def lmdb_or_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> StoreConfig:
    return StoreConfig(backend=request.param, path=tmp_path / "store")


@pytest.mark.parametrize("lmdb_or_sqlite", ["lmdb", "sqlite"], indirect=True)
def test_second_command_on_a_running_session_fails_busy_and_the_turn_loses_nothing(
    tmp_path: Path, lmdb_or_sqlite: StoreConfig
) -> None:
    config = lmdb_or_sqlite
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {**_env(), **cli_store_env(config)}
    # The command writes beside the workspace: a place the sandbox (an allow-list) lets it write
    # only when the user's config names it.
    user_config = Path(env["XDG_CONFIG_HOME"]) / "coder-es" / "config.toml"
    user_config.parent.mkdir(parents=True, exist_ok=True)
    user_config.write_text(f"[sandbox]\nwritable = [{json.dumps(str(tmp_path))}]\n")
    quick = tmp_path / "quick.json"
    quick.write_text(json.dumps({"turns": [{"blocks": [{"type": "text", "text": "hi"}]}]}))
    first = subprocess.run(
        _cli(ws, config, "run", "hello", "--script", str(quick), "--json"),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert first.returncode == 0, first.stderr
    sid = json.loads(first.stdout.splitlines()[0])["session_id"]
    script_a = tmp_path / "a.json"
    script_a.write_text(json.dumps({"turns": A_TURNS}))
    chat = ["chat", "--session", sid, "--agent", "build", "--script", str(script_a), "--json"]
    a = subprocess.Popen(
        _cli(ws, config, *chat),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert a.stdin is not None and a.stdout is not None
        a.stdin.write("again A\n")
        a.stdin.flush()
        _updates_until(a.stdout, "permission_required")  # A is mid-turn, waiting for us
        # Every command that writes to the session fails at once, naming the holder.
        attempts = [
            ("run", "again B", "--session", sid, "--script", str(quick)),
            ("rewind", sid, "2"),
        ]
        if config.backend == "lmdb":  # the same code path on both: spare the slow machine
            attempts += [
                ("checkout", sid, "2"),
                ("fork", sid, "2"),
                ("label", sid, "2", "x"),
                ("chat", "--session", sid, "--script", str(quick)),  # at once, not at a message
            ]
        for attempt in attempts:
            b = subprocess.run(
                _cli(ws, config, *attempt),
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            assert b.returncode == 1, (attempt, b.stderr)
            assert f"session {sid} is busy (pid {a.pid} on host " in b.stderr, b.stderr
            assert "Traceback" not in b.stderr
        a.stdin.write("o\n")  # allow A's command once; A's turn goes on to its final reply
        a.stdin.flush()
        _updates_until(a.stdout, "turn_ended")
        a.stdin.write("/exit\n")
        a.stdin.flush()
        assert a.wait(timeout=60) == 0, a.stderr.read() if a.stderr else ""
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert (ws.parent / "made-by-a").exists()
    app = CoderApp(config)
    try:
        events = app.session_events(uuid.UUID(sid))
        kinds = [type(e).__name__ for e in events]
        # A's turn is whole, B's message is nowhere, and no command slipped in meanwhile.
        messages = [e.content[0]["text"] for e in events if type(e).__name__ == "UserMessageAdded"]
        assert messages == ["hello", "again A"]
        replies = [e for e in events if type(e).__name__ == "ModelResponded"]
        assert replies[-1].blocks[0]["text"] == "the final reply of A"
        assert "HeadMoved" not in kinds and "NodeLabelled" not in kinds
        assert len(app.list_sessions()) == 1  # no fork happened
    finally:
        app.close()
    # Released at the end: the next command goes through.
    again = subprocess.run(
        _cli(ws, config, "label", sid, "2", "start"), capture_output=True, text=True, env=env
    )
    assert again.returncode == 0, again.stderr


def test_a_client_handle_fails_busy_during_a_turn_and_follows_it_afterwards(
    tmp_path: Path,
) -> None:
    """What the ACP agent, the WebSocket server and fleet workers rely on: the service API."""
    import asyncio

    from coder_es.agent import updates as up
    from coder_es.permissions.policy import PermissionAnswer
    from tests.agent.agent_helpers import make_harness, text, tool, turn

    h = make_harness(tmp_path, "sqlite")
    first = h.start(
        [turn(tool("bash", command="touch made-by-a")), turn(text("done A"))], agent="plan"
    )
    other = h.service([turn(text("reply to B"))])

    async def go() -> None:
        second = await other.open_session(first.id)
        async for update in first.send("go"):
            if isinstance(update, up.PermissionRequired):  # A's turn waits for its answer
                with pytest.raises(SessionBusyError, match=rf"\(pid {os.getpid()} on host "):
                    async for _ in second.send("interloper"):
                        pass
                await first.answer(update.tool_use_id, PermissionAnswer.allow_once())
        # Once A's turn ended, B's next turn starts from A's events instead of colliding.
        async for _ in second.send("after A"):
            pass

    asyncio.run(go())
    events = h.events(first.id)
    said = [e.content[0]["text"] for e in events if type(e).__name__ == "UserMessageAdded"]
    assert said == ["go", "after A"]
    replies = [e.blocks[0] for e in events if type(e).__name__ == "ModelResponded"]
    assert [r.get("text") for r in replies] == [None, "done A", "reply to B"]
    h.app.close()


def test_a_killed_holder_does_not_keep_the_session_from_the_next_command(tmp_path: Path) -> None:
    pytest.importorskip("lmdb")
    config = StoreConfig(backend="lmdb", path=tmp_path / "store")
    app = CoderApp(config)
    try:
        session = app.start_session(workspace=str(tmp_path))
        session.add_user_message("hello")
        app.save(session)
        sid = str(session.id)
    finally:
        app.close()
    holder = hold_in_child(config, sid)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    done = subprocess.run(
        _cli(tmp_path, config, "label", sid, "2", "start"),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
