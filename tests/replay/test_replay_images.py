"""A session whose user message carries an image: the cassette carries the image's blob, the
replay sends the same image, and the exports name it."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from uuid import UUID

import pytest
from replay_helpers import text

from coder_es.application import CoderApp
from coder_es.audit.export import ExportOptions
from coder_es.audit.export import export_session as export_session_audit
from coder_es.errors import UsageError
from coder_es.providers.images import ImageError
from coder_es.providers.scripted import ScriptedProvider
from coder_es.providers.types import ModelRequest
from coder_es.service.api import AgentService, SessionOptions
from replay.cassette import CassetteError, dumps, export_session, loads
from replay.engine import ReplayOptions, replay_cassette

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))
from test_images import PNG, png

GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,"


def record(
    root: Path, images: list[bytes | tuple[str, bytes]], message: str = "What is this?"
) -> tuple[CoderApp, str, list[ModelRequest]]:
    app = CoderApp()
    provider = ScriptedProvider([{"blocks": [text("A grey pixel.")]}])
    service = AgentService(app, root, provider_factory=lambda _n, _m: provider)

    async def go() -> str:
        handle = await service.create_session(SessionOptions())
        async for _update in handle.send(message, images=images):
            pass
        await handle.close()
        return handle.id

    sid = asyncio.run(go())
    return app, sid, provider.requests


def test_an_image_message_is_stored_as_a_blob_sent_with_its_bytes_and_replayed(
    tmp_path: Path,
) -> None:
    app, sid, requests = record(tmp_path, [PNG, ("image/jpeg", GIF)])  # declared type not trusted
    user = next(e for e in app.session_events(UUID(sid)) if type(e).__name__ == "UserMessageAdded")
    stored_text, first, second = user.content
    assert stored_text == {"type": "text", "text": "What is this?"}
    assert first["media_type"] == "image/png" and first["size"] == len(PNG)
    assert second["media_type"] == "image/gif"  # sniffed from the bytes
    assert "data" not in first  # the event names the blob; the bytes are not in the log
    assert app.blobs.get(first["blob"]) == PNG
    sent = requests[0].messages[0]["content"]
    assert sent[1]["data"] == base64.b64encode(PNG).decode()

    cassette = loads(dumps(export_session(app, sid, workspace=tmp_path)))
    assert cassette.blob(first["blob"]) == PNG and cassette.blob(second["blob"]) == GIF
    report = replay_cassette(cassette, ReplayOptions(mode="verify"))
    assert report.ok, report
    assert report.model_calls == 1


def test_a_message_of_only_an_image_has_no_empty_text_block(tmp_path: Path) -> None:
    app, sid, requests = record(tmp_path, [PNG], message="")
    user = next(e for e in app.session_events(UUID(sid)) if type(e).__name__ == "UserMessageAdded")
    assert [b["type"] for b in user.content] == ["image"]
    assert [b["type"] for b in requests[0].messages[0]["content"]] == ["image"]
    report = replay_cassette(export_session(app, sid, workspace=tmp_path), ReplayOptions())
    assert report.ok, report


def test_a_cassette_whose_image_was_swapped_is_refused(tmp_path: Path) -> None:
    app, sid, _ = record(tmp_path, [PNG])
    doc = dumps(export_session(app, sid, workspace=tmp_path))
    swapped = doc.replace(base64.b64encode(PNG).decode(), base64.b64encode(png(2, 2)).decode())
    assert swapped != doc
    with pytest.raises(CassetteError, match="does not match its digest"):
        loads(swapped)


def export_audit(app: CoderApp, sid: str, fmt: str) -> str:
    return export_session_audit(app, sid, ExportOptions(format=fmt)).decode()


def test_exports_name_the_image_blob(tmp_path: Path) -> None:
    app, sid, _ = record(tmp_path, [PNG])
    digest = next(
        e for e in app.session_events(UUID(sid)) if type(e).__name__ == "UserMessageAdded"
    ).content[1]["blob"]
    md = export_audit(app, sid, "md")
    assert f"[image image/png, {len(PNG)} bytes, blob sha256:{digest}]" in md
    html = export_audit(app, sid, "html")
    assert f"blob sha256:{digest}" in html
    lines = [json.loads(line) for line in export_audit(app, sid, "jsonl").splitlines()]
    assert any(digest in json.dumps(line) for line in lines)


def test_a_non_image_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    app = CoderApp()
    service = AgentService(app, tmp_path, provider_factory=lambda _n, _m: ScriptedProvider([]))

    async def go() -> None:
        handle = await service.create_session(SessionOptions())
        try:
            with pytest.raises(ImageError, match="image 1: not a PNG"):
                handle.send("look", images=[b"%PDF-1.7"])
            with pytest.raises(UsageError, match="empty"):
                handle.send("  ")
        finally:
            await handle.close()

    asyncio.run(go())
