"""What a model request is made of, and recording what was sent.

The request itself is built by the bounded-context projection (``projections.context``) from the
events on the path root -> head; this module holds its settings (``RequestSettings``) and the
recorder.

Recording (``RequestRecorder``): ``ModelResponded.request_digest`` names a *request manifest*
blob. Storing the whole canonical request per step would cost O(history) time and space every
step, so a manifest stores the request as a delta against the previous one recorded by the same
loop: ``{"base": <previous manifest>, "keep": k, "append": [messages]}`` means "the first k
messages of the base request, then these". A step adds one small blob (its new messages,
itself stored as a delta against the previous manifest's bytes);
the system prompt and the tool definitions are blobs of their own, stored once. The first
request of a process (and one after the head moved elsewhere) has no base and lists every
message. ``expand_request(blobs, digest)`` rebuilds exactly ``canonical_request(request)``, so
replay can compare requests and diff them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coder_es.domain.chain import canonical_json
from coder_es.providers.types import ModelRequest, canonical_message, canonical_tool
from coder_es.store.blobs import BlobStore

MANIFEST_FORMAT = "coder-es/request/v1"


@dataclass(frozen=True)
class RequestSettings:
    """What a request holds besides the messages."""

    model: str
    system: str
    tools: list[dict[str, Any]]
    max_tokens: int = 8192
    temperature: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


class RequestRecorder:
    """Stores request manifests (see the module docstring) and returns their digests."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self._previous: tuple[str, int] | None = None  # (manifest digest, message count)
        # The last manifest stored with a base and the last one listing every message: the
        # delta base for the next one of the same shape (see ``record``).
        self._like: dict[bool, str] = {}
        # The system prompt and tool definitions are the same objects step after step.
        self._cache: dict[str, tuple[Any, str]] = {}

    def _put_cached(self, key: str, source: Any, canonical: Callable[[Any], Any]) -> str:
        cached = self._cache.get(key)
        if cached is not None and (cached[0] is source or cached[0] == source):
            return cached[1]
        digest = self.blobs.put(canonical_json(canonical(source)).encode())
        self._cache[key] = (source, digest)
        return digest

    def record(self, request: ModelRequest, stable: int = 0) -> str:
        """Store ``request``; its first ``stable`` messages equal the previous request's."""
        messages = request.messages
        base, keep = None, 0
        if self._previous is not None and stable > 0:
            base, keep = self._previous[0], min(stable, self._previous[1])
        manifest = {
            "format": MANIFEST_FORMAT,
            "model": request.model,
            "system": self._put_cached("system", request.system, lambda s: s),
            "tools": self._put_cached("tools", request.tools, _canonical_tools),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stop_sequences": list(request.stop_sequences),
            "extra_body": request.extra_body,
            "messages": {
                "base": base,
                "keep": keep,
                "append": [canonical_message(m) for m in messages[keep:]],
            },
        }
        # Consecutive manifests share most of their bytes (the context's trailing "current
        # contents" block is re-sent every step with one line changed): stored as a delta
        # against the previous manifest of the same shape, a step costs its changes rather than
        # a compressed copy of that block (500 one-line edits: ~2 MB less). Same shape: once
        # the context condenses its history, a manifest lists every message (its condensed
        # head changed) or, when the head held still, only the new ones against the previous
        # manifest; the two alternate, and a whole listing stored as a delta of a short one
        # repeats every message it lists (the first read's 100 KB: ~16 KB a time, 190 KB in
        # 500 edits; issue 36, item 6).
        whole = base is None
        like = self._like.get(whole)
        if like is None and self._previous is not None:
            like = self._previous[0]
        digest = self.blobs.put(canonical_json(manifest).encode(), like=like)
        self._previous = (digest, len(messages))
        self._like[whole] = digest
        return digest


def _canonical_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [canonical_tool(t) for t in tools]


def _load(blobs: BlobStore, digest: str) -> Any:
    import json

    return json.loads(blobs.get(digest))


def expand_request(blobs: BlobStore, digest: str) -> dict[str, Any]:
    """The canonical request (``canonical_request``'s form) a recorded manifest stands for."""
    manifest = _load(blobs, digest)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        msg = f"blob {digest} is not a {MANIFEST_FORMAT} request manifest"
        raise ValueError(msg)
    chain: list[dict[str, Any]] = []
    part: dict[str, Any] | None = manifest["messages"]
    while part is not None:
        chain.append(part)
        base = part["base"]
        part = _load(blobs, base)["messages"] if base is not None and part["keep"] else None
    messages: list[dict[str, Any]] = []
    for part in reversed(chain):
        messages = [*messages[: part["keep"]], *part["append"]]
    return {
        "model": manifest["model"],
        "system": _load(blobs, manifest["system"]),
        "messages": messages,
        "tools": _load(blobs, manifest["tools"]),
        "max_tokens": manifest["max_tokens"],
        "temperature": manifest["temperature"],
        "stop_sequences": manifest["stop_sequences"],
        "extra_body": manifest["extra_body"],
    }
