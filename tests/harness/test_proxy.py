"""The recording proxy in front of the fake model: only its harness gets through, answers are
streamed back byte for byte, credentials are never recorded, an unreachable model is bounded."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import httpx
from fake_model import FakeModel, standard_script

from coder_es.harness.proxy import CONNECT_FAILURES_LIMIT, ForwardUpstream, RecordingProxy

BODY = {
    "model": "claude-fake",
    "stream": True,
    "max_tokens": 10,
    "tools": [{"name": "Bash"}, {"name": "Write"}],
    "messages": [{"role": "user", "content": "hi"}],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_proxy_forwards_its_harness_only_and_records_no_credential(tmp_path: Path) -> None:
    with FakeModel(standard_script(str(tmp_path))) as model:

        async def scenario() -> None:
            proxy = await RecordingProxy(ForwardUpstream(model.url)).start()
            try:
                async with httpx.AsyncClient() as client:
                    headers = {
                        "x-api-key": "sk-ant-secret-1",
                        "authorization": "Bearer sk-2",
                        "anthropic-version": "2023-06-01",
                    }
                    direct = await client.post(
                        f"{model.url}/v1/messages", json=BODY, headers=headers
                    )
                    seen = len(model.requests)
                    via = await client.post(
                        f"{proxy.base_url}/v1/messages?beta=true&key=AIza-secret",
                        json=BODY,
                        headers=headers,
                    )
                    assert via.status_code == 200
                    # the same SSE bytes (message ids count the requests: compare the rest)
                    assert via.text.replace("0002", "0001") == direct.text
                    stranger = await client.post(
                        f"http://127.0.0.1:{proxy.port}/v1/messages", json=BODY
                    )
                    guess = await client.post(
                        f"http://127.0.0.1:{proxy.port}/x{proxy.token}/v1/messages", json=BODY
                    )
                    assert stranger.status_code == guess.status_code == 403
                    assert len(model.requests) == seen + 1  # the refused ones never left
                    assert model.requests[-1]["path"] == "/v1/messages?beta=true&key=AIza-secret"
            finally:
                await proxy.aclose()
            (exchange,) = proxy.exchanges
            recorded = (
                json.dumps([exchange.path, exchange.request_headers, exchange.response_headers])
                + exchange.request_body.decode()
            )
            assert "secret" not in recorded and "sk-2" not in recorded
            assert exchange.path == "/v1/messages?beta=true"
            assert exchange.request_headers["anthropic-version"] == "2023-06-01"
            assert b"message_stop" in exchange.response_body and exchange.status == 200

        asyncio.run(scenario())


def test_an_unreachable_model_is_reported_after_a_bounded_number_of_tries() -> None:
    async def scenario() -> None:
        dead = f"http://127.0.0.1:{_free_port()}"
        proxy = await RecordingProxy(ForwardUpstream(dead, connect_timeout_s=2)).start()
        try:
            async with httpx.AsyncClient() as client:
                for _ in range(CONNECT_FAILURES_LIMIT):
                    answer = await client.post(f"{proxy.base_url}/v1/messages", json=BODY)
                    assert answer.status_code == 502
            assert proxy.unreachable.is_set()
            assert "cannot be reached" in proxy.unreachable_reason
        finally:
            await proxy.aclose()

    asyncio.run(scenario())


def test_an_endpoint_that_drops_every_connection_is_reported_after_a_bounded_number() -> None:
    # It accepts and closes at once: each request ends before a status line (what a harness
    # shows as ECONNRESET and retries for minutes).
    async def scenario() -> None:
        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)
            writer.close()

        dropper = await asyncio.start_server(drop, "127.0.0.1", 0)
        port = dropper.sockets[0].getsockname()[1]
        proxy = await RecordingProxy(ForwardUpstream(f"http://127.0.0.1:{port}")).start()
        try:
            async with httpx.AsyncClient() as client:
                for i in range(CONNECT_FAILURES_LIMIT):
                    assert not proxy.unreachable.is_set(), i
                    answer = await client.post(f"{proxy.base_url}/v1/messages", json=BODY)
                    assert answer.status_code == 502
            assert proxy.unreachable.is_set()
            assert f"127.0.0.1:{port} gives no answer" in proxy.unreachable_reason
        finally:
            await proxy.aclose()
            dropper.close()

    asyncio.run(scenario())


def test_a_broken_model_route_in_the_sandbox_is_one_line_at_once(tmp_path: Path) -> None:
    # Without network the harness reaches its proxy through the forwarder (netns.py): a socket
    # it cannot reach stops the harness before it starts, with one line, not minutes of
    # reset connections (issue 31: the socket was under the sandbox's private /tmp).
    import subprocess
    import time

    from coder_es.harness.netns import forwarded

    marker = tmp_path / "started"
    argv = forwarded(["touch", str(marker)], str(tmp_path / "gone.sock"), _free_port())
    t = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 125
    assert done.stderr.strip().splitlines() == [
        f"coder-es: the model route in the sandbox is broken ({tmp_path / 'gone.sock'}: "
        "No such file or directory)"
    ]
    assert not marker.exists() and time.monotonic() - t < 10


def test_the_forwarder_relays_to_the_proxy_socket(tmp_path: Path) -> None:
    import subprocess
    import sys

    from coder_es.harness.netns import forwarded

    with FakeModel(standard_script(str(tmp_path))) as model:

        async def scenario() -> None:
            proxy = await RecordingProxy(ForwardUpstream(model.url)).start()
            sock = str(tmp_path / "proxy.sock")
            await proxy.listen_unix(sock)
            port = _free_port()
            fetch = (
                "import urllib.request, sys; "
                f"r = urllib.request.urlopen('http://127.0.0.1:{port}/{proxy.token}/v1/models', "
                "timeout=20); print(r.status)"
            )
            try:
                # The forwarder binds the port (here the host's loopback) and relays to the
                # socket; its child fetches through it.
                done = await asyncio.create_subprocess_exec(
                    *forwarded(
                        [sys.executable, "-c", fetch],
                        sock,
                        port,
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                out, err = await asyncio.wait_for(done.communicate(), 60)
                assert done.returncode == 0, err
                assert out.decode().strip() == "200"
            finally:
                await proxy.aclose()
            assert [x.path for x in proxy.exchanges] == ["/v1/models"]

        asyncio.run(scenario())
