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
