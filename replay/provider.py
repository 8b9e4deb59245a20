"""The replay provider: recorded model turns, served in order, each after checking the request.

Every model call of the replayed run gets the next recorded outcome: a response (streamed as
deltas and complete blocks, so the loop assembles exactly the recorded blocks, stop reason, usage,
model and request id), a provider error (the same error class and message, so the loop records
the same error and makes the same retry decision), preceded by any in-stream retries the provider
recorded. Before serving a response, the request the current code built is compared with the
recorded one (``RequestMatcher``); any difference raises ``ReplayMismatch`` with a unified diff of
the two requests (system prompt, messages, tools, settings).

Requests are compared in canonical form (``coder_es.providers.types.canonical_request``: what the
model would see) after the replay normalization (``replay.normalize``), incrementally: a long
session's requests share their leading messages, so each call compares only what is new.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from coder_es import jsonlimit
from coder_es.agent.request import MANIFEST_FORMAT
from coder_es.providers import errors as perrors
from coder_es.providers.base import Provider
from coder_es.providers.types import (
    BlockComplete,
    Finish,
    MessageStart,
    ModelRequest,
    Retrying,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallStart,
    UsageUpdate,
    canonical_message,
    canonical_request,
)
from replay.normalize import Normalizer
from replay.report import ReplayMismatch, contrast, first_difference, lookup


@dataclass(frozen=True)
class RecordedResponse:
    blocks: list[dict[str, Any]]
    stop_reason: str
    usage: dict[str, Any]
    provider: str
    model: str
    request_id: str | None
    request_digest: str | None


@dataclass(frozen=True)
class RecordedFailure:
    kind: str  # the ProviderError class name
    message: str
    retryable: bool


@dataclass(frozen=True)
class RecordedRetry:
    attempt: int
    delay_s: float
    reason: str


@dataclass(frozen=True)
class ModelCall:
    """One recorded model call: retries inside the stream, then a response or a failure."""

    retries: tuple[RecordedRetry, ...]
    outcome: RecordedResponse | RecordedFailure


def model_calls(events: Sequence[Any]) -> list[ModelCall]:
    """The model calls of a recording, in order (``events`` have ``kind`` and ``fields``)."""
    calls: list[ModelCall] = []
    retries: list[RecordedRetry] = []
    previous = ""
    for e in events:
        f = e.fields
        if e.kind == "RetryScheduled" and previous != "ErrorRecorded":
            # Recorded from a provider's own retry (a Retrying stream event).
            retries.append(RecordedRetry(int(f["attempt"]), float(f["delay_s"]), str(f["reason"])))
        elif e.kind == "ErrorRecorded":
            failure = RecordedFailure(str(f["kind"]), str(f["message"]), bool(f["retryable"]))
            calls.append(ModelCall(tuple(retries), failure))
            retries = []
        elif e.kind == "ModelResponded":
            response = RecordedResponse(
                blocks=list(f["blocks"]),
                stop_reason=str(f["stop_reason"]),
                usage=dict(f["usage"]),
                provider=str(f["provider"]),
                model=str(f["model"]),
                request_id=f.get("request_id"),
                request_digest=f.get("request_digest"),
            )
            calls.append(ModelCall(tuple(retries), response))
            retries = []
        previous = e.kind
    return calls


# ---------------------------------------------------------------------- requests


class RequestMatcher:
    """Compares the requests of a replay with the recorded ones."""

    keep_expanded = 8

    def __init__(
        self, blob: Callable[[str], bytes], recorded: Normalizer, replayed: Normalizer
    ) -> None:
        self.blob = blob
        self.recorded = recorded
        self.replayed = replayed
        self._expanded: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._json: dict[str, Any] = {}
        self._prev_objs: list[Any] = []
        self._prev_canon: list[dict[str, Any]] = []
        self._system: tuple[int, str] | None = None
        self._tools: tuple[int, Any] | None = None

    # -- the recorded side

    def _load(self, digest: str) -> Any:
        cached = self._json.get(digest)
        if cached is None:
            cached = jsonlimit.loads(self.blob(digest))
            if len(self._json) > 64:
                self._json.clear()
            self._json[digest] = cached
        return cached

    def _manifest(self, digest: str) -> dict[str, Any]:
        manifest = jsonlimit.loads(self.blob(digest))
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"blob {digest} is not a {MANIFEST_FORMAT} request manifest")
        return manifest

    def expected_messages(self, digest: str) -> list[dict[str, Any]]:
        """The recorded request's messages, normalized; lists share their prefix objects."""
        cached = self._expanded.get(digest)
        if cached is not None:
            return cached
        chain: list[dict[str, Any]] = []
        cur: str | None = digest
        base_messages: list[dict[str, Any]] = []
        while cur is not None:
            if cur in self._expanded:
                base_messages = self._expanded[cur]
                break
            part = self._manifest(cur)["messages"]
            chain.append(part)
            cur = part["base"] if part["base"] is not None and part["keep"] else None
        messages = base_messages
        for part in reversed(chain):
            appended = [self.recorded.value(m) for m in part["append"]]
            messages = [*messages[: part["keep"]], *appended]
        self._expanded[digest] = messages
        while len(self._expanded) > self.keep_expanded:
            self._expanded.popitem(last=False)
        return messages

    def expected(self, digest: str) -> dict[str, Any]:
        m = self._manifest(digest)
        return {
            "model": m["model"],
            "system": self.recorded.value(self._load(m["system"])),
            "messages": self.expected_messages(digest),
            "tools": self.recorded.value(self._load(m["tools"])),
            "max_tokens": m["max_tokens"],
            "temperature": m["temperature"],
            "stop_sequences": m["stop_sequences"],
            "extra_body": m["extra_body"],
        }

    # -- the replayed side

    def _actual_messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        objs, prev_objs, prev = request.messages, self._prev_objs, self._prev_canon
        # Usually every message but the last few is unchanged since the previous request: find
        # that prefix with C-level list comparisons (the last one may have grown by a merge).
        limit = min(len(prev_objs), len(prev), len(objs))
        keep = 0
        for k in (limit, limit - 1):
            if k > 0 and objs[:k] == prev_objs[:k]:
                keep = k
                break
        out = prev[:keep]
        for m in objs[keep:]:
            out.append(self.replayed.value(canonical_message(m)))
        return out

    def actual(self, request: ModelRequest) -> dict[str, Any]:
        full = canonical_request(request)
        full = self.replayed.value(full)
        return full

    # -- comparing

    def check(self, request: ModelRequest, digest: str | None, number: int) -> None:
        """Raise ``ReplayMismatch`` if ``request`` is not the recorded request ``digest``."""
        if digest is None:
            return
        m = self._manifest(digest)
        same = (
            request.model == m["model"]
            and request.max_tokens == m["max_tokens"]
            and request.temperature == m["temperature"]
            and list(request.stop_sequences) == m["stop_sequences"]
            and request.extra_body == m["extra_body"]
            and self._same_system(request, m["system"])
            and self._same_tools(request, m["tools"])
        )
        expected_msgs = self.expected_messages(digest)
        actual_msgs = self._actual_messages(request)
        if same and actual_msgs == expected_msgs:
            self._prev_objs = list(request.messages)
            self._prev_canon = expected_msgs  # equal, and shared with the next expansion
            return
        self._prev_objs, self._prev_canon = [], []
        expected = self.expected(digest)
        actual = self.actual(request)
        where = first_difference(expected, actual) or "?"
        rec, rep = contrast(lookup(expected, where), lookup(actual, where))
        summary = (
            f"model call {number}: the request differs from the recorded one at {where} "
            f"(recorded {rec}, replayed {rep})"
        )
        raise ReplayMismatch("request", "ModelResponded", expected, actual, summary)

    def _same_system(self, request: ModelRequest, digest: str) -> bool:
        if self._system is not None and self._system == (id(request.system), digest):
            return True
        same = self.replayed.text(request.system) == self.recorded.value(self._load(digest))
        if same:
            self._system = (id(request.system), digest)
        return same

    def _same_tools(self, request: ModelRequest, digest: str) -> bool:
        if self._tools is not None and self._tools == (id(request.tools), digest):
            return True
        tools = canonical_request(
            ModelRequest(model=request.model or "x", messages=[], tools=request.tools)
        )["tools"]
        same = self.replayed.value(tools) == self.recorded.value(self._load(digest))
        if same:
            self._tools = (id(request.tools), digest)
        return same


