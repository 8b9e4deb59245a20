"""The model request for a node, as a pure function of the session's events, within a budget.

Layout (the stable parts first, which is what prompt caching rewards):

1. ``system``: the recorded system prompt, then the instructions (AGENTS.md ...); then the tool
   definitions. These are fixed for a session; if they alone exceed the budget the build fails.
2. The messages of the path root -> head, newest kept first: units (see ``state``) are taken
   from the head backwards, each in full if it fits, else trimmed (``render``); the first unit
   that does not fit even trimmed ends the window. Units are atomic, so a tool_use and its
   tool_result are always sent together or not at all. The newest unit is always sent, cut
   down further if it must be.
3. Everything older than the window is condensed into one user text at the start: the
   ``ContextCompacted`` summaries among it and fallback lines for the rest (``summarize``),
   within ``summary_share`` of the budget. ``BuiltContext.needs_compaction`` says when that
   shed turns no summary covered: the loop should then record a compaction so the prefix stays
   stable from step to step.
4. Appended to the last user message (it changes every step anyway, so the cached prefix is
   not disturbed): the current contents of the files the conversation read or changed, most
   recently used first, within ``files_share`` (a file whose latest read is sent whole in the
   window is not repeated); then code related to them from the dependency graph, within
   ``related_share``.

Budget: each share is reserved only when there is something to put in it; the messages get the
rest. Token counts are additive (``tokens``), so the total is exact arithmetic, not a re-count,
and never exceeds the budget.

Determinism: file contents come from content-addressed blobs and the related code from the
``related`` callable (a pure function of the workspace graph); with the same events (and the
same graph), the request is byte-identical in canonical JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from coder_es.domain.chain import canonical_json
from coder_es.domain.session import NodeId
from coder_es.errors import CoderESError
from coder_es.providers.types import Message, ModelRequest, canonical_request
from projections.context.errors import ContextBudgetError, ContextConfigError
from projections.context.render import Level, Rendered, render_unit
from projections.context.state import ContextState, PathView, Unit
from projections.context.summarize import condense
from projections.context.tokens import (
    BLOCK_OVERHEAD,
    MESSAGE_OVERHEAD,
    TokenCounter,
    estimate_tokens,
    fit_text,
    tools_tokens,
)

PART_NAMES = ("system", "instructions", "tools", "summaries", "messages", "files", "related")
FRONT_HEADER = "Earlier conversation, condensed (nodes {first}-{last}):"
OMITTED = "(earlier conversation omitted)"
FILES_HEADER = (
    "Current contents of files read or changed in this conversation (most recently used first):"
)
RELATED_HEADER = "Code related to those files (from the dependency graph, most related first):\n"
MIN_FILE_TOKENS = 48
DEFAULT_BUDGET = 100_000
"""A default for callers with no model window at hand (input tokens, output not included)."""


class HeadSentinel:
    def __repr__(self) -> str:
        return "HEAD"


HEAD: Any = HeadSentinel()
"""``build``'s default: the session's current head."""


class BlobReader(Protocol):
    def get(self, digest: str) -> bytes: ...


class _MapFile(Protocol):
    @property
    def path(self) -> str: ...


class RepoMapLike(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def files(self) -> Sequence[_MapFile]: ...


class RelatedCode(Protocol):
    """Code related to ``seeds``, rendered to fit ``budget_tokens`` (``DepGraph.related_files``)."""

    def __call__(
        self, seeds: Sequence[str], budget_tokens: int, count: TokenCounter
    ) -> RepoMapLike: ...


class SettingsLike(Protocol):
    """What a request holds besides the messages (``agent.request.RequestSettings`` fits)."""

    @property
    def model(self) -> str: ...

    @property
    def system(self) -> str: ...

    @property
    def tools(self) -> list[dict[str, Any]]: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def temperature(self) -> float | None: ...

    @property
    def extra_body(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ContextSettings:
    model: str
    system: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int = 8192
    temperature: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    instructions: str = ""


@dataclass(frozen=True)
class ContextConfig:
    counter: TokenCounter = estimate_tokens
    files_share: float = 0.15
    related_share: float = 0.05
    summary_share: float = 0.10
    tool_output_tokens: int = 4_000  # any tool output in the context, at most
    old_output_tokens: int = 250  # tool outputs of trimmed (older) units
    old_text_tokens: int = 500  # texts and tool-call arguments of trimmed units
    max_files: int = 40

    def __post_init__(self) -> None:
        shares = (self.files_share, self.related_share, self.summary_share)
        if any(not 0.0 <= s < 1.0 for s in shares) or sum(shares) >= 0.9:
            msg = f"context shares must each be in [0, 1) and sum below 0.9, got {shares}"
            raise ContextConfigError(msg)
        caps = (self.tool_output_tokens, self.old_output_tokens, self.old_text_tokens)
        if min(caps) < 16 or self.max_files < 0:
            msg = f"context caps must be at least 16 tokens, got {caps}"
            raise ContextConfigError(msg)


@dataclass(frozen=True)
class ContextPart:
    name: str
    tokens: int
    items: int  # messages, summaries, files or related files in the part


@dataclass(frozen=True)
class FileInContext:
    path: str
    hash: str
    tokens: int
    truncated: bool


@dataclass(frozen=True)
class BuiltContext:
    request: ModelRequest
    parts: tuple[ContextPart, ...]
    tokens: int
    budget: int
    head: NodeId | None
    full: tuple[NodeId, ...]  # nodes sent as recorded (long tool outputs still capped)
    trimmed: tuple[NodeId, ...]  # nodes sent shortened
    condensed_units: int  # units before the window, only in the condensed history
    summaries: tuple[NodeId, ...]  # ContextCompacted nodes whose text is sent
    files: tuple[FileInContext, ...]
    related: tuple[str, ...]
    needs_compaction: bool

    def part(self, name: str) -> ContextPart:
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(name)

    def canonical_json(self) -> str:
        """The request in canonical JSON: equal events give equal bytes."""
        return canonical_json(canonical_request(self.request))


@dataclass
class _Window:
    taken: list[tuple[int, Level, Rendered]]  # oldest first
    used: int
    start: int  # index of the first unit sent


@dataclass
class _Assembly:
    """The window's units as messages, with what the report needs about them."""

    messages: list[Message] = field(default_factory=list)
    merges: int = 0
    inner_summary_tokens: int = 0
    full_nodes: list[NodeId] = field(default_factory=list)
    trimmed_nodes: list[NodeId] = field(default_factory=list)
    summaries: list[NodeId] = field(default_factory=list)
    whole: set[int] = field(default_factory=set)

    def copy(self) -> _Assembly:
        return _Assembly(
            list(self.messages),
            self.merges,
            self.inner_summary_tokens,
            list(self.full_nodes),
            list(self.trimmed_nodes),
            list(self.summaries),
            set(self.whole),
        )


