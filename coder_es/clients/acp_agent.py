"""``coder-es acp``: an Agent Client Protocol agent (v1, JSON-RPC over stdio).

Built on the ``agent-client-protocol`` package (``acp.run_agent``). The mapping, in short (the
full table is in docs/clients.md):

- ``initialize``: load session, text + embedded-context prompts, session list and fork (unstable);
  the client's ``fs`` capabilities decide whether file tools go through its buffers, its
  ``terminal`` capability whether ``bash`` runs its command (sandbox included) in the client's
  terminal, embedded in the tool call (``acp_terminal``);
- ``session/new`` / ``session/load`` / ``session/resume`` open a session of ``cwd``; load first
  replays the conversation (root -> head) as ``session/update`` notifications, resume does not;
  ``session/close`` stops a session's handle (its record stays); ``session/delete`` hides it from
  the lists (an ``Archived`` event: nothing is removed); ``session/list`` pages with a cursor;
- modes are the agent presets (build, plan, explore): ``session/set_mode`` or the ``mode`` config
  option reopen the handle with another preset, the ``model`` config option with another model,
  recorded as a ``SettingsChanged`` (as ``coder-es run --session --agent/--model``), so later
  openings see it; chosen during a turn, it applies when the turn ends;
  ``current_mode_update`` / ``config_option_update`` follow; ``usage_update`` after each model
  response (context used, window, session cost);
- ``session/prompt`` streams text and thinking chunks, ``tool_call`` / ``tool_call_update``
  (kind, status, locations, diffs) and returns the stop reason;
- a question of the permission layer becomes ``session/request_permission`` with allow_once /
  allow_always / reject_once / reject_always, recorded as ``PermissionDecided`` with
  ``decided_by = "client"``; a cancelled answer cancels the turn;
- ``session/cancel`` cancels the running turn (recorded); the prompt returns ``cancelled``;
- branching: ``session/fork`` (unstable) and the slash commands ``/fork``, ``/switch``,
  ``/rewind``, ``/tree``, ``/label``, ``/diff``, ``/search``, advertised with
  ``available_commands_update``; a fork, switch or rewind is also shown as a finished tool call
  whose locations are the restored files and whose raw output lists the conflicts.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar, cast
from uuid import UUID

from acp import PROTOCOL_VERSION, Agent, Client, RequestError
from acp.agent.connection import AgentSideConnection
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.meta import AGENT_METHODS
from acp.router import MessageRouter
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommand,
    AvailableCommandInput,
    AvailableCommandsUpdate,
    ClientCapabilities,
    CloseSessionResponse,
    ConfigOptionUpdate,
    Cost,
    CurrentModeUpdate,
    DeleteSessionRequest,
    DeleteSessionResponse,
    EmbeddedResourceContentBlock,
    ForkSessionResponse,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionDeleteCapabilities,
    SessionForkCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TextContentBlock,
    TextResourceContents,
    ToolCallProgress,
    ToolCallUpdate,
    UnstructuredCommandInput,
    UsageUpdate,
)
from acp.utils import normalize_result

from coder_es._version import __version__
from coder_es.agent import updates as up
from coder_es.agent.origin import origin
from coder_es.clients import acp_mapping as m
from coder_es.clients import branch_ops
from coder_es.clients.acp_files import ClientFileExecutor, certain_refusal
from coder_es.clients.acp_harness import HarnessHandle, open_handle
from coder_es.clients.acp_terminal import SHOWN_WAIT_S, AcpTerminal, ClientTerminalExecutor
from coder_es.clients.errors import ClientError
from coder_es.clients.history import session_history
from coder_es.clients.jsonrpc_guard import LineGuard, ProtocolErrorsOnOneLine
from coder_es.clients.runtime import ClientRuntime
from coder_es.clients.search_ops import search_hits, sessions_matching
from coder_es.clients.stdio_files import any_stdio_streams
from coder_es.config import Config
from coder_es.config.values import McpServerConfig
from coder_es.errors import CoderESError, SessionNotFoundError, UsageError
from coder_es.permissions.policy import PermissionAnswer
from coder_es.permissions.presets import PRESETS
from coder_es.providers.types import usage_from
from coder_es.service.api import AgentService, SessionHandle, SessionOptions
from coder_es.service.waiting import Question, due, pending_of
from coder_es.service.waiting import answer as answer_parked
from coder_es.store.discover import check_owner
from coder_es.tools.base import ToolContext
from coder_es.tools.registry import LocalExecutor, default_registry
from coder_es.workspace.atomic import read_current
from coder_es.workspace.text import decode_text

log = logging.getLogger(__name__)
T = TypeVar("T")

STOP_REASONS = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "max_tokens": "max_tokens",
    "max_steps": "max_turn_requests",
    "refusal": "refusal",
    "cancelled": "cancelled",
}

COMMANDS = (
    (
        "fork",
        "branch the conversation: /fork [NODE] here, /fork --new-session [NODE]",
        "[--new-session] [NODE]",
    ),
    ("switch", "move to another node or branch (files follow through a merge)", "NODE"),
    ("rewind", "go back to an earlier node on this branch", "NODE [--conversation|--files]"),
    ("tree", "show the conversation tree with node ids", ""),
    ("label", "name a node (the name works wherever a node id does)", "NODE NAME"),
    ("diff", "compare two nodes: the turns on each side and the files", "NODE_A [NODE_B]"),
    ("search", "find text in this session's messages and tool results", "TEXT"),
    ("pending", "list the questions this session's parked turn waits for", ""),
    ("approve", "allow parked calls (default: all) and continue the turn", "[CALL...] [--always]"),
    ("deny", "refuse parked calls and continue the turn", "[CALL...] [--message TEXT]"),
)
PARKED_COMMANDS = ("approve", "deny")

MODES = {
    "build": "every tool; edits and commands run (paths outside the workspace still ask)",
    "plan": "reads, searches and look-only commands; no edits; the shell is read-only",
    "explore": "reads and searches only; no shell, no edits",
}
assert set(MODES) == set(PRESETS), "every agent preset is a mode"


LIST_PAGE = 100
"""Sessions per ``session/list`` page."""


def invalid_params(data: dict[str, Any]) -> RequestError:
    """``RequestError.invalid_params`` with the human reason as the message: clients (acpx,
    ``acp-client``) print only the message, so "Invalid params" alone told the user nothing."""
    return RequestError(-32602, str(data.get("details") or "Invalid params"), data)


def internal_error(data: dict[str, Any]) -> RequestError:
    """``RequestError.internal_error`` with the reason as the message (see ``invalid_params``)."""
    return RequestError(-32603, str(data.get("details") or "Internal error"), data)


def _cursor_of(session_id: str) -> str:
    return base64.urlsafe_b64encode(f"after:{session_id}".encode()).decode()


def _cursor_session(cursor: str) -> str:
    """The session a ``_cursor_of`` cursor names; an opaque token to clients."""
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeError, ValueError):
        text = ""
    if not text.startswith("after:"):
        raise invalid_params({"details": "the cursor is not one this agent gave"})
    return text[len("after:") :]


def permission_options(question: up.PermissionRequired) -> list[PermissionOption]:
    pattern = f"{question.tool}:{question.suggested_pattern}"
    return [
        PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
        PermissionOption(
            option_id="allow_always", name=f"Always allow {pattern}", kind="allow_always"
        ),
        PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
        PermissionOption(
            option_id="reject_always", name=f"Always reject {pattern}", kind="reject_always"
        ),
    ]


def answer_for(option_id: str, question: up.PermissionRequired) -> PermissionAnswer:
    """The permission layer's answer for the option the user picked in the client."""
    pattern = question.suggested_pattern
    if option_id == "allow_once":
        return PermissionAnswer.allow_once(decided_by="client")
    if option_id == "allow_always":
        return PermissionAnswer.allow_always(pattern, decided_by="client")
    if option_id == "reject_always":
        return PermissionAnswer(
            "deny", "always", pattern, "rejected by the user (always)", decided_by="client"
        )
    if option_id == "reject_once":
        return PermissionAnswer.reject("rejected by the user", decided_by="client")
    return PermissionAnswer.reject(f"the client answered an unknown option {option_id!r}", "client")


