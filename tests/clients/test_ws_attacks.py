"""``coder-es serve`` under the attacks of issue 17 (point 1), with a real ``websockets`` client
against a real server process: only a client holding the token, from no browser origin or an
allowed one, gets in; limits hold; bad frames get clean errors."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import websockets
from client_helpers import make_workspace, run, serve_process, stored_events, user_config_file
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

TURNS: list[dict[str, Any]] = [
    {
        "blocks": [
            {"type": "tool_use", "name": "bash", "input": {"command": "id > WS_PWNED"}},
        ]
    },
    {"blocks": [{"type": "text", "text": "done"}]},
]


async def recv(ws: ClientConnection) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), 20))


def split(url: str) -> tuple[str, str]:
    """The address and the token of the URL the server printed."""
    found = re.search(r"token=([^&]+)", url)
    assert found, f"the server must print its URL with the token: {url}"
    return url.split("?")[0], found.group(1)


async def refused_with(url: str, **kwargs: Any) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with websockets.connect(url, **kwargs):
            pass
    return info.value.response.status_code


def test_only_the_token_holder_from_an_allowed_origin_gets_in(tmp_path: Path) -> None:
    config = '[serve]\nallowed_origins = ["https://ide.example"]\n'
    ws_dir = make_workspace(tmp_path, config, TURNS)
    # The project config lists an origin: it only applies once the workspace is trusted.
    user_config = tmp_path / "xdg" / "coder-es" / "config.toml"
    user_config.parent.mkdir(parents=True)
    user_config.write_text(config)

    async def scenario() -> str:
        async with serve_process(ws_dir, tmp_path) as (url, _proc):
            address, token = split(url)
            assert len(token) >= 32  # secrets.token_urlsafe(32): 256 bits, fresh each start
            evil = {"origin": "https://evil.example"}
            # The attack: a web page's connection, no token, asks for a turn.
            assert await refused_with(address, **evil) == 403
            assert await refused_with(f"{address}?token={token}", **evil) == 403
            assert await refused_with(address, origin="null") == 403
            assert await refused_with(address) == 401
            assert await refused_with(f"{address}?token={token[:-1]}") == 401
            assert await refused_with(f"{address}?token=") == 401
            bad_bearer = {"Authorization": f"Bearer {token}x"}
            assert await refused_with(address, additional_headers=bad_bearer) == 401
            # A program (no Origin) with the token, as a header or a query parameter.
            bearer = {"Authorization": f"bearer {token}"}
            async with websockets.connect(address, additional_headers=bearer) as ws:
                hello = await recv(ws)
                sid = str(hello["session_id"])
            # Session ids cannot be probed by prefix without the token.
            for prefix in (sid[:1], sid[:4], sid):
                assert await refused_with(f"{address}?session={prefix}") == 401
                assert await refused_with(f"{address}?session={prefix}", **evil) == 403
            async with websockets.connect(url, origin="https://ide.example") as ws:
                assert (await recv(ws))["type"] == "connected"
            return sid

    sid = run(scenario())
    assert not (ws_dir / "WS_PWNED").exists()
    # Nothing the refused connections did reached the session.
    assert [type(e).__name__ for e in stored_events(ws_dir, sid)] == ["Started"]


LIMITS = "[serve]\nmax_sessions_per_connection = 3\nmax_messages_per_second = 20\n"


async def _flood_connections(url: str, count: int) -> tuple[int, int]:
    """Open ``count`` connections at once; (accepted and greeted, refused)."""

    async def one() -> tuple[ClientConnection | None, bool]:
        try:
            ws = await websockets.connect(url, open_timeout=60)
        except (InvalidStatus, OSError, TimeoutError):
            return None, False
        try:
            return ws, (await recv(ws))["type"] == "connected"
        except (ConnectionClosed, TimeoutError):
            await ws.close()
            return None, False

    results = await asyncio.gather(*(one() for _ in range(count)))
    accepted = sum(1 for ws, ok in results if ok)
    for ws, _ in results:
        if ws is not None:
            await ws.close()
    return accepted, count - accepted


def test_limits_hold_and_bad_frames_get_clean_errors(tmp_path: Path) -> None:
    # Serve's limits from a project config wait for trust (an allow-list: they are not known
    # to only tighten): the user's config sets them.
    ws_dir = make_workspace(tmp_path, "", TURNS)
    user_config_file(tmp_path, LIMITS)

    async def scenario() -> str:
        async with serve_process(ws_dir, tmp_path) as (url, proc):
            accepted, refused = await _flood_connections(url, 300)
            assert accepted <= 64 and refused >= 300 - 64 and accepted > 0

            async with websockets.connect(url, max_size=None) as ws:
                await recv(ws)
                # 200k nested brackets: a clean bad_request, and the connection stays usable.
                await ws.send("[" * 200_000)
                nested = await recv(ws)
                assert nested["type"] == "error" and nested["code"] == "bad_request"
                assert "nested too deeply" in nested["message"]
                # A request refused by validation still names itself.
                await ws.send(json.dumps({"type": "send_message", "id": "m1"}))
                refused_msg = await recv(ws)
                assert refused_msg["code"] == "bad_request" and refused_msg["re"] == "m1"
                await ws.send(json.dumps({"type": "launch", "id": 9}))
                assert (await recv(ws))["re"] == 9
                # Sessions created per connection: the one it opened, then two forks.
                codes = []
                for i in range(3):
                    await ws.send(json.dumps({"type": "fork", "new_session": True, "id": i}))
                    reply = await recv(ws)
                    codes.append(reply.get("code", reply["type"]))
                assert codes == ["moved", "moved", "limit"]
                # Message rate: a burst beyond the allowance is dropped with rate_limited.
                await asyncio.sleep(1.2)
                for i in range(60):
                    await ws.send(json.dumps({"type": "get_state", "id": i}))
                replies = [await recv(ws) for _ in range(60)]
                limited = [r for r in replies if r.get("code") == "rate_limited"]
                assert 30 <= len(limited) <= 45, len(limited)
                assert {r["re"] for r in limited} <= set(range(60))

            # 15 MiB in one frame: the server closes with 1009 before buffering it.
            async with websockets.connect(url, max_size=None) as ws:
                await recv(ws)
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.send("x" * (15 << 20))
                    await recv(ws)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009

            # The server is still serving.
            async with websockets.connect(url) as ws:
                hello = await recv(ws)
            proc.terminate()
            assert proc.stderr is not None
            err = (await proc.stderr.read()).decode()
            assert "Traceback" not in err and "RecursionError" not in err, err[-3000:]
            return str(hello["session_id"])

    run(scenario(), timeout=180)