# ---------------------------------------------------------------------- the provider


def _error(failure: RecordedFailure) -> perrors.ProviderError:
    cls = getattr(perrors, failure.kind, None)
    if not (isinstance(cls, type) and issubclass(cls, perrors.ProviderError)):
        cls = perrors.ProviderError
    return cls(failure.message)


class ReplayProvider(Provider):
    """Serves ``calls`` in order. ``before`` runs first on every call (the engine checks the
    events so far and replays a recorded cancellation there; what it returns, if anything,
    is awaited first)."""

    name: ClassVar[str] = "replay"

    def __init__(
        self,
        calls: Sequence[ModelCall],
        matcher: RequestMatcher,
        *,
        model: str = "",
        before: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        self.calls = list(calls)
        self.matcher = matcher
        self.model = model
        self.before = before or (lambda: None)
        self.served = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        waiting = self.before()
        if waiting is not None:
            await waiting
        number = self.served + 1
        if self.served >= len(self.calls):
            summary = (
                f"the current code makes model call {number}; the recording has "
                f"{len(self.calls)} model call(s)"
            )
            raise ReplayMismatch(
                "model_call", "ModelResponded", None, {"model_call": number}, summary
            )
        call = self.calls[self.served]
        outcome = call.outcome
        if isinstance(outcome, RecordedResponse):
            self.matcher.check(request, outcome.request_digest, number)
        self.served += 1
        for retry in call.retries:
            yield Retrying(
                attempt=retry.attempt - 1,
                max_attempts=retry.attempt,
                delay_s=retry.delay_s,
                error=perrors.ProviderError(retry.reason),
            )
        if isinstance(outcome, RecordedFailure):
            if outcome.retryable:
                # The loop only retries a stream that already delivered content.
                yield TextDelta(0, "")
            raise _error(outcome)
        # The loop stores ``provider.name`` with the response: serve the recorded one.
        self.name = outcome.provider  # type: ignore[misc]
        yield MessageStart(
            model=outcome.model, request_id=outcome.request_id, usage=dict(outcome.usage)
        )
        for index, block in enumerate(outcome.blocks):
            kind = block.get("type")
            if kind == "text":
                yield TextDelta(index, str(block.get("text", "")))
            elif kind == "thinking":
                yield ThinkingDelta(index, str(block.get("thinking", "")))
            elif kind == "tool_use":
                yield ToolCallStart(index, str(block.get("id", "")), str(block.get("name", "")))
            yield BlockComplete(index, dict(block))
        yield UsageUpdate(dict(outcome.usage))
        yield Finish(stop_reason=outcome.stop_reason, usage=dict(outcome.usage))