def prompt_text(blocks: list[Any]) -> str:
    """The prompt as one message: text, then embedded context, then links."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResourceContentBlock):
            res = block.resource
            if isinstance(res, TextResourceContents):
                parts.append(f'<context uri="{res.uri}">\n{res.text}\n</context>')
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"[{block.name}]({block.uri})")
    return "\n".join(parts)


def prompt_images(blocks: list[Any]) -> list[tuple[str, bytes]]:
    """The prompt's image blocks as ``(mimeType, bytes)``; the session sniffs the real type."""
    images = []
    for i, block in enumerate(blocks, 1):
        if isinstance(block, ImageContentBlock):
            try:
                images.append((block.mime_type, base64.b64decode(block.data, validate=True)))
            except binascii.Error as e:
                raise invalid_params(
                    {"details": f"prompt block {i}: the image data is not base64 ({e})"}
                ) from e
    return images


@dataclass
class _Buffers:
    """``BufferAccess`` over this connection for one session (the id is known after creation)."""

    agent: CoderAcpAgent
    session_id: str = ""

    @property
    def can_read(self) -> bool:
        return self.agent.fs_read

    @property
    def can_write(self) -> bool:
        return self.agent.fs_write

    async def read(self, path: Path) -> str | None:
        response = await self.agent.client.read_text_file(
            session_id=self.session_id, path=str(path)
        )
        return response.content

    async def write(self, path: Path, text: str) -> None:
        await self.agent.client.write_text_file(
            session_id=self.session_id, path=str(path), content=text
        )

    async def shown(self, ctx: ToolContext) -> None:
        """The session's own call waits for its ``tool_call`` (a subagent's is not shown);
        bounded, as for a terminal, so a call somehow not shown still runs."""
        session = self.agent.sessions.get(self.session_id)
        if session is None or ctx.sink is not session.handle.loop.sink:
            return
        shown = session.announced.setdefault(ctx.tool_use_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(shown.wait(), SHOWN_WAIT_S)


@dataclass
class _Terminals:
    """``TerminalAccess`` for one session: the client's terminal when it offers ``terminal/*``,
    for the session's own calls (a subagent's calls are not shown to the client)."""

    buffers: _Buffers  # shares its session id, known after creation

    def terminal_for(self, ctx: ToolContext) -> AcpTerminal | None:
        agent, sid = self.buffers.agent, self.buffers.session_id
        session = agent.sessions.get(sid)
        # A child's loop has its own sink (and its calls' ids may repeat the parent's).
        if not agent.terminal or session is None or ctx.sink is not session.handle.loop.sink:
            return None
        shown = session.announced.setdefault(ctx.tool_use_id, asyncio.Event())
        return AcpTerminal(agent.client, sid, ctx.tool_use_id, shown.wait)


def acp_mcp_servers(servers: list[Any] | None) -> tuple[McpServerConfig, ...]:
    """An ACP client's ``mcpServers`` (stdio, http, sse) as server configurations."""
    out = []
    for server in servers or []:
        d = server.model_dump(mode="json", by_alias=True, exclude_none=True)
        pairs = {p["name"]: p["value"] for p in d.get("env") or d.get("headers") or []}
        if "command" in d:
            out.append(
                McpServerConfig(
                    name=d["name"], command=d["command"], args=tuple(d.get("args") or ()), env=pairs
                )
            )
        else:
            kind = "sse" if d.get("type") == "sse" else "http"
            out.append(McpServerConfig(name=d["name"], url=d["url"], headers=pairs, transport=kind))
    return tuple(out)


@dataclass
class AcpSession:
    id: str
    cwd: Path
    service: AgentService
    handle: SessionHandle
    buffers: _Buffers | None = None
    options: SessionOptions = field(default_factory=SessionOptions)
    """What the handle was opened with: a mode or model change reopens it with these."""
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    started: set[str] = field(default_factory=set)
    shown: dict[str, asyncio.Event] = field(default_factory=dict)
    progress: dict[str, str] = field(default_factory=dict)
    announced: dict[str, asyncio.Event] = field(default_factory=dict)
    """Set once the client has been sent a call's ``tool_call`` (a terminal is shown in it)."""
    moves: int = 0
    pending: dict[str, str] = field(default_factory=dict)
    """A mode (``agent``) or ``model`` chosen while a turn ran: applied when it ends."""
    spent: Decimal | None = Decimal(0)
    """Dollars the session's model responses cost so far; None once one has no known price
    (the figure is then left out rather than guessed)."""
    """Branch moves shown as tool calls (their ids: ``rewind-3``)."""


class CoderAcpAgent:
    """The ``acp.Agent`` implementation."""

    def __init__(self, runtime: ClientRuntime, harness: Any = None) -> None:
        self.runtime = runtime
        self.harness = harness
        """``coder-es acp --harness NAME``: its sessions are run by that agent CLI
        (``coder_es.clients.acp_harness``); None: coder-es' own agent."""
        self._client: Client | None = None
        self.sessions: dict[str, AcpSession] = {}
        self.fs_read = False
        self.fs_write = False
        self.terminal = False
        self.can_delete = False
        """Whether ``session/delete`` has a route (``route_session_delete``)."""
        self._tasks: set[asyncio.Task[Any]] = set()

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    @property
    def client(self) -> Client:
        if self._client is None:
            raise internal_error({"details": "no client is connected"})
        return self._client

    async def _guard(self, work: Awaitable[T]) -> T:
        """Our errors become JSON-RPC errors whose message the client shows."""
        try:
            return await work
        except RequestError:
            raise
        except UsageError as e:
            raise invalid_params({"details": str(e)}) from e
        except CoderESError as e:
            raise internal_error({"details": str(e)}) from e

    # ------------------------------------------------------------------ lifecycle

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        fs = client_capabilities.fs if client_capabilities is not None else None
        self.fs_read = bool(fs is not None and fs.read_text_file)
        self.fs_write = bool(fs is not None and fs.write_text_file)
        self.terminal = bool(client_capabilities is not None and client_capabilities.terminal)
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION) or PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(
                    image=True, audio=False, embedded_context=True
                ),
                mcp_capabilities=McpCapabilities(http=True, sse=True),
                session_capabilities=SessionCapabilities(
                    fork=SessionForkCapabilities(),
                    list=SessionListCapabilities(),
                    resume=SessionResumeCapabilities(),
                    close=SessionCloseCapabilities(),
                    delete=SessionDeleteCapabilities() if self.can_delete else None,
                ),
            ),
            agent_info=Implementation(name="coder-es", title="coder-es", version=__version__),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    def _service(self, cwd: str) -> tuple[AgentService, _Buffers]:
        where = Path(cwd)
        if not where.is_absolute():
            raise UsageError(f"cwd must be an absolute path, got {cwd!r}")
        # As on the command line: another user's workspace or .coder-es/ is not used.
        check_owner(where.resolve())
        buffers = _Buffers(self)
        tools = default_registry()
        executor = ClientTerminalExecutor(
            ClientFileExecutor(LocalExecutor(tools), buffers), _Terminals(buffers)
        )
        service = self.runtime.service(where)
        own = AgentService(
            self.runtime.app,
            service.workspace,
            provider_factory=service.provider_factory,
            tools=tools,
            executor=executor,
            mcp_servers=service.mcp_servers,
            sandbox=service.sandbox,
            hooks=service.hooks,
            clock=service.clock,
        )
        return own, buffers

    def _register(
        self,
        service: AgentService,
        buffers: _Buffers,
        handle: SessionHandle,
        mcp: list[Any] | None,
        options: SessionOptions,
    ) -> AcpSession:
        buffers.session_id = handle.id
        servers = [c.describe() for c in acp_mcp_servers(mcp)]
        session = AcpSession(
            handle.id,
            service.workspace,
            service,
            handle,
            buffers,
            replace(options, settings={}),
            servers,
        )
        session.spent = self._spent(handle.id)
        old = self.sessions.get(handle.id)
        if old is not None:
            self._spawn(old.handle.close())
        self.sessions[handle.id] = session
        return session

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _advertise(self, session_id: str) -> None:
        await asyncio.sleep(0)  # after the response that told the client the session id
        commands = [
            AvailableCommand(
                name=name,
                description=desc,
                input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint))
                if hint
                else None,
            )
            for name, desc, hint in COMMANDS
        ]
        with contextlib.suppress(ConnectionError):  # the client left: nobody to advertise to
            await self.client.session_update(
                session_id=session_id,
                update=AvailableCommandsUpdate(
                    session_update="available_commands_update", available_commands=commands
                ),
            )

    def _meta(self, session: AcpSession) -> dict[str, Any]:
        return {
            "coderEs": {
                "mcpServers": session.mcp_servers,
                "workspace": str(session.cwd),
                # What a parked turn of the session waits for (issue 34): /approve, /deny.
                "parkedQuestions": [q.to_dict() for q in self._parked(session)],
            }
        }

    def _parked(self, session: AcpSession) -> list[Question]:
        """The session's parked questions as the log has them now (any process may have parked
        or answered them)."""
        return pending_of(self.runtime.app, session.id)

    async def _tell_parked(self, session: AcpSession) -> bool:
        """Say what a parked turn waits for, and how to answer (an editor has no other place
        to show it); whether anything waits."""
        questions = self._parked(session)
        if not questions:
            return False
        ready = {q.call for q in due(questions, session.service.clock.now())}
        lines = [f"This session's turn waits for {len(questions)} answer(s):"]
        for q in questions:
            subject = "" if q.subject == q.tool else f" {q.subject}"
            when = f"scheduled for {q.scheduled_for}; " if q.scheduled_for else ""
            if q.call in ready:
                when = f"scheduled for {q.scheduled_for}, due now: it runs at your next prompt; "
            lines.append(f"- `{q.call}` {q.tool}{subject} ({when}{q.reason or q.source})")
        lines.append(
            "Answer with /approve [CALL...] [--always] or /deny [CALL...] [--message TEXT]."
        )
        await self._say(session, "\n".join(lines))
        return True

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> NewSessionResponse:
        async def work() -> NewSessionResponse:
            service, buffers = self._service(cwd)
            configs = acp_mcp_servers(mcp_servers)
            # Recorded without the values of env and headers (they may be secrets).
            options = replace(
                self.runtime.options(),
                settings={"mcp_servers": [c.describe() for c in configs]},
                mcp_servers=configs,
            )
            if self.harness is not None:
                handle: Any = open_handle(
                    self.runtime, service.workspace, self.harness, agent=self.runtime.agent
                )
            else:
                handle = await service.create_session(options)
            session = self._register(service, buffers, handle, mcp_servers, options)
            self._spawn(self._advertise(session.id))
            return NewSessionResponse(session_id=session.id, **self._described(session))

        return await self._guard(work())

    async def _open(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None, *, replay: bool
    ) -> AcpSession:
        """``session/load`` (``replay``: the conversation is sent first) or ``session/resume``."""
        service, buffers = self._service(cwd)
        if self.harness is not None:
            handle: Any = open_handle(self.runtime, service.workspace, None, session_id)
            options = self.runtime.options()
        else:
            # As it now runs: its recorded agent preset and model (ClientRuntime.open_stored).
            handle, options = await self.runtime.open_stored(
                service, session_id, mcp_servers=acp_mcp_servers(mcp_servers)
            )
        session = self._register(service, buffers, handle, mcp_servers, options)
        if replay:
            await self._replay(session)
        await self._tell_parked(session)
        self._spawn(self._advertise(session.id))
        return session

    def _described(self, session: AcpSession) -> dict[str, Any]:
        """What every response that opens a session carries besides its id."""
        return {
            "modes": self._modes(session),
            "config_options": self._config_options(session),
            "field_meta": self._meta(session),
        }

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> LoadSessionResponse:
        session = await self._guard(self._open(cwd, session_id, mcp_servers, replay=True))
        return LoadSessionResponse(**self._described(session))

    async def resume_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> ResumeSessionResponse:
        """``session/load`` without the replay: the client already shows the conversation."""
        session = await self._guard(self._open(cwd, session_id, mcp_servers, replay=False))
        return ResumeSessionResponse(**self._described(session))

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        """Cancel the session's turn, stop its provider and MCP servers, forget it here; its
        record stays in the store (``session/load`` or ``session/resume`` opens it again)."""
        session = self._session(session_id)
        del self.sessions[session_id]
        await session.handle.close()
        return CloseSessionResponse()

    # ------------------------------------------------------------------ modes and options

    def _chosen(self, session: AcpSession) -> tuple[str, str]:
        """The agent preset and model the session runs its next turn with: those it is open
        with, or those chosen while its turn ran."""
        opened = session.handle.opened()
        return (
            session.pending.get("agent", opened.agent),
            session.pending.get("model", opened.model),
        )

    def _modes(self, session: AcpSession) -> SessionModeState:
        return SessionModeState(
            current_mode_id=self._chosen(session)[0],
            available_modes=[
                SessionMode(id=name, name=name, description=desc) for name, desc in MODES.items()
            ],
        )

    def _config_options(self, session: AcpSession) -> list[Any]:
        opened = session.handle.opened()
        agent, model = self._chosen(session)
        mode = SessionConfigOptionSelect(
            type="select",
            id="mode",
            name="Agent",
            category="mode",
            description="the agent preset: which tools it is offered and its permission rules",
            current_value=agent,
            options=[
                SessionConfigSelectOption(value=n, name=n, description=d) for n, d in MODES.items()
            ],
        )
        if isinstance(session.handle, HarnessHandle):
            return [mode]  # the harness chooses its model
        models = dict.fromkeys(
            (model, opened.model, self.runtime.choice.model, *session.service.models.models)
        )
        return [
            mode,
            SessionConfigOptionSelect(
                type="select",
                id="model",
                name="Model",
                category="model",
                description=f"the model of the {opened.provider} provider",
                current_value=model,
                options=[SessionConfigSelectOption(value=n, name=n) for n in models if n],
            ),
        ]

    async def _reopen(
        self, session: AcpSession, *, agent: str | None = None, model: str | None = None
    ) -> bool:
        """Open the session again with another agent preset or model, which
        ``AgentService.open_session`` records as a ``SettingsChanged`` (as ``coder-es resume
        --agent/--model`` does); False when nothing changes.

        ACP lets a client change the mode while a turn runs: that turn holds the session and
        keeps its preset and model, and the choice is applied when it ends (``_apply_pending``).
        """
        chosen = self._chosen(session)
        if agent in (None, chosen[0]) and model in (None, chosen[1]):
            return False
        if session.handle.running:
            if agent is not None:
                session.pending["agent"] = agent
            if model is not None:
                session.pending["model"] = model
            return True
        if isinstance(session.handle, HarnessHandle):
            # The preset maps to the harness's flags and our sandbox at its next turn; the
            # harness chooses its model.
            if agent is None:
                return False
            session.handle.set_agent(agent)
            return True
        opened = session.handle.opened()
        # Unchanged parts keep what the handle was opened with (a scripted provider's "model"
        # is its script's path, which the provider reports under another name).
        options = replace(
            session.options,
            agent=agent or opened.agent,
            model=model if model not in (None, opened.model) else session.options.model,
        )
        handle = await session.service.open_session(session.id, options)
        old, session.handle, session.options = session.handle, handle, options
        await old.close()
        return True

    async def _apply_pending(self, session: AcpSession) -> None:
        """After a turn: the mode or model chosen while it ran. Should that fail (the new
        model's provider cannot be built), the client is told the settings really in force."""
        wanted, session.pending = session.pending, {}
        if not wanted or self.sessions.get(session.id) is not session:
            return
        try:
            await self._reopen(session, agent=wanted.get("agent"), model=wanted.get("model"))
        except CoderESError as e:
            log.error("session %s keeps its mode and model: %s", session.id, e)
            await self._mode_changed(session, options=True)

    async def _mode_changed(self, session: AcpSession, *, options: bool = False) -> None:
        """Tell the client the session's mode, and with ``options`` its config options (a
        ``set_config_option`` response carries them itself)."""
        await self.client.session_update(
            session_id=session.id,
            update=CurrentModeUpdate(
                session_update="current_mode_update",
                current_mode_id=self._chosen(session)[0],
            ),
        )
        if options:
            await self.client.session_update(
                session_id=session.id,
                update=ConfigOptionUpdate(
                    session_update="config_option_update",
                    config_options=self._config_options(session),
                ),
            )

    async def set_session_mode(
        self, mode_id: str, session_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        session = self._session(session_id)
        if mode_id not in MODES:
            raise invalid_params(
                {"details": f"unknown mode {mode_id!r}; choose one of {', '.join(MODES)}"}
            )
        if await self._guard(self._reopen(session, agent=mode_id)):
            await self._mode_changed(session, options=True)
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        session = self._session(session_id)
        choices = {o.id: [c.value for c in o.options] for o in self._config_options(session)}
        if config_id not in choices:
            raise invalid_params(
                {"details": f"unknown option {config_id!r}; the options are mode and model"}
            )
        if value not in choices[config_id]:
            raise invalid_params(
                {"details": f"{value!r} is not a choice of the option {config_id!r}"}
            )
        if config_id == "mode":
            if await self._guard(self._reopen(session, agent=str(value))):
                await self._mode_changed(session)
        else:
            await self._guard(self._reopen(session, model=str(value)))
        return SetSessionConfigOptionResponse(config_options=self._config_options(session))

    async def _replay(self, session: AcpSession) -> None:
        items = session_history(self.runtime.app, session.id)
        blobs = self.runtime.app.blobs
        for update in m.replay(items, session.cwd, blobs.get):
            await self.client.session_update(session_id=session.id, update=update)

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """The sessions not deleted (of ``cwd`` when given), newest first, ``LIST_PAGE`` at a
        time (``_meta.pageSize`` asks for fewer); ``nextCursor`` names where the next page
        starts. With ``_meta.query``, only the sessions whose text matches it, best first, each
        with its hits in ``_meta.coderEs.hits``."""
        if cwd is not None and not Path(cwd).is_absolute():
            raise invalid_params({"details": f"cwd must be absolute, got {cwd!r}"})
        where = str(Path(cwd).resolve()) if cwd else None
        size = kwargs.get("pageSize", LIST_PAGE)
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= LIST_PAGE:
            raise invalid_params(
                {"details": f"_meta.pageSize must be a number from 1 to {LIST_PAGE}"}
            )
        app = self.runtime.app
        # Every session (deleted ones too) fixes the order a cursor points into, so deleting a
        # session between two pages moves nothing.
        ordered = app.list_sessions(archived=None)[::-1]
        matches: dict[str, list[dict[str, Any]]] | None = None
        if kwargs.get("query") is not None:
            try:
                # In a thread: the first search of a store indexes it, which must not stall
                # the sessions this agent is running.
                matches = await asyncio.to_thread(sessions_matching, app, kwargs["query"])
            except ClientError as e:
                raise invalid_params({"details": str(e)}) from e
            rank = {sid: i for i, sid in enumerate(matches)}
            ordered = sorted(
                (s for s in ordered if str(s.id) in rank), key=lambda s: rank[str(s.id)]
            )
        if cursor is not None:
            after = _cursor_session(cursor)
            ids = [str(s.id) for s in ordered]
            if after not in ids:
                raise invalid_params(
                    {"details": "the cursor is not one this agent gave (or its list changed)"}
                )
            ordered = ordered[ids.index(after) + 1 :]
        shown = [
            s
            for s in ordered
            if not s.archived and (where is None or str(Path(s.workspace).resolve()) == where)
        ]
        page, more = shown[:size], len(shown) > size
        infos = [
            SessionInfo(
                session_id=str(s.id),
                cwd=s.workspace,
                title=s.title or None,
                updated_at=self._last_activity(s.id, s.started_at).isoformat(),
                field_meta=None if matches is None else {"coderEs": {"hits": matches[str(s.id)]}},
            )
            for s in page
        ]
        next_cursor = _cursor_of(str(page[-1].id)) if more else None
        return ListSessionsResponse(sessions=infos, next_cursor=next_cursor)

    def _last_activity(self, session_id: Any, started: datetime) -> datetime:
        """When the session's last event was recorded (``updatedAt``: its last activity)."""
        try:
            last: list[Any] = list(self.runtime.app.events.get(session_id, desc=True, limit=1))
        except Exception:  # a damaged last event: the list still shows the session
            return started
        return cast(datetime, last[0].timestamp) if last else started

    async def delete_session(self, session_id: str, **kwargs: Any) -> DeleteSessionResponse:
        """Hide the session from ``session/list`` (and ``coder-es sessions``): an ``Archived``
        event; nothing is removed, ``session/load`` by its id still opens it and ``coder-es
        sessions --deleted`` lists it. A session this connection has open is closed first
        (refused while it runs a turn). Deleting an unknown or deleted session succeeds."""

        async def work() -> DeleteSessionResponse:
            app = self.runtime.app
            try:
                sid = UUID(session_id)
                app.get_session(sid)
            except (ValueError, SessionNotFoundError):
                return DeleteSessionResponse()
            session = self.sessions.get(str(sid))
            if session is not None:
                if session.handle.running:
                    raise UsageError("the session is running a turn; cancel it before deleting")
                del self.sessions[str(sid)]
                await session.handle.close()
            app.archive_session(sid, by="client")
            return DeleteSessionResponse()

        return await self._guard(work())

    async def fork_session(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> ForkSessionResponse:
        async def work() -> ForkSessionResponse:
            source = self.sessions.get(session_id)
            if source is not None and source.handle.running:
                raise UsageError("the session is running a turn; cancel it before forking")
            service, buffers = self._service(cwd)
            result = branch_ops.fork(
                self.runtime.app, service.workspace, session_id, None, new_session=True
            )
            if self.harness is not None:
                # The harness continues the fork from its node (coder_es.harness.resume).
                handle: Any = open_handle(self.runtime, service.workspace, None, result.session)
                options = self.runtime.options()
            else:
                handle, options = await self.runtime.open_stored(
                    service, result.session, mcp_servers=acp_mcp_servers(mcp_servers)
                )
            session = self._register(service, buffers, handle, mcp_servers, options)
            self._spawn(self._advertise(session.id))
            return ForkSessionResponse(session_id=session.id, **self._described(session))

        return await self._guard(work())

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise invalid_params(
                {"details": f"session {session_id} is not open: use session/new or session/load"}
            )
        return session

    # ------------------------------------------------------------------ prompts

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        text = prompt_text(prompt)
        words = _command_words(text)
        if words and words[0] == "pending":
            if not await self._tell_parked(session):
                await self._say(session, "No question of this session is waiting.")
            return PromptResponse(stop_reason="end_turn")
        if words and words[0] in PARKED_COMMANDS:
            return await self._answer_parked(session, words)
        if text.lstrip().startswith("/"):
            try:
                reply = await self._guard(self._command(session, text.strip()))
            except RequestError as e:
                if e.code != -32602:
                    raise
                # A mistake in the command (no node, an unknown one) is the user's to fix: an
                # answer, not a failed prompt (Toad shows a failed one as "failed to start").
                reply = f"{text.strip().split()[0]}: {e}"
            if reply is not None:
                await self._say(session, reply)
                return PromptResponse(stop_reason="end_turn")
        images = prompt_images(prompt)
        if not text.strip() and not images:
            raise invalid_params({"details": "the prompt has no text"})
        try:
            if due(self._parked(session), session.service.clock.now()):
                # A scheduled call whose time has come: the parked turn goes on first (its call
                # runs, its turn ends), within this prompt turn; then the prompt's own turn.
                await self._guard(self._turn(session, None, []))
            return await self._guard(self._turn(session, text, images))
        finally:
            await self._apply_pending(session)

    async def _answer_parked(self, session: AcpSession, words: list[str]) -> PromptResponse:
        """``/approve`` / ``/deny``: record the answer as ``coder-es approve`` / ``deny`` do
        (who and from where, under the session lease), then continue the parked turn in this
        prompt turn. A call that is not waiting is said, and nothing is recorded."""
        name, args = words[0], words[1:]
        always, message, calls = False, None, []
        i = 0
        while i < len(args):
            if args[i] == "--always" and name == "approve":
                always = True
            elif args[i] == "--message" and name == "deny" and i + 1 < len(args):
                i += 1
                message = args[i]
            else:
                calls.append(args[i])
            i += 1
        try:
            if session.handle.running:
                raise UsageError("a turn is running; its questions are asked, not parked")
            done = answer_parked(
                self.runtime.app,
                session.id,
                calls,
                decision="allow" if name == "approve" else "deny",
                by=origin("coder-es acp"),
                always=always,
                message=message,
            )
        except CoderESError as e:
            await self._say(session, f"/{name}: {e}")
            return PromptResponse(stop_reason="end_turn")
        verb = "allowed" + (" always" if always else "") if name == "approve" else "denied"
        await self._say(session, "\n".join(f"{verb} `{q.call}` {q.tool}" for q in done))
        try:
            return await self._guard(self._turn(session, None, []))
        finally:
            await self._apply_pending(session)

    async def _turn(
        self, session: AcpSession, text: str | None, images: list[tuple[str, bytes]]
    ) -> PromptResponse:
        """A prompt turn: a new message, or (``text`` None) the parked turn taken up again."""
        handle = session.handle
        error: str | None = None
        # A bad image (not PNG/JPEG/GIF/WebP, too large) raises here, before anything is recorded.
        updates = (
            handle.resume(answerer=self._answerer(session))
            if text is None
            else handle.send(text, images=images, answerer=self._answerer(session))
        )
        try:
            async for update in updates:
                if isinstance(update, up.Error) and not update.retryable:
                    error = f"{update.kind}: {update.message}"
                await self._forward(session, update)
        finally:
            self.runtime.end_turn(handle.id)
        outcome = handle.outcome
        reason = outcome.reason if outcome is not None else "cancelled"
        if reason == "waiting":
            await self._tell_parked(session)
        if reason == "error":
            raise internal_error(
                {"details": error or (outcome and outcome.error) or "the turn failed"}
            )
        return PromptResponse(stop_reason=STOP_REASONS.get(reason, "end_turn"))  # type: ignore[arg-type]

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.handle.cancel("cancelled by the client")

    async def _say(self, session: AcpSession, text: str) -> None:
        await self.client.session_update(
            session_id=session.id,
            update=AgentMessageChunk(
                session_update="agent_message_chunk",
                content=TextContentBlock(type="text", text=text),
            ),
        )

    # ------------------------------------------------------------------ updates

    async def _current(self, session: AcpSession, path: str) -> str | None:
        """The file as the user sees it: the editor's buffer when it offers one, else the disk."""
        where = Path(path) if Path(path).is_absolute() else session.cwd / path
        if session.buffers is not None and self.fs_read:
            try:
                return await session.buffers.read(where)
            except RequestError:
                pass
        data = read_current(where)
        return decode_text(data) if data is not None else None

    async def _announce(
        self,
        session: AcpSession,
        tool_use_id: str,
        name: str,
        inp: dict[str, Any],
        status: m.Status,
    ) -> None:
        if tool_use_id not in session.started:
            session.started.add(tool_use_id)
            await self.client.session_update(
                session_id=session.id, update=m.start(tool_use_id, name, inp, session.cwd, status)
            )
        session.announced.setdefault(tool_use_id, asyncio.Event()).set()

    def _call_input(self, session: AcpSession, tool_use_id: str) -> tuple[str, dict[str, Any]]:
        call = session.handle.loop.state.calls.get(tool_use_id)
        return (call.name, dict(call.input)) if call is not None else ("tool", {})

    async def _forward(self, session: AcpSession, update: up.Update) -> None:
        sid = session.id
        client = self.client
        if isinstance(update, up.TextDelta):
            await client.session_update(
                session_id=sid,
                update=AgentMessageChunk(
                    session_update="agent_message_chunk",
                    content=TextContentBlock(type="text", text=update.text),
                ),
            )
        elif isinstance(update, up.ThinkingDelta):
            await client.session_update(
                session_id=sid,
                update=AgentThoughtChunk(
                    session_update="agent_thought_chunk",
                    content=TextContentBlock(type="text", text=update.text),
                ),
            )
        elif isinstance(update, up.PermissionRequired):
            await self._announce(session, update.tool_use_id, update.tool, update.input, "pending")
            session.shown.setdefault(update.tool_use_id, asyncio.Event()).set()
        elif isinstance(update, up.PermissionDecision):
            name, inp = self._call_input(session, update.tool_use_id)
            await self._announce(session, update.tool_use_id, name, inp, "pending")
        elif isinstance(update, up.ToolStarted):
            await self._announce(
                session, update.tool_use_id, update.name, update.input, "in_progress"
            )
            await client.session_update(
                session_id=sid,
                update=ToolCallProgress(
                    session_update="tool_call_update",
                    tool_call_id=update.tool_use_id,
                    status="in_progress",
                ),
            )
        elif isinstance(update, up.ToolProgress):
            seen = (session.progress.get(update.tool_use_id, "") + update.text)[-4000:]
            session.progress[update.tool_use_id] = seen
            await client.session_update(
                session_id=sid,
                update=ToolCallProgress(
                    session_update="tool_call_update",
                    tool_call_id=update.tool_use_id,
                    content=[m.text_content(seen)],
                ),
            )
        elif isinstance(update, up.ToolCompleted):
            name, inp = self._call_input(session, update.tool_use_id)
            await self._announce(session, update.tool_use_id, update.name or name, inp, "pending")
            session.progress.pop(update.tool_use_id, None)
            session.announced.pop(update.tool_use_id, None)
            await client.session_update(
                session_id=sid,
                update=m.finish(
                    update.tool_use_id,
                    update.output,
                    update.is_error,
                    update.files_changed,
                    session.cwd,
                    self.runtime.app.blobs.get,
                    terminal=update.metadata.get("terminal"),
                    summary=str(update.metadata.get("summary", "")),
                ),
            )
        elif (
            isinstance(update, up.ModelResponse)
            and update.usage
            and not isinstance(session.handle, HarnessHandle)
        ):
            await client.session_update(session_id=sid, update=self._usage(session, update.usage))
        elif isinstance(update, up.Retry):
            await client.session_update(
                session_id=sid,
                update=AgentThoughtChunk(
                    session_update="agent_thought_chunk",
                    content=TextContentBlock(
                        type="text", text=f"(retrying in {update.delay_s:.1f}s: {update.reason})\n"
                    ),
                ),
            )

    def _cost(self, model: str, usage: dict[str, Any]) -> Decimal | None:
        return self.runtime.config.price_table().cost(model, usage_from(usage))

    def _spent(self, session_id: str) -> Decimal | None:
        """What the recorded model responses cost (a loaded session's earlier turns count)."""
        app = self.runtime.app
        total: Decimal | None = Decimal(0)
        for e in app.session_events(app.resolve_session(session_id)):
            if type(e).__name__ == "ModelResponded" and total is not None:
                cost = self._cost(e.model, e.usage)
                total = None if cost is None else total + cost
        return total

    def _usage(self, session: AcpSession, usage: dict[str, int]) -> UsageUpdate:
        """The context the last request filled (what it read and what it wrote, all of which
        the next request carries) against the model's context window, and what the session
        cost so far when every model it used has a known price."""
        model = session.handle.opened().model
        cost = self._cost(model, usage)
        session.spent = None if cost is None or session.spent is None else session.spent + cost
        used = sum(
            usage.get(k, 0)
            for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
        )
        size = session.service.models.info(model).context_window
        return UsageUpdate(
            session_update="usage_update",
            used=used,
            size=size,
            cost=None
            if session.spent is None
            else Cost(amount=float(session.spent), currency="USD"),
        )

    # ------------------------------------------------------------------ permissions

    def _answerer(
        self, session: AcpSession
    ) -> Callable[[up.PermissionRequired], Awaitable[PermissionAnswer]]:
        async def answer(question: up.PermissionRequired) -> PermissionAnswer:
            # The question goes out after the tool_call it refers to (and everything before it).
            await session.shown.setdefault(question.tool_use_id, asyncio.Event()).wait()
            loop = session.handle.loop
            if (
                not isinstance(session.handle, HarnessHandle)
                and question.tool_use_id in loop.state.calls
            ):  # this session's call, its views (a harness's own tools are not ours)
                refusal = certain_refusal(question.tool, question.input, loop.workspace)
                if refusal is not None:
                    # Not asked: the tool would refuse it anyway; nothing runs either way.
                    return PermissionAnswer.reject(refusal, decided_by="coder-es")
            path = question.input.get("path")
            current = None
            if question.tool in ("write", "edit") and isinstance(path, str) and path:
                current = await self._current(session, path)
            diff = m.proposed_diff(question.tool, question.input, session.cwd, current)
            response = await self.client.request_permission(
                session_id=session.id,
                tool_call=ToolCallUpdate(
                    tool_call_id=question.tool_use_id,
                    title=m.tool_title(question.tool, question.input),
                    kind=m.tool_kind(question.tool),
                    status="pending",
                    raw_input=question.input,
                    content=[diff] if diff is not None else None,
                    locations=m.locations(question.tool, question.input, session.cwd) or None,
                ),
                options=permission_options(question),
            )
            outcome = response.outcome
            if not isinstance(outcome, AllowedOutcome):
                # The client cancelled the prompt turn: cancel it here too; the cancellation
                # lands on the wait below and is recorded by the loop.
                session.handle.cancel("cancelled by the client")
                await asyncio.Event().wait()
            assert isinstance(outcome, AllowedOutcome)
            return answer_for(outcome.option_id, question)

        return answer

    # ------------------------------------------------------------------ slash commands

    async def _command(self, session: AcpSession, text: str) -> str | None:
        """Run one of ``COMMANDS`` (or ``/checkout``); None if ``text`` is not one. A branch move
        is also shown as a finished tool call listing the files it restored."""
        try:
            words = shlex.split(text[1:])
        except ValueError as e:
            raise UsageError(f"cannot parse the command: {e}") from e
        if not words or words[0] not in {c[0] for c in COMMANDS} | {"checkout"}:
            return None
        name, args = words[0], words[1:]
        app, cwd = self.runtime.app, session.cwd
        if name == "tree":
            return m.code_block(branch_ops.tree_text(app, cwd, session.id))
        if name == "search":
            return self._search(session, " ".join(args))
        if name == "diff":
            if not 1 <= len(args) <= 2:
                raise UsageError("/diff needs NODE_A [NODE_B] (default HEAD); see /tree")
            return m.code_block(
                branch_ops.diff_text(app, cwd, session.id, args[0], (args[1:] or ["HEAD"])[0])
            )
        if session.handle.running:
            raise UsageError("a turn is running; cancel it first")
        flags = {a for a in args if a.startswith("--")}
        nodes = [a for a in args if not a.startswith("--")]
        if name == "label":
            if len(nodes) != 2:
                raise UsageError("/label needs NODE NAME; see /tree")
            return branch_ops.label(app, cwd, session.id, nodes[0], nodes[1]).describe()
        if name == "fork":
            result = branch_ops.fork(
                app,
                cwd,
                session.id,
                nodes[0] if nodes else None,
                new_session="--new-session" in flags,
            )
        else:
            if len(nodes) != 1:
                raise UsageError(f"/{name} needs one NODE (a node id or label); see /tree")
            if name in ("switch", "checkout"):
                result = branch_ops.switch(app, cwd, session.id, nodes[0])
            else:
                only_c, only_f = "--conversation" in flags, "--files" in flags
                result = branch_ops.rewind(
                    app,
                    cwd,
                    session.id,
                    nodes[0],
                    conversation=only_c or not only_f,
                    files=only_f or not only_c,
                )
        if result.forked_from is not None:
            # The sessions share one working tree, which now holds the new session's start
            # (branching.fork records that on this session too): say so, files listed below.
            at = result.forked_from[1]
            where = (
                f"the working tree was restored to node {at} for it (the files below); "
                if result.files
                else f"the working tree already held the files of node {at}; "
            )
            lines = [
                f"Forked into a new session {result.session} at node {at}; load that session "
                f"to continue there. {where[0].upper()}{where[1:]}this session's conversation "
                "and head are unchanged."
            ]
        else:
            session.handle.reload()
            session.started.clear()
            session.shown.clear()
            session.announced.clear()
            lines = [f"{result.reason}: head {result.previous} -> {result.node}"]
        for f in result.files:
            lines.append(f"  {f.outcome:9} {f.path}" + (f" ({f.detail})" if f.detail else ""))
        if result.conflicts:
            lines.append(
                "Files left as you have them (conflicts): "
                + ", ".join(c.path for c in result.conflicts)
            )
        # The sentence as prose, the file list as a code block (its columns and lines kept).
        reply = lines[0] + ("\n\n" + m.code_block("\n".join(lines[1:])) if lines[1:] else "")
        session.moves += 1
        call = m.move_call(f"{result.reason}-{session.moves}", result, reply, cwd)
        await self.client.session_update(session_id=session.id, update=call)
        return reply

    def _search(self, session: AcpSession, text: str) -> str:
        if not text.strip():
            raise UsageError("/search needs the text to look for")
        try:
            hits = search_hits(self.runtime.app, text, session=session.id)
        except ClientError as e:
            raise UsageError(str(e)) from e
        if not hits:
            return f"no match for {text!r} in this session"
        return m.code_block(
            "\n".join(
                f"{h['node']:>6} {h['kind']:<11} {' '.join(str(h['snippet']).split())}"
                for h in hits
            )
        )

    def config_changed(self, config: Config, sections: list[str]) -> None:
        if "permissions" in sections:
            self.runtime.update_sessions(s.handle for s in self.sessions.values())
        log.warning("configuration reloaded (%s)", ", ".join(sections) or "no effective change")

    async def close(self) -> None:
        for session in self.sessions.values():
            await session.handle.close()
        self.sessions.clear()


def route_session_delete(conn: AgentSideConnection, agent: CoderAcpAgent) -> bool:
    """Give ``session/delete`` (stable in ACP schema 1.21; its request model is in the package's
    schema) a route to ``agent.delete_session``: the package's router (0.12.1) has none, and it
    answers a method it has no route for with "method not found" before any hook of ours.

    The router is the package's own ``MessageRouter``, reached through the connection; if a
    later version keeps it elsewhere, nothing is routed and False says not to advertise it."""
    router = getattr(getattr(conn, "_conn", None), "_handler", None)
    if not isinstance(router, MessageRouter):
        log.warning("session/delete is not offered: the acp package's router was not found")
        return False
    router.route_request(
        AGENT_METHODS["session_delete"],
        DeleteSessionRequest,
        agent,
        "delete_session",
        adapt_result=normalize_result,
    )
    return True


async def _in_flight_answered(conn: AgentSideConnection) -> None:
    # The package keeps its request tasks in a private supervisor; without it (another version of
    # the package) this returns at once, as before.
    supervisor = getattr(getattr(conn, "_conn", None), "_tasks", None)
    tasks: set[asyncio.Task[Any]] = getattr(supervisor, "_tasks", set())
    while requests := [t for t in tasks if t.get_name() == "acp.Connection.request"]:
        await asyncio.gather(*requests, return_exceptions=True)


async def _run_guarded(agent: CoderAcpAgent) -> None:
    """The package's ``run_agent`` on stdio, with ``LineGuard`` between stdin and the package
    (a stray line gets its JSON-RPC error instead of ending the process) and the routes the
    package lacks (``route_session_delete``)."""
    reader, writer = await any_stdio_streams(DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    guard = LineGuard(reader, writer, limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    pump = asyncio.create_task(guard.pump())
    one_line = ProtocolErrorsOnOneLine()
    logging.getLogger().addFilter(one_line)
    try:
        conn = AgentSideConnection(
            cast(Agent, agent),
            writer,
            guard.reader,
            listening=False,
            use_unstable_protocol=True,
        )
        agent.can_delete = route_session_delete(conn, agent)
        try:
            await conn.listen()
            # The client closed its side (the end of `coder-es acp < requests.jsonl`): answer what
            # it asked before that instead of cancelling it. Calls back to the client fail at
            # once now, so this ends.
            await _in_flight_answered(conn)
        finally:
            await asyncio.shield(conn.close())
    finally:
        logging.getLogger().removeFilter(one_line)
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)


async def serve_stdio(runtime: ClientRuntime, *, watch: bool = True, harness: Any = None) -> None:
    """Run the agent on this process's stdin/stdout until the client closes them
    (``harness``: a ``HarnessSpec`` whose CLI runs the sessions)."""
    agent = CoderAcpAgent(runtime, harness)
    if watch:
        loop = asyncio.get_running_loop()
        runtime.watch(
            loop,
            on_change=agent.config_changed,
            on_error=lambda e: log.error(
                "configuration not reloaded, keeping the last good one: %s", e
            ),
        )
    try:
        # The methods we do not implement answer "method not found": the router looks handlers
        # up by name, so a partial Agent is what the package expects.
        await _run_guarded(agent)
    finally:
        runtime.close()
        await agent.close()


def _command_words(text: str) -> list[str] | None:
    """A slash command's words (without the slash); None if ``text`` is not one or does not
    parse (the generic command path says why)."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    try:
        return shlex.split(stripped[1:])
    except ValueError:
        return None
