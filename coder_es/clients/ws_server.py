"""``coder-es serve``: sessions over WebSocket (protocol in ``ws_protocol``, docs/clients.md).

One ``ServerSession`` per open session, independent of connections: a turn keeps running when
its client drops, its messages go to a bounded buffer, and a client that reconnects with the
resume token (``?resume=TOKEN&last_seq=N``) gets what it missed, then every approval still
waiting for an answer. A session nobody resumes within ``detach_timeout`` is closed (a running
turn is cancelled and recorded as such); it stays in the store and can be opened again with
``?session=ID``.

Permission questions: the server's rules (``[serve.rules]``, hot-reloaded) answer first, then the
connected client does (``awaiting_approval`` / ``tool_decision``).

Only the user drives the agent, loopback included (any local process and any web page the user
visits can reach 127.0.0.1). Every connection must present the token (``Authorization: Bearer
TOKEN`` or ``?token=TOKEN``, compared in constant time; HTTP 401 otherwise): ``serve.token`` /
``$CODER_ES_SERVE_TOKEN``, else one generated at start and printed as a URL, as Jupyter does. A
request with a browser ``Origin`` is refused (HTTP 403) unless ``serve.allowed_origins`` lists
it; a program sends no Origin and needs only the token. Limits (``[serve]``, docs/clients.md):
concurrent connections (HTTP 503 / close 1013 beyond), frame size (close 1009), messages per
second per connection (``rate_limited``), sessions created per connection (``limit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from coder_es.agent import updates as up
from coder_es.agent.origin import origin
from coder_es.clients import branch_ops
from coder_es.clients import ws_protocol as p
from coder_es.clients.errors import ClientError, ServeSetupError
from coder_es.clients.history import session_history
from coder_es.clients.runtime import ClientRuntime
from coder_es.clients.search_ops import search_hits
from coder_es.config import Config, ConfigError
from coder_es.errors import CoderESError, UsageError
from coder_es.permissions.policy import PermissionAnswer
from coder_es.service.api import AgentService, SessionHandle
from coder_es.service.waiting import answer as answer_parked
from coder_es.service.waiting import due, pending_of

log = logging.getLogger(__name__)

DEFAULT_BUFFER = 10_000
DEFAULT_DETACH_TIMEOUT = 600.0


@dataclass
class _Pending:
    future: asyncio.Future[PermissionAnswer]
    message: dict[str, Any] | None = None
    """The ``awaiting_approval`` as published (with its seq); None until published."""


@dataclass
class _Budget:
    """One connection's allowances: a token bucket of messages (``rate`` per second, bursts of
    as many) and the sessions it may still create."""

    rate: float
    sessions_left: int
    tokens: float = 0.0
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.tokens = self.rate

    def take_message(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def take_session(self) -> bool:
        if self.sessions_left <= 0:
            return False
        self.sessions_left -= 1
        return True


@dataclass
class ServerSession:
    handle: SessionHandle
    service: AgentService
    resume_token: str
    buffer_size: int
    seq: int = 0
    outbox: deque[dict[str, Any]] = field(default_factory=deque)
    conn: ServerConnection | None = None
    pending: dict[str, _Pending] = field(default_factory=dict)
    auto: set[str] = field(default_factory=set)
    turn: asyncio.Task[None] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    detach_timer: asyncio.TimerHandle | None = None

    @property
    def id(self) -> str:
        return self.handle.id

    @property
    def running(self) -> bool:
        return self.turn is not None and not self.turn.done()

    async def publish(self, msg: dict[str, Any]) -> None:
        """Append to the session's stream (buffered for resume) and send if someone listens."""
        async with self.lock:
            self.seq += 1
            msg["seq"] = self.seq
            self.outbox.append(msg)
            while len(self.outbox) > self.buffer_size:
                self.outbox.popleft()
            conn = self.conn
            if conn is not None:
                with contextlib.suppress(ConnectionClosed):
                    await conn.send(json.dumps(msg))

    async def reply(self, conn: ServerConnection, msg: dict[str, Any]) -> None:
        with contextlib.suppress(ConnectionClosed):
            await conn.send(json.dumps(msg))