@dataclass
class _Tail:
    """What the last build left to extend: every unit before ``index`` was sent in full.

    From one step to the next only the newest unit grows and new units are appended, so while
    the whole path still fits in full, the next build re-renders just the tail instead of
    walking the whole history (no O(history) work per step).
    """

    view: PathView
    limit: int
    last_user: int
    index: int  # the first unit not in ``before``
    before_unit: Unit | None  # units[index - 1], to check the prefix is unchanged
    before: _Assembly
    used: int  # tokens of units[:index]


class ContextBuilder:
    def __init__(
        self,
        settings: SettingsLike,
        *,
        config: ContextConfig | None = None,
        blobs: BlobReader | None = None,
        related: RelatedCode | None = None,
        instructions: str | None = None,
    ) -> None:
        self.settings = settings
        self.config = config or ContextConfig()
        self.blobs = blobs
        self.related = related
        self.instructions = (
            instructions if instructions is not None else getattr(settings, "instructions", "")
        )
        count = self.config.counter
        self.system_text = settings.system + (
            "\n\n" + self.instructions if self.instructions else ""
        )
        system_tokens = count(self.system_text)
        self.instruction_tokens = min(
            system_tokens, count("\n\n" + self.instructions) if self.instructions else 0
        )
        self.system_tokens = system_tokens - self.instruction_tokens
        self.tools_tokens = tools_tokens(settings.tools, count)
        cfg = self.config
        self.full = Level("full", cfg.tool_output_tokens, None)
        self.trim = Level("trimmed", cfg.old_output_tokens, cfg.old_text_tokens)
        self.levels = (self.full, self.trim)
        self.newest_levels = (
            self.full,
            self.trim,
            Level("minimal", 64, 64),
            Level("minimal", 16, 16),
        )
        self._file_cache: dict[str, tuple[str, int] | None] = {}
        self._tail: _Tail | None = None

    # ------------------------------------------------------------------ building

    def build(
        self,
        source: ContextState | Iterable[Any],
        head: NodeId | None = HEAD,
        *,
        budget: int,
        metadata: dict[str, Any] | None = None,
    ) -> BuiltContext:
        """The request for ``head`` (default: the session's head) within ``budget`` tokens."""
        state = source if isinstance(source, ContextState) else ContextState.from_events(source)
        node = state.head if head is HEAD else head
        view = state.view(node)
        count = self.config.counter
        fixed = self.system_tokens + self.instruction_tokens + self.tools_tokens
        if fixed > budget:
            raise ContextBudgetError(budget, fixed, "the system prompt and tool definitions")
        room = budget - fixed
        cfg = self.config
        units = view.units
        has_files = self.blobs is not None and any(h for h, _, _ in view.files.values())
        files_room = int(room * cfg.files_share) if has_files else 0
        related_room = int(room * cfg.related_share) if has_files and self.related else 0
        limit = room - files_room - related_room
        last_user = self._last_user(view, units)

        extended = self._extend_tail(state, view, units, limit, last_user)
        if extended is not None:
            window, assembly = extended
            return self._finish(
                view,
                node,
                units,
                window,
                0,
                assembly,
                fixed,
                budget,
                room,
                files_room,
                related_room,
                metadata,
            )
        found = self._window(state, units, limit, room, last_user)
        if found is None and files_room + related_room:
            # The files and related-code shares are extras: drop them before failing.
            files_room = related_room = 0
            limit = room
            found = self._window(state, units, limit, room, last_user)
        if found is None:
            min_front = MESSAGE_OVERHEAD + BLOCK_OVERHEAD + count(OMITTED)
            needed = fixed + self._newest_min(state, units)
            walked = self._walk(state, units, limit, last_user)
            raise ContextBudgetError(
                budget, needed + (min_front if walked is not None else 0), _NEWEST
            )
        window, front_room = found

        assembly = _Assembly()
        if front_room:
            text = self._front_text(state, units[: window.start], front_room, count)
            assembly.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        self._remember_tail(view, units, window, limit, last_user, front_room, assembly)
        for i in range(window.start):
            if units[i].kind == "summary":
                assembly.summaries.append(str(units[i].nodes[0]))
        return self._finish(
            view,
            node,
            units,
            window,
            front_room,
            assembly,
            fixed,
            budget,
            room,
            files_room,
            related_room,
            metadata,
        )

    def _finish(
        self,
        view: PathView,
        node: NodeId | None,
        units: list[Unit],
        window: _Window,
        front_room: int,
        assembly: _Assembly,
        fixed: int,
        budget: int,
        room: int,
        files_room: int,
        related_room: int,
        metadata: dict[str, Any] | None,
    ) -> BuiltContext:
        count = self.config.counter
        front_tokens = 0
        if front_room:
            front_tokens = MESSAGE_OVERHEAD + count(assembly.messages[0]["content"][0]["text"])
            front_tokens += BLOCK_OVERHEAD
        messages = assembly.messages
        merges = assembly.merges
        inner_summary_tokens = assembly.inner_summary_tokens
        full_nodes, trimmed_nodes = assembly.full_nodes, assembly.trimmed_nodes
        summaries, whole = assembly.summaries, assembly.whole
        front_merged = bool(front_room) and bool(window.taken) and _starts_user(window)

        files, files_block = self._files(view, whole, files_room, count)
        related_names: tuple[str, ...] = ()
        related_block = None
        if files and related_room:
            related_names, related_block = self._related(view, related_room, count)
        extra = [b for b in (files_block, related_block) if b is not None]
        extra_tokens = sum(BLOCK_OVERHEAD + count(b["text"]) for b in extra)
        last_user_message = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "user"), None
        )
        if extra and last_user_message is not None:
            target = messages[last_user_message]
            messages[last_user_message] = {
                "role": "user",
                "content": [*target["content"], *extra],
            }
        elif extra:  # nowhere to put them (no user message at all)
            extra, extra_tokens, files, related_names = [], 0, [], ()
            files_block = related_block = None

        total = fixed + front_tokens + window.used - merges * MESSAGE_OVERHEAD + extra_tokens
        summary_part = inner_summary_tokens + front_tokens
        if front_merged:
            summary_part -= MESSAGE_OVERHEAD
        files_part = BLOCK_OVERHEAD + count(files_block["text"]) if files_block else 0
        related_part = BLOCK_OVERHEAD + count(related_block["text"]) if related_block else 0
        parts = (
            ContextPart("system", self.system_tokens, 1),
            ContextPart("instructions", self.instruction_tokens, 1 if self.instructions else 0),
            ContextPart("tools", self.tools_tokens, len(self.settings.tools)),
            ContextPart("summaries", summary_part, len(summaries) + (1 if front_room else 0)),
            ContextPart(
                "messages",
                total - fixed - summary_part - files_part - related_part,
                len(messages),
            ),
            ContextPart("files", files_part, len(files)),
            ContextPart("related", related_part, len(related_names)),
        )
        request = self._request(messages, metadata)
        return BuiltContext(
            request=request,
            parts=parts,
            tokens=total,
            budget=budget,
            head=node,
            full=tuple(full_nodes),
            trimmed=tuple(trimmed_nodes),
            condensed_units=window.start,
            summaries=tuple(summaries),
            files=tuple(files),
            related=related_names,
            needs_compaction=_shed_uncovered(units, window.start),
        )

    # ------------------------------------------------------------------ pieces

    def _add(self, assembly: _Assembly, unit: Unit, level: Level, rendered: Rendered) -> None:
        if unit.kind == "summary":
            assembly.inner_summary_tokens += rendered.tokens
            assembly.summaries.append(str(unit.nodes[0]))
        (assembly.full_nodes if level is self.full else assembly.trimmed_nodes).extend(
            str(n) for n in unit.nodes
        )
        assembly.whole |= rendered.whole_results
        messages = assembly.messages
        for message in rendered.messages:
            if messages and messages[-1]["role"] == message["role"]:
                last = messages.pop()
                content = [*last["content"], *message["content"]]
                message = {"role": last["role"], "content": content}
                assembly.merges += 1
            messages.append(message)

    def _last_user(self, view: PathView, units: list[Unit]) -> int:
        """The index of the newest user unit (only the units since the last build are looked
        at when the path was extended)."""
        tail = self._tail
        start, found = 0, 0
        if tail is not None and tail.view is view and len(units) >= tail.index:
            start, found = tail.index, tail.last_user
        for i in range(len(units) - 1, start - 1, -1):
            if units[i].kind == "user":
                return i
        return found

    def _remember_tail(
        self,
        view: PathView,
        units: list[Unit],
        window: _Window,
        limit: int,
        last_user: int,
        front_room: int,
        assembly: _Assembly,
    ) -> None:
        """Assemble the window, keeping the state before its newest unit for the next build."""
        self._tail = None
        taken = window.taken
        extendable = (
            not front_room and window.start == 0 and all(lv is self.full for _, lv, _ in taken)
        )
        for i, level, rendered in taken[:-1]:
            self._add(assembly, units[i], level, rendered)
        if extendable and taken:
            index = taken[-1][0]
            used = window.used - taken[-1][2].tokens
            before = units[index - 1] if index else None
            self._tail = _Tail(view, limit, last_user, index, before, assembly.copy(), used)
        if taken:
            i, level, rendered = taken[-1]
            self._add(assembly, units[i], level, rendered)

    def _extend_tail(
        self,
        state: ContextState,
        view: PathView,
        units: list[Unit],
        limit: int,
        last_user: int,
    ) -> tuple[_Window, _Assembly] | None:
        """The window and its assembly from the last build's, when only the tail moved."""
        tail = self._tail
        if (
            tail is None
            or tail.view is not view
            or tail.limit != limit
            or tail.last_user != last_user
            or len(units) <= tail.index
            or (tail.index and units[tail.index - 1] is not tail.before_unit)
        ):
            return None
        count = self.config.counter
        used = tail.used
        taken: list[tuple[int, Level, Rendered]] = []
        for i in range(tail.index, len(units)):
            rendered = render_unit(state, units[i], self.full, i >= last_user, count)
            used += rendered.tokens
            taken.append((i, self.full, rendered))
        if used > limit:
            return None
        first = tail.before.messages[0] if tail.before.messages else None
        if first is None:
            first = next((r.messages[0] for _, _, r in taken if r.messages), None)
        if first is not None and first["role"] != "user":
            return None  # the window now needs a condensed front: walk it afresh
        assembly = tail.before.copy()
        index = taken[-1][0]
        # The next build starts again from the (new) newest unit.
        for i, level, rendered in taken[:-1]:
            self._add(assembly, units[i], level, rendered)
        self._tail = _Tail(
            view,
            limit,
            last_user,
            index,
            units[index - 1] if index else None,
            assembly.copy(),
            used - taken[-1][2].tokens,
        )
        self._add(assembly, units[index], self.full, taken[-1][2])
        # ``taken`` holds only the re-rendered units: with no condensed front, nothing after this
        # looks further into the window than its start, its size and its first unit.
        return _Window(taken, used, 0), assembly

    def _window(
        self, state: ContextState, units: list[Unit], limit: int, room: int, last_user: int
    ) -> tuple[_Window, int] | None:
        """The units sent and the room left for a condensed front, or None if nothing fits."""
        window = self._walk(state, units, limit, last_user)
        if window is None:
            return None
        if not self._needs_front(window):
            return window, 0
        count = self.config.counter
        min_front = MESSAGE_OVERHEAD + BLOCK_OVERHEAD + count(OMITTED)
        wanted = max(min_front, int(room * self.config.summary_share))
        for front_room in sorted({wanted, max(min_front, wanted // 2), min_front}, reverse=True):
            shrunk = self._walk(state, units, limit - front_room, last_user)
            if shrunk is not None:
                return shrunk, front_room
        return None

    def _walk(
        self, state: ContextState, units: list[Unit], limit: int, last_user: int
    ) -> _Window | None:
        count = self.config.counter
        used = 0
        taken: list[tuple[int, Level, Rendered]] = []
        start = 0
        newest = len(units) - 1
        for i in range(newest, -1, -1):
            levels = self.newest_levels if i == newest else self.levels
            chosen: tuple[Level, Rendered] | None = None
            for level in levels:
                rendered = render_unit(state, units[i], level, i >= last_user, count)
                if used + rendered.tokens <= limit:
                    chosen = (level, rendered)
                    break
            if chosen is None:
                if i == newest:
                    return None
                start = i + 1
                break
            used += chosen[1].tokens
            taken.append((i, chosen[0], chosen[1]))
        taken.reverse()
        return _Window(taken, used, start)

    def _newest_min(self, state: ContextState, units: list[Unit]) -> int:
        if not units:
            return 0
        level = self.newest_levels[-1]
        return render_unit(state, units[-1], level, True, self.config.counter).tokens

    @staticmethod
    def _needs_front(window: _Window) -> bool:
        # Providers want the first message from the user; a window can start with a model turn.
        return window.start > 0 or (bool(window.taken) and not _starts_user(window))

    def _front_text(
        self, state: ContextState, older: list[Unit], room: int, count: TokenCounter
    ) -> str:
        text_room = room - MESSAGE_OVERHEAD - BLOCK_OVERHEAD
        if older:
            nodes = state.nodes
            header = FRONT_HEADER.format(
                first=nodes[older[0].nodes[0]].ref, last=nodes[older[-1].nodes[-1]].ref
            )
            text, _ = condense(state, older, text_room, count, header)
            if text:
                return text
        return OMITTED

    def _file_text(self, digest: str) -> tuple[str, int] | None:
        if digest in self._file_cache:
            return self._file_cache[digest]
        assert self.blobs is not None
        try:
            data = self.blobs.get(digest)
        except CoderESError:
            data = None
        value = None
        if data is not None and b"\0" not in data[:8192]:
            text = data.decode("utf-8", "replace")
            value = (text, self.config.counter(text))
        if len(self._file_cache) > 512:
            self._file_cache.clear()
        self._file_cache[digest] = value
        return value

    def _files(
        self, view: PathView, whole: set[int], room: int, count: TokenCounter
    ) -> tuple[list[FileInContext], dict[str, Any] | None]:
        if room <= 0 or self.blobs is None:
            return [], None
        left = room - BLOCK_OVERHEAD - count(FILES_HEADER)
        per_file = max(MIN_FILE_TOKENS, left // 2)
        chosen: list[FileInContext] = []
        pieces = [FILES_HEADER]
        tried = 0
        for path, (digest, node, by_read) in reversed(view.files.items()):
            if left < MIN_FILE_TOKENS or tried >= self.config.max_files:
                break
            if digest is None or (by_read and node in whole):
                continue
            tried += 1
            loaded = self._file_text(digest)
            if loaded is None:
                continue
            content, content_tokens = loaded
            label = f"\n=== {path} (sha256:{digest[:16]}) ===\n"
            cap = min(left, per_file) - count(label) - 1
            if cap < 16:
                continue
            body = content
            if content_tokens > cap:
                body = fit_text(content, cap, count, _file_note(path))
            if not body and content:
                continue
            piece = label + body
            cost = count(piece) + 1  # the counter is not assumed additive: one token of slack
            if cost > left:
                continue
            pieces.append(piece)
            left -= cost
            chosen.append(FileInContext(path, digest, cost, body is not content))
        if not chosen:
            return [], None
        text = "".join(pieces)
        while count(text) + BLOCK_OVERHEAD > room and len(pieces) > 1:
            pieces.pop()
            chosen.pop()
            text = "".join(pieces)
        if not chosen:
            return [], None
        return chosen, {"type": "text", "text": text}

    def _related(
        self, view: PathView, room: int, count: TokenCounter
    ) -> tuple[tuple[str, ...], dict[str, Any] | None]:
        assert self.related is not None
        seeds = [p for p, (d, _, _) in reversed(view.files.items()) if d is not None]
        text_room = room - BLOCK_OVERHEAD - count(RELATED_HEADER) - 1
        if text_room <= 0 or not seeds:
            return (), None
        repo_map = self.related(seeds, text_room, count)
        if not repo_map.text:
            return (), None
        text = RELATED_HEADER + repo_map.text
        if BLOCK_OVERHEAD + count(text) > room:
            return (), None
        return tuple(f.path for f in repo_map.files), {"type": "text", "text": text}

    def _request(self, messages: list[Message], metadata: dict[str, Any] | None) -> ModelRequest:
        s = self.settings
        checked = ModelRequest(
            model=s.model,
            messages=[],
            system=self.system_text,
            tools=s.tools,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            metadata=dict(metadata or {}),
            extra_body=s.extra_body,
        )
        # Messages are valid by construction; re-validating them all is O(history) per step.
        object.__setattr__(checked, "messages", messages)
        return checked


_NEWEST = "the system prompt, tool definitions and the newest message (shortened)"


def _file_note(path: str) -> Callable[[int], str]:
    return lambda k: f"\n[... {k} characters of {path} not shown; read the file for more ...]\n"


def _starts_user(window: _Window) -> bool:
    for _, _, rendered in window.taken:
        if rendered.messages:
            return rendered.messages[0]["role"] == "user"
    return True


def _shed_uncovered(units: list[Unit], start: int) -> bool:
    return any(units[i].kind != "summary" for i in range(start - 1, -1, -1))


def stable_prefix(previous: Sequence[Message], messages: Sequence[Message]) -> int:
    """How many leading messages two requests share (for ``RequestRecorder.record``)."""
    n = 0
    for a, b in zip(previous, messages, strict=False):
        if a is not b and a != b:
            break
        n += 1
    return n


def graph_related(graph: Any) -> RelatedCode:
    """``RelatedCode`` from a ``projections.depgraph.DepGraph`` (seeds outside it are ignored)."""

    def related(seeds: Sequence[str], budget_tokens: int, count: TokenCounter) -> RepoMapLike:
        known = [s for s in seeds if s in graph]
        if not known:
            from projections.depgraph.model import RepoMap

            return RepoMap((), "", 0)
        result: RepoMapLike = graph.related_files(known, budget_tokens, count)
        return result

    return related
