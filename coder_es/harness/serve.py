"""Matching a harness's model requests to the recorded ones, and serving the recorded answers.

A live replay (and a fork's rebuild) points the harness at the recording proxy as a turn does,
with a ``ServingUpstream`` behind it instead of the real endpoint: each request the harness
makes is matched to an exchange of the recording by method, path and a digest of its body with
the volatile parts normalized, and answered with the recorded response, byte for byte but for
the workspace's path (the recorded one is replaced by the scratch one the harness runs in).

What is normalized (the same for every CLI, then per CLI):

- the workspace's path (the recorded one and the scratch one) -> ``<workspace>``, and the names
  CLIs derive from it (Claude Code's project folder ``-tmp-ws``, Gemini CLI's sha256 of it);
- UUIDs (session, request and message ids) -> ``<uuid>``; dates and timestamps -> ``<time>``;
- Claude Code: the top-level ``metadata`` (its ``user_id`` names the session);
- Codex: ``prompt_cache_key`` and ``client_metadata`` (the thread's id), and in its command
  outputs the ``Chunk ID`` and the ``Wall time``;
- Gemini CLI: its per-project temporary directory (``~/.gemini/tmp/NAME``, numbered) and the
  time in its function calls' ids (``write_file_1795840495015_0``);
- ACP agents: the union of the above (the provider is not known in advance).

Requests are matched in order, except that a request may match any exchange not yet served
(a CLI may send a side request, such as a title, concurrently with the conversation's): the
first request that matches none is the divergence, reported against the first exchange not
yet served, with both bodies and a diff. It is answered with a 400 the CLIs do not retry.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coder_es.harness.proxy import _recorded_path

DROPPED_KEYS: dict[str, tuple[str, ...]] = {
    "claude-code": ("metadata",),
    "codex": ("prompt_cache_key", "client_metadata"),
    "gemini": (),
    "acp": ("metadata", "prompt_cache_key", "client_metadata"),
}
# UUIDs and dates, found from their first dash (a pattern that starts with a literal is
# searched for fast; one that starts with a class is tried at every byte: 40x slower on a
# 50 KB body): the 8 hex digits or the 4-digit year before it are checked by hand.
_DASHED = re.compile(
    rb"-(?:([0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    rb"|(\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?))"
)
_HEX = frozenset(b"0123456789abcdefABCDEF")
_DIGITS = frozenset(b"0123456789")
_SLUG = re.compile(r"[^A-Za-z0-9]")
# Volatile text a CLI writes into its own requests, per CLI: (pattern, replacement).
VOLATILE: dict[str, tuple[tuple[re.Pattern[bytes], bytes], ...]] = {
    # Codex's exec tool reports a random chunk id and the command's wall time.
    "codex": (
        (re.compile(rb"Chunk ID: [0-9A-Za-z]+"), b"Chunk ID: <id>"),
        (re.compile(rb"Wall time: [0-9.]+ seconds"), b"Wall time: <s> seconds"),
    ),
}
VOLATILE["gemini"] = (
    # Gemini CLI's per-project temporary directory: the workspace's name, numbered when
    # another project of the same name came first.
    (re.compile(rb"\.gemini/tmp/[^/\s\"'\\]+"), b".gemini/tmp/<project>"),
    # Its function calls' ids: the tool's name, the time in milliseconds, a counter.
    (re.compile(rb"_\d{13}(_\d+\")"), rb"_<ms>\1"),
)
VOLATILE["acp"] = VOLATILE["codex"] + VOLATILE["gemini"]
REFUSAL = json.dumps(
    {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "coder-es replay: this request differs from the recorded one",
            "code": 400,
            "status": "INVALID_ARGUMENT",
        },
    }
).encode()


@dataclass(frozen=True)
class RecordedExchange:
    version: int
    """Of its ``ModelExchanged`` event in the recording (the step a divergence names)."""
    method: str
    path: str
    request: bytes
    status: int
    response_headers: dict[str, str]
    response: bytes


@dataclass(frozen=True)
class RequestNormalizer:
    kind: str
    roots: tuple[bytes, ...]
    """The workspace paths and the names derived from them, longest first (a scratch path
    may extend the recorded one)."""
    volatile: tuple[tuple[re.Pattern[bytes], bytes], ...]

    @classmethod
    def for_paths(cls, kind: str, *roots: str) -> RequestNormalizer:
        forms: set[bytes] = set()
        for root in (r.rstrip("/") for r in roots if r):
            # The path, and the names CLIs derive from it for their per-project state:
            # Claude Code's ``~/.claude/projects/-tmp-ws``, Gemini CLI's sha256 of it.
            forms |= {root.encode(), _SLUG.sub("-", root).encode()}
            forms.add(hashlib.sha256(root.encode()).hexdigest().encode())
        ordered = tuple(sorted(forms, key=len, reverse=True))
        dropped = DROPPED_KEYS.get(kind, ())
        # A dropped key's value (a string, or an object of scalars) is blanked in the raw
        # text: no JSON round trip on the request's path (a body is ~100 KB).
        blank = (
            (
                re.compile(
                    b'"('
                    + b"|".join(re.escape(k.encode()) for k in dropped)
                    # an object of scalars whose strings may hold braces (Codex's
                    # ``x-codex-turn-metadata`` is a JSON text with a start time), or a string
                    + rb')":(\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}|"(?:[^"\\]|\\.)*")'
                ),
                rb'"\1":null',
            ),
        )
        return cls(kind, ordered, (*VOLATILE.get(kind, ()), *(blank if dropped else ())))

    def body(self, raw: bytes) -> bytes:
        out = raw
        for root in self.roots:
            out = out.replace(root, b"<workspace>")
        out = _ids_and_times(out)
        for pattern, replacement in self.volatile:
            out = pattern.sub(replacement, out)
        return out

    def digest(self, raw: bytes) -> str:
        return hashlib.sha256(self.body(raw)).hexdigest()

    def shown(self, raw: bytes) -> Any:
        """The normalized body as a value a report can diff (JSON when it is JSON)."""
        text = self.body(raw)
        try:
            return json.loads(text)
        except ValueError:
            return text.decode("utf-8", "replace")


@dataclass(frozen=True)
class RequestMismatch:
    expected: RecordedExchange | None
    method: str
    path: str
    body: bytes


class _Served:
    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self._body = body

    async def body(self) -> AsyncIterator[bytes]:
        yield self._body

    async def aclose(self) -> None:
        return None


@dataclass
class ServingUpstream:
    """Answers from the recording (``coder_es.harness.proxy.Upstream``)."""

    exchanges: Sequence[RecordedExchange]
    normalizer: RequestNormalizer
    on_mismatch: Callable[[RequestMismatch], object] | None = None
    moved: tuple[bytes, bytes] | None = None
    """(recorded workspace, scratch workspace): the model's answers name files by the
    recorded path (Claude Code's tools take absolute paths); served with the scratch one, so
    the replayed harness works where it runs. Not in a compressed answer."""
    served: list[int] = field(default_factory=list)
    """Indexes into ``exchanges``, in the order they were served."""
    mismatch: RequestMismatch | None = None
    match_ms: list[float] = field(default_factory=list)
    strict: bool = True
    """False (a fork's rebuild): a request that matches nothing is answered with the next
    recorded answer in order (the files are the node's, not those each recorded turn saw, so
    what the harness sends may differ; the recorded answers are what its history must hold).
    Only a request past the recording is refused."""
    loose: int = 0
    """Requests answered in order without matching (``strict`` off)."""
    first_at: float | None = None
    """``time.perf_counter()`` at the first request (the CLI's start-up ends there)."""
    _digests: list[str] = field(default_factory=list)
    _left: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._digests = [self.normalizer.digest(x.request) for x in self.exchanges]
        self._left = list(range(len(self.exchanges)))

    @property
    def unserved(self) -> list[RecordedExchange]:
        return [self.exchanges[i] for i in self._left]

    def match(self, method: str, path: str, body: bytes) -> int | None:
        """The index of the first unserved exchange this request is, or None."""
        t0 = time.perf_counter()
        recorded_path = _recorded_path(path)
        digest = self.normalizer.digest(body)
        found = None
        for i in self._left:
            x = self.exchanges[i]
            if x.method == method and x.path == recorded_path and self._digests[i] == digest:
                found = i
                break
        self.match_ms.append((time.perf_counter() - t0) * 1000)
        return found

    async def send(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> _Served:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        i = self.match(method, path, body)
        if i is None and not self.strict and self._left:
            i = self._left[0]
            self.loose += 1
        if i is None:
            if self.mismatch is None:
                expected = self.exchanges[self._left[0]] if self._left else None
                self.mismatch = RequestMismatch(expected, method, _recorded_path(path), body)
                if self.on_mismatch is not None:
                    self.on_mismatch(self.mismatch)
            return _Served(400, [("content-type", "application/json")], REFUSAL)
        self._left.remove(i)
        self.served.append(i)
        x = self.exchanges[i]
        # As recorded (a compressed answer keeps its content-encoding and its bytes).
        headers_out = list(x.response_headers.items())
        if not any(k == "content-type" for k, _ in headers_out):
            headers_out.append(("content-type", "application/json"))
        answer = x.response
        if self.moved is not None and "content-encoding" not in x.response_headers:
            answer = answer.replace(*self.moved)
        return _Served(x.status, headers_out, answer)

    async def aclose(self) -> None:
        return None


def _ids_and_times(data: bytes) -> bytes:
    """UUIDs -> ``<uuid>``, dates and timestamps -> ``<time>``."""
    out: list[bytes] = []
    at = 0
    for m in _DASHED.finditer(data):
        start = m.start()
        if m.group(1) is not None:
            begin, kind, digits = start - 8, b"<uuid>", _HEX
        else:
            begin, kind, digits = start - 4, b"<time>", _DIGITS
        if begin >= at and all(c in digits for c in data[begin:start]):
            out += (data[at:begin], kind)
            at = m.end()
    if not out:
        return data
    out.append(data[at:])
    return b"".join(out)
