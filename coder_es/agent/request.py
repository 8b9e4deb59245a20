"""Building the next model request from the session's events, and recording what was sent.

The request is a pure function of the events on the path root -> head (plus the recorded system
prompt, the tool definitions and the model settings). Issue 9 replaces this with a bounded-context
projection; everything about turning events into messages lives in this module so it can be
swapped.

Incremental: the builder folds each event once into a node table, and keeps the messages of the
last path it built. When the new head descends from that path (the usual case: one more response,
a few more tool results) only the new nodes are appended; a moved head (checkout, fork) rebuilds
the path once. Consecutive messages of the same role are merged (tool results of one response
become one user message; a user message after an unanswered one joins it).

Recording (``RequestRecorder``): ``ModelResponded.request_digest`` names a *request manifest*
blob. Storing the whole canonical request per step would cost O(history) time and space every
step, so a manifest stores the request as a delta against the previous one recorded by the same
loop: ``{"base": <previous manifest>, "keep": k, "append": [messages]}`` means "the first k
messages of the base request, then these". A step adds one small blob (its new messages);
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
from coder_es.domain.session import Session
from coder_es.providers.types import Message, ModelRequest
from coder_es.store.blobs import BlobStore

MANIFEST_FORMAT = "coder-es/request/v1"
SUMMARY_PREFIX = "Summary of the conversation so far:\n"


@dataclass
class _Node:
    parent: str | None
    depth: int
    role: str
    blocks: list[dict[str, Any]]
    resets: bool = False  # a summary: the messages before it are replaced by it


@dataclass(frozen=True)
class RequestSettings:
    """What a request holds besides the messages."""

    model: str
    system: str
    tools: list[dict[str, Any]]
    max_tokens: int = 8192
    temperature: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


def _strip(value: Any) -> Any:
    # As canonical_request: cache_control is transport detail, not content.
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def canonical_message(message: Message) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}] if content else []
    return {"role": message["role"], "content": _strip(list(content))}


class MessageBuilder:
    """Path messages for any head, maintained incrementally from the session's events."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._head: str | None = None
        self._messages: list[Message] = []
        # How many leading messages are unchanged since the last ``take_stable`` (for deltas).
        self._stable = 0
        self.full_rebuilds = 0

    def apply(self, event: Any) -> None:
        node = str(event.originator_version)
        kind = type(event)
        if kind is Session.UserMessageAdded:
            self._add(node, event.parent, "user", list(event.content))
        elif kind is Session.ModelResponded:
            self._add(node, event.parent, "assistant", list(event.blocks))
        elif kind is Session.ToolCallCompleted:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": event.tool_use_id,
                "content": event.output,
            }
            if event.is_error:
                block["is_error"] = True
            self._add(node, event.parent, "user", [block])
        elif kind is Session.ContextCompacted:
            text = {"type": "text", "text": SUMMARY_PREFIX + event.summary}
            self._add(node, event.parent, "user", [text], resets=True)

    def _add(
        self,
        node: str,
        parent: str | None,
        role: str,
        blocks: list[dict[str, Any]],
        resets: bool = False,
    ) -> None:
        pnode = self._nodes.get(parent) if parent is not None else None
        depth = pnode.depth + 1 if pnode is not None else 0
        self._nodes[node] = _Node(parent, depth, role, blocks, resets)

    def messages(self, head: str | None) -> list[Message]:
        """The messages on the path to ``head`` (the builder's own list: do not mutate it)."""
        if head != self._head:
            self._advance(head)
        return self._messages

    def take_stable(self) -> int:
        """How many leading messages are unchanged since the previous call."""
        stable, self._stable = self._stable, len(self._messages)
        return min(stable, len(self._messages))

    def _advance(self, head: str | None) -> None:
        new: list[str] = []
        cur = head
        target = self._nodes.get(self._head) if self._head is not None else None
        stop_depth = target.depth if target is not None else -1
        while cur is not None:
            info = self._nodes.get(cur)
            if info is None or info.depth <= stop_depth:
                break
            new.append(cur)
            cur = info.parent
        if cur != self._head or (cur is None and self._head is not None):
            # The head left the cached path: rebuild from the root once.
            self.full_rebuilds += 1
            self._messages, self._stable = [], 0
            new = []
            cur = head
            while cur is not None and cur in self._nodes:
                new.append(cur)
                cur = self._nodes[cur].parent
        for node in reversed(new):
            self._append(self._nodes[node])
        self._head = head

    def _append(self, info: _Node) -> None:
        if not info.blocks:
            return  # an empty response has nothing to send back
        if info.resets:
            self._messages, self._stable = [], 0
        if self._messages and self._messages[-1]["role"] == info.role:
            last = self._messages.pop()
            self._stable = min(self._stable, len(self._messages))
            message = {"role": info.role, "content": [*last["content"], *info.blocks]}
        else:
            message = {"role": info.role, "content": list(info.blocks)}
        self._messages.append(message)


def build_request(
    messages: list[Message], settings: RequestSettings, metadata: dict[str, Any] | None = None
) -> ModelRequest:
    """A ModelRequest without re-validating every message.

    ``ModelRequest.__post_init__`` checks each message, which is O(history) per step; messages
    from ``MessageBuilder`` are valid by construction, so the request is assembled directly
    (the settings are still checked by building a message-less request first).
    """
    checked = ModelRequest(
        model=settings.model,
        messages=[],
        system=settings.system,
        tools=settings.tools,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        metadata=dict(metadata or {}),
        extra_body=settings.extra_body,
    )
    object.__setattr__(checked, "messages", list(messages))
    return checked


class RequestRecorder:
    """Stores request manifests (see the module docstring) and returns their digests."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self._previous: tuple[str, int] | None = None  # (manifest digest, message count)
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
        digest = self.blobs.put(canonical_json(manifest).encode())
        self._previous = (digest, len(messages))
        return digest


def _canonical_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        _strip(
            {
                "name": t["name"],
                "description": t.get("description", ""),
                "input_schema": t.get("input_schema", {}),
                **{k: v for k, v in t.items() if k not in ("name", "description", "input_schema")},
            }
        )
        for t in tools
    ]


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