class WsServer:
    def __init__(
        self,
        runtime: ClientRuntime,
        *,
        host: str | None = None,
        port: int | None = None,
        token: str | None = None,
        buffer_size: int = DEFAULT_BUFFER,
        detach_timeout: float = DEFAULT_DETACH_TIMEOUT,
    ) -> None:
        serve_config = runtime.config.serve
        self.runtime = runtime
        self.host = host if host is not None else serve_config.host
        self.port = port if port is not None else serve_config.port
        configured = token if token is not None else serve_config.token
        if not _loopback(self.host) and not configured:
            msg = (
                f"refusing to listen on {self.host}: it accepts connections from other machines, "
                "so a token is required (serve.token in the user config or $CODER_ES_SERVE_TOKEN)"
            )
            raise ServeSetupError(msg)
        self.token_generated = not configured
        self.token: str = configured or secrets.token_urlsafe(32)
        self.limits = serve_config
        self.active = 0
        """Connections past the handshake whose handler has not ended."""
        self.buffer_size = buffer_size
        self.detach_timeout = detach_timeout
        self.sessions: dict[str, ServerSession] = {}
        self.by_token: dict[str, ServerSession] = {}
        self._server: Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> WsServer:
        self._server = await serve(
            self._handler,
            self.host,
            self.port,
            process_request=self._authorize,
            # Larger frames close the connection (1009) before they are buffered whole.
            max_size=self.limits.max_frame_bytes,
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        return self

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}/"

    @property
    def url(self) -> str:
        """The address with the token: what a client connects to."""
        return f"{self.address}?token={self.token}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for session in list(self.sessions.values()):
            await self._drop(session)

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    # ------------------------------------------------------------------ connections

    def _authorize(self, conn: ServerConnection, request: Request) -> Response | None:
        """Refuse at the handshake: a browser origin not listed (403), a missing or wrong token
        (401), too many connections (503). Nothing of the server is reached before this."""
        origins = request.headers.get_all("Origin")
        allowed = self.runtime.config.serve.allowed_origins
        if len(origins) > 1 or (origins and origins[0] not in allowed):
            log.warning("refused a connection from origin %s", ", ".join(origins))
            return conn.respond(
                HTTPStatus.FORBIDDEN,
                "this origin may not connect (list it in serve.allowed_origins)\n",
            )
        if not _token_ok(request, self.token):
            return conn.respond(HTTPStatus.UNAUTHORIZED, "a valid token is required\n")
        if self.active >= self.limits.max_connections:
            return conn.respond(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections\n")
        return None

    async def _open(
        self, query: dict[str, list[str]], budget: _Budget
    ) -> tuple[ServerSession, bool]:
        def one(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        resume, ref = one("resume"), one("session")
        if resume is not None:
            session = self.by_token.get(resume)
            if session is None:
                raise ClientError(
                    "unknown or expired resume token; open the session again with ?session=ID",
                    code="bad_resume_token",
                )
            return session, True
        service = self.runtime.service()
        if ref is not None:
            sid = str(self.runtime.app.resolve_session(ref))
            if sid in self.sessions:
                raise ClientError(
                    f"session {sid} is already open on this server; resume it with its token",
                    code="session_busy",
                )
            handle, _options = await self.runtime.open_stored(service, sid)
        else:
            budget.take_session()  # the connection's own session counts (the limit is >= 1)
            handle = await service.create_session(self.runtime.options())
        session = ServerSession(handle, service, secrets.token_urlsafe(24), self.buffer_size)
        self.sessions[session.id] = session
        self.by_token[session.resume_token] = session
        return session, False

    async def _handler(self, conn: ServerConnection) -> None:
        # Counted here, where no await separates the check from the increment: handshakes
        # that passed _authorize together cannot all get in.
        if self.active >= self.limits.max_connections:
            await conn.close(1013, "too many connections")
            return
        self.active += 1
        try:
            await self._serve_connection(conn)
        finally:
            self.active -= 1

    async def _serve_connection(self, conn: ServerConnection) -> None:
        query = parse_qs(urlsplit(conn.request.path if conn.request else "/").query)
        budget = _Budget(
            float(self.limits.max_messages_per_second), self.limits.max_sessions_per_connection
        )
        try:
            session, resumed = await self._open(query, budget)
        except (ClientError, CoderESError) as e:
            code = e.code if isinstance(e, ClientError) else "cannot_open"
            with contextlib.suppress(ConnectionClosed):
                await conn.send(json.dumps(p.error(str(e), code=code, fatal=True)))
                await conn.close(1008, code)
            return
        await self._attach(session, conn, resumed, _int((query.get("last_seq") or ["0"])[0]))
        if not session.running and self._due(session):
            # A scheduled call whose time has come while nobody ran the session: the parked
            # turn goes on now, streamed to the client that opened it (as a worker would).
            session.turn = asyncio.create_task(self._turn(session, None))
        try:
            async for raw in conn:
                if budget.take_message():
                    await self._dispatch(session, conn, raw, budget)
                else:
                    await session.reply(conn, _rate_limited(raw, budget.rate))
        except ConnectionClosed:
            pass
        finally:
            if session.conn is conn:
                session.conn = None
                self._arm_detach(session)

    async def _attach(
        self, session: ServerSession, conn: ServerConnection, resumed: bool, last_seq: int
    ) -> None:
        if session.detach_timer is not None:
            session.detach_timer.cancel()
            session.detach_timer = None
        async with session.lock:
            previous, session.conn = session.conn, conn
            if previous is not None and previous is not conn:
                # One connection per session: the newer one takes over (a reconnect that came
                # before the server noticed the old one was gone).
                await previous.close(4000, "replaced by a newer connection")
            opened = session.handle.opened()
            hello = p.message(
                "connected",
                protocol=p.PROTOCOL_VERSION,
                session_id=session.id,
                resume_token=session.resume_token,
                resumed=resumed,
                last_seq=session.seq,
                running=session.running,
                agent=opened.agent,
                provider=opened.provider,
                model=opened.model,
                workspace=opened.workspace,
                # Questions a parked turn waits for (from this or any process): answer them
                # with answer_parked.
                parked_questions=self._parked(session),
            )
            try:
                await conn.send(json.dumps(hello))
                if resumed:
                    await self._catch_up(session, conn, last_seq)
            except ConnectionClosed:
                return

    async def _catch_up(
        self, session: ServerSession, conn: ServerConnection, last_seq: int
    ) -> None:
        """Called under the session lock: nothing new is published in between."""
        first = session.outbox[0]["seq"] if session.outbox else session.seq + 1
        if last_seq + 1 < first:
            await conn.send(
                json.dumps(
                    p.error(
                        f"messages {last_seq + 1}..{first - 1} are no longer buffered; "
                        "send get_history for the conversation so far",
                        code="missed_messages",
                    )
                )
            )
        for msg in session.outbox:
            if msg["seq"] > last_seq:
                await conn.send(json.dumps(msg))
        for pending in session.pending.values():
            if pending.message is not None and pending.message["seq"] <= last_seq:
                await conn.send(json.dumps({**pending.message, "resent": True}))

    def _arm_detach(self, session: ServerSession) -> None:
        def expire() -> None:
            if session.conn is None:
                self._spawn(self._drop(session))

        session.detach_timer = asyncio.get_running_loop().call_later(self.detach_timeout, expire)

    async def _drop(self, session: ServerSession) -> None:
        self.sessions.pop(session.id, None)
        self.by_token.pop(session.resume_token, None)
        if session.detach_timer is not None:
            session.detach_timer.cancel()
        turn = session.turn
        await session.handle.close()
        if turn is not None:
            await asyncio.gather(turn, return_exceptions=True)

    # ------------------------------------------------------------------ client messages

    async def _dispatch(
        self, session: ServerSession, conn: ServerConnection, raw: Any, budget: _Budget
    ) -> None:
        re = None
        try:
            msg = p.parse_client_message(raw)
            re = msg.id
            await self._handle(session, conn, msg, budget)
        except ClientError as e:
            await session.reply(conn, p.error(str(e), code=e.code, re=e.re if re is None else re))
        except CoderESError as e:
            await session.reply(conn, p.error(str(e), code="failed", re=re))

    async def _handle(
        self, session: ServerSession, conn: ServerConnection, m: p.ClientMessage, budget: _Budget
    ) -> None:
        if m.type == "send_message":
            if session.running:
                raise ClientError(
                    "a turn is already running; wait for finished or cancel it", "busy"
                )
            text = m.str_field("text") or ""
            session.turn = asyncio.create_task(self._send(session, text))
        elif m.type == "tool_decision":
            tool_use_id = m.str_field("tool_use_id") or ""
            pending = session.pending.get(tool_use_id)
            if pending is None or pending.future.done():
                raise ClientError(f"no approval is pending for {tool_use_id!r}", "not_pending")
            pending.future.set_result(p.decision_answer(m))
        elif m.type == "answer_parked":
            await self._answer_parked(session, conn, m)
        elif m.type == "cancel":
            if not session.handle.cancel("cancelled by the client"):
                raise ClientError("no turn is running", "not_running")
        elif m.type == "get_history":
            items = session_history(self.runtime.app, session.id)
            await session.reply(
                conn,
                p.message(
                    "history", re=m.id, session_id=session.id, items=[i.to_dict() for i in items]
                ),
            )
        elif m.type == "get_state":
            await session.reply(conn, self._state(session, m.id))
        elif m.type == "search":
            scope = m.str_field("session", required=False)
            hits = await asyncio.to_thread(  # indexing must not stall the other sessions
                search_hits,
                self.runtime.app,
                m.fields.get("query"),
                session=str(self.runtime.app.resolve_session(scope)) if scope else None,
                kind=m.fields.get("kind"),
                limit=m.fields.get("limit", 20),
            )
            await session.reply(conn, p.message("search_results", re=m.id, hits=hits))
        else:
            await self._branch(session, conn, m, budget)

    def _state(self, session: ServerSession, re: Any) -> dict[str, Any]:
        st = session.handle.loop.state
        return p.message(
            "state",
            re=re,
            session_id=session.id,
            head=st.head,
            running=session.running,
            last_seq=session.seq,
            pending_approvals=[
                pd.message for pd in session.pending.values() if pd.message is not None
            ],
            parked_questions=self._parked(session),
            agent=session.handle.opened().agent,
            provider=st.provider,
            model=st.model,
            usage=dict(session.usage),
        )

    def _due(self, session: ServerSession) -> bool:
        """A scheduled call of the session's parked turn is due by the loop's clock."""
        now = session.service.clock.now()
        return bool(due(pending_of(self.runtime.app, session.id), now))

    async def _send(self, session: ServerSession, text: str) -> None:
        """A new message. A parked turn whose scheduled call has come due meanwhile is taken up
        first (its call runs, its turn ends), so that the message does not abandon a call the
        rules allowed at this time; then the message's turn."""
        if self._due(session):
            await self._turn(session, None)
        await self._turn(session, text)

    def _parked(self, session: ServerSession) -> list[dict[str, Any]]:
        """The session's parked questions as the log has them now (another process may have
        parked or answered them since this server loaded the session)."""
        return [q.to_dict() for q in pending_of(self.runtime.app, session.id)]

    async def _answer_parked(
        self, session: ServerSession, conn: ServerConnection, m: p.ClientMessage
    ) -> None:
        """Record the answer as ``coder-es approve`` / ``deny`` do (under the session lease,
        who and from where), then continue the turn here unless ``continue`` is false."""
        if session.running:
            raise ClientError("a turn is running; its questions are asked, not parked", "busy")
        a = p.parked_answer(m)
        try:
            done = answer_parked(
                self.runtime.app,
                session.id,
                list(a.calls),
                decision=a.decision,
                by=origin("coder-es serve"),
                always=a.always,
                message=a.message,
            )
        except UsageError as e:
            raise ClientError(str(e), "not_waiting") from e
        await session.reply(
            conn, p.message("answered", re=m.id, answered=[q.to_dict() for q in done])
        )
        if a.continue_turn:
            session.turn = asyncio.create_task(self._turn(session, None))

    async def _branch(
        self, session: ServerSession, conn: ServerConnection, m: p.ClientMessage, budget: _Budget
    ) -> None:
        if session.running:
            raise ClientError(f"a turn is running; cancel it before {m.type}", "busy")
        app, where = self.runtime.app, session.service.workspace
        if m.type == "fork":
            new_session = m.bool_field("new_session", False)
            if new_session and not budget.take_session():
                limit = self.limits.max_sessions_per_connection
                raise ClientError(
                    f"this connection has created {limit} sessions (serve."
                    "max_sessions_per_connection); open another connection for more",
                    "limit",
                )
            result = branch_ops.fork(
                app,
                where,
                session.id,
                m.str_field("node", required=False),
                new_session=new_session,
            )
        elif m.type == "switch":
            result = branch_ops.switch(app, where, session.id, m.str_field("node") or "")
        else:
            result = branch_ops.rewind(
                app,
                where,
                session.id,
                m.str_field("node") or "",
                conversation=m.bool_field("conversation", True),
                files=m.bool_field("files", True),
            )
        if result.forked_from is None:
            session.handle.reload()
        await session.reply(conn, p.message("moved", re=m.id, **result.to_json()))

    # ------------------------------------------------------------------ turns

    async def _turn(self, session: ServerSession, text: str | None) -> None:
        """A turn: a new message, or (``text`` None) the parked turn taken up again."""
        turn_usage: dict[str, int] = {}
        answerer = self._answerer(session)
        try:
            updates = (
                session.handle.resume(answerer=answerer)
                if text is None
                else session.handle.send(text, answerer=answerer)
            )
            async for update in updates:
                await self._forward(session, update, turn_usage)
        except CoderESError as e:
            await session.publish(p.error(str(e), code="turn_failed"))
        except Exception as e:  # a bug: the client must still learn the turn is over
            log.exception("turn of session %s failed", session.id)
            await session.publish(p.error(f"internal error: {e}", code="internal", fatal=False))
        finally:
            p.add_usage(session.usage, turn_usage)
            self.runtime.end_turn(session.handle.id)

    async def _forward(
        self, session: ServerSession, update: up.Update, turn_usage: dict[str, int]
    ) -> None:
        if isinstance(update, up.PermissionRequired):
            if update.tool_use_id in session.auto:
                session.auto.discard(update.tool_use_id)
                return
            msg = p.awaiting_approval(update)
            pending = session.pending.get(update.tool_use_id)
            await session.publish(msg)
            if pending is not None:
                pending.message = msg
            return
        out = p.from_update(update, turn_usage)
        if out is None:
            return
        await session.publish(out)
        if isinstance(update, up.ModelResponse) and update.tool_calls:
            info = session.handle.loop.state.responses.get(update.node)
            for call_id, name, inp in info.tool_uses if info is not None else []:
                await session.publish(p.tool_request(call_id, name, inp, update.node))

    def _answerer(self, session: ServerSession) -> Any:
        async def answer(question: up.PermissionRequired) -> PermissionAnswer:
            decided = self.runtime.filter.decide(question)
            if decided is not None:
                # Runs before the question is forwarded (same task, no await yet): the
                # forwarder sees the mark and does not ask the client.
                session.auto.add(question.tool_use_id)
                return decided
            future: asyncio.Future[PermissionAnswer] = asyncio.get_running_loop().create_future()
            session.pending[question.tool_use_id] = _Pending(future)
            try:
                return await future
            finally:
                session.pending.pop(question.tool_use_id, None)

        return answer

    # ------------------------------------------------------------------ configuration

    async def broadcast(self, msg: dict[str, Any]) -> None:
        for session in list(self.sessions.values()):
            if session.conn is not None:
                await session.reply(session.conn, dict(msg))

    def config_changed(self, config: Config, sections: list[str]) -> None:
        if "permissions" in sections:
            self.runtime.update_sessions(s.handle for s in self.sessions.values())
        log.warning("configuration reloaded (%s)", ", ".join(sections) or "no effective change")
        self._spawn(self.broadcast(p.message("config_reloaded", sections=sections)))

    def config_failed(self, error: ConfigError) -> None:
        log.error("configuration not reloaded, keeping the last good one: %s", error)
        self._spawn(
            self.broadcast(
                p.error(
                    f"the configuration was not reloaded (the last good one stays): {error}",
                    code="config",
                )
            )
        )


def _token_ok(request: Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    given: str | None = value.strip() if scheme.lower() == "bearer" else None
    if given is None:
        tokens = parse_qs(urlsplit(request.path).query).get("token")
        given = tokens[0] if tokens else None
    # compare_digest: the time taken does not tell how much of a guess was right.
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _rate_limited(raw: Any, rate: float) -> dict[str, Any]:
    re = None
    with contextlib.suppress(ClientError):
        re = p.parse_client_message(raw).id
    return p.error(
        f"more than {rate:g} messages per second (serve.max_messages_per_second); "
        "this one was dropped",
        code="rate_limited",
        re=re,
    )


def _loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


def _int(text: str) -> int:
    try:
        return max(0, int(text))
    except ValueError:
        return 0


async def run_server(runtime: ClientRuntime, *, watch: bool = True) -> None:
    """Serve until cancelled. Prints the URL on stderr (tests and scripts read it there)."""
    import sys

    server = await WsServer(runtime).start()
    if watch:
        runtime.watch(
            asyncio.get_running_loop(),
            on_change=server.config_changed,
            on_error=server.config_failed,
        )
    if server.token_generated:
        # Like Jupyter: the URL with its token is what the user copies into a client.
        print(f"coder-es serve: listening on {server.url}", file=sys.stderr, flush=True)
    else:
        print(
            f"coder-es serve: listening on {server.address} (token from serve.token or "
            "$CODER_ES_SERVE_TOKEN)",
            file=sys.stderr,
            flush=True,
        )
    try:
        await server.serve_forever()
    finally:
        runtime.close()
        await server.close()
