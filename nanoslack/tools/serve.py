"""The host tools over MCP, for the ``command`` back end's process (docs/agents.md).

One streamable-HTTP MCP endpoint for the whole fleet, on 127.0.0.1 and a free port,
served by the ``mcp`` package's low-level server and its session manager (an ASGI app)
under uvicorn, on the fleet's own event loop: a tool call is ``await tools.call(...)``
of the turn's ``Tools``, in the same loop as the rest of the turn, so its effects land
in the turn's toolbox and commit with the turn like an LLM back end's.

Each ``command`` turn gets a fresh random token (``grant``), valid while the turn runs.
Every HTTP request must carry ``Authorization: Bearer <token>`` of a turn that is still
running; anything else is answered 401 before the MCP layer sees it. Behind the token
the tools are that turn's host tools (``origin == "host"``), nothing else.

The session manager runs stateless with JSON responses: each POST is served on its own
and checked on its own, so a turn that ends leaves no MCP session behind, and no
server-to-client stream is needed (the host tools never call back; a GET is answered
405, as the spec allows). The token itself is never logged: the registry keys turns by
the token's SHA-256.

``mcp`` and uvicorn are imported when the endpoint first starts: a fleet without
``command`` agents neither opens the port nor pays for the import (about a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nanoslack.agents.tool import Tool
from nanoslack.agents.types import Tools, TurnFailed
from nanoslack.logs import get_logger

if TYPE_CHECKING:
    import mcp_types as types
    import uvicorn
    from mcp.server import Server
    from mcp.server.context import ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.types import Receive, Scope, Send

log = get_logger(__name__)

HOST = "127.0.0.1"
PATH = "/mcp"
SERVER_NAME = "nanoslack"
# What the MCP SDK and uvicorn say at INFO (a session manager started, a server process
# started) is noise in the fleet's log; their warnings still show.
_QUIET_LOGGERS = ("mcp", "uvicorn")
_READ_ONLY = frozenset({"read_skill"})
_UNAUTHORIZED = (
    b'{"error":"invalid_token","error_description":"a running turn\'s NANOSLACK_MCP_TOKEN is needed"}'
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """What one turn's process is told: where the host tools are, and its token."""

    url: str
    token: str

    def __repr__(self) -> str:  # the token never reaches a log line through a repr
        return f"Endpoint(url={self.url!r}, token='***')"


@dataclass
class _Grant:
    instance: str
    tools: Tools
    live: bool = True
    calls: int = 0

    def host_tools(self) -> Sequence[Tool[Any]]:
        return [tool for tool in self.tools.tools() if tool.origin == "host"]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _bearer(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    for key, value in headers:
        if key.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class HostToolServer:
    """The fleet's MCP endpoint for ``command`` agents: started with the fleet when it has
    one (``warm``; else at the first grant), stopped with the fleet (``stop``)."""

    def __init__(self) -> None:
        self._grants: dict[bytes, _Grant] = {}
        self._start_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._url: str | None = None
        self._server: uvicorn.Server | None = None
        self._warming: asyncio.Task[None] | None = None

    @property
    def url(self) -> str | None:
        """The endpoint's URL once it serves (``http://127.0.0.1:<port>/mcp``)."""
        return self._url

    @contextlib.asynccontextmanager
    async def grant(self, tools: Tools, *, instance: str) -> AsyncIterator[Endpoint]:
        """The turn's tools behind a fresh token for as long as the block runs."""
        url = await self.start()
        token = secrets.token_urlsafe(32)
        key = _digest(token)
        grant = _Grant(instance, tools)
        self._grants[key] = grant
        try:
            yield Endpoint(url, token)
        finally:
            grant.live = False
            self._grants.pop(key, None)
            if grant.calls:
                log.info("mcp host tools used", instance=instance, calls=grant.calls)

    async def start(self) -> str:
        """Serve (once); the URL."""
        async with self._start_lock:
            if self._url is not None:
                return self._url
            if self._stopping.is_set():
                raise TurnFailed("the fleet is stopping: its MCP endpoint no longer serves")
            _quiet_libraries()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # Inherited by the accepted connections: without it a keep-alive request
            # waits ~40 ms on a delayed ACK (measured: 45 ms a call, 4 ms with it).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Bound and listening before anyone is told the port: a client that connects
            # before uvicorn is up waits in the backlog instead of being refused.
            sock.bind((HOST, 0))
            sock.listen(128)
            port = sock.getsockname()[1]
            manager = self._session_manager()
            self._server = _uvicorn(_AuthApp(self, manager))
            self._task = asyncio.create_task(self._serve(manager, self._server, sock), name="mcp-host-tools")
            self._task.add_done_callback(self._ended)
            self._url = f"http://{HOST}:{port}{PATH}"
            log.info("mcp host tools serving", url=self._url)
            return self._url

    def serve_soon(self) -> None:
        """A command agent was built: the endpoint starts with the fleet, in the
        background (``warm``), not in its first command turn. Once; without a running
        loop the first turn starts it."""
        if self._warming is not None:
            return
        with contextlib.suppress(RuntimeError):
            self._warming = asyncio.get_running_loop().create_task(self.warm(), name="mcp-warm")

    async def warm(self) -> None:
        """``start`` in the background at the fleet's start: a failure is logged, and the
        first turn tries again."""
        try:
            await self.start()
        except Exception as exc:
            log.error("mcp host tools cannot start", error=f"{type(exc).__name__}: {exc}")

    async def stop(self) -> None:
        if self._warming is not None:
            await self._warming  # warm() never raises
        self._stopping.set()
        async with self._start_lock:  # a start under way finishes first, then stops here
            for grant in self._grants.values():
                grant.live = False
            self._grants.clear()
            task, self._task = self._task, None
            if self._server is not None:
                self._server.should_exit = True
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 10.0)
            self._url = None

    # -- serving -----------------------------------------------------------------------------

    def _session_manager(self) -> StreamableHTTPSessionManager:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        return StreamableHTTPSessionManager(
            app=self._mcp_server(),
            json_response=True,
            stateless=True,
            # DNS rebinding: a web page in the operator's browser must not reach the tools.
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=[f"{HOST}:*", "localhost:*"],
                allowed_origins=[f"http://{HOST}:*", "http://localhost:*"],
            ),
        )

    @staticmethod
    async def _serve(
        manager: StreamableHTTPSessionManager, server: uvicorn.Server, sock: socket.socket
    ) -> None:
        try:
            async with manager.run():  # one task: anyio wants the manager entered and left in it
                await server.serve(sockets=[sock])
        finally:
            sock.close()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopping.is_set():
            return
        exc = task.exception()
        log.error("mcp host tools stopped", error=type(exc).__name__ if exc else "exited")
        self._url = None  # the next grant starts it again

    def _mcp_server(self) -> Server[Any]:
        import mcp_types as types
        from mcp.server import Server

        async def list_tools(
            ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            grant = self._grant_of(ctx)
            offered = grant.host_tools() if grant is not None else ()
            return types.ListToolsResult(
                tools=[
                    types.Tool(
                        name=s.name,
                        description=s.description,
                        # The tool's model's schema: what pydantic-ai shows an LLM, too.
                        input_schema=s.schema(),
                        annotations=types.ToolAnnotations(
                            # A CLI that asks before any tool with effects (Codex) may run
                            # read_skill unasked; none of them reaches past the fleet.
                            read_only_hint=s.name in _READ_ONLY,
                            destructive_hint=False,
                            open_world_hint=False,
                        ),
                    )
                    for s in offered
                ]
            )

        async def call_tool(
            ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            grant = self._grant_of(ctx)
            if grant is None:
                text, is_error = "the turn this token was for has ended", True
            elif params.name not in {s.name for s in grant.host_tools()}:
                text, is_error = f"unknown tool {params.name!r}", True
            else:
                grant.calls += 1
                # Checked against the tool's model by ``Tools.call``: one check for every back end.
                result = await grant.tools.call(params.name, dict(params.arguments or {}))
                text, is_error = result.text, result.is_error
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], is_error=is_error
            )

        return Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)

    def authorized(self, headers: Sequence[tuple[bytes, bytes]]) -> _Grant | None:
        token = _bearer(headers)
        if token is None:
            return None
        grant = self._grants.get(_digest(token))
        return grant if grant is not None and grant.live else None

    def _grant_of(self, ctx: ServerRequestContext[Any]) -> _Grant | None:
        # Checked again here, not only at the door: the turn may have ended while this
        # request waited its turn in the loop, and its effects are recorded by then.
        request = ctx.request
        headers = getattr(request, "scope", {}).get("headers", []) if request is not None else []
        return self.authorized(headers)


def _uvicorn(app: _AuthApp) -> uvicorn.Server:
    import uvicorn

    class Quiet(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own SIGINT/SIGTERM handlers would take the fleet's away: the
            # fleet stops this server itself (``HostToolServer.stop``).
            yield

    config = uvicorn.Config(
        app,
        lifespan="off",  # the session manager's lifetime is the serving task's
        log_config=None,  # never reconfigure the fleet's logging
        access_log=False,
        proxy_headers=False,
        server_header=False,
        http="h11",
        ws="none",
        timeout_graceful_shutdown=2,
    )
    return Quiet(config)


class _AuthApp:
    """The door: a request without a running turn's token is answered 401 here."""

    def __init__(self, server: HostToolServer, manager: StreamableHTTPSessionManager) -> None:
        self._server = server
        self._manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") != PATH:
            await _respond(send, 404, b'{"error":"not_found"}')
            return
        if self._server.authorized(scope["headers"]) is None:
            await _respond(
                send,
                401,
                _UNAUTHORIZED,
                [(b"www-authenticate", b'Bearer error="invalid_token"')],
            )
            return
        if scope["method"] == "GET":
            # The host tools never call the client back, so no server-to-client stream:
            # the spec's answer for that is 405 (a stateless GET would hang open).
            await _respond(send, 405, b'{"error":"method_not_allowed"}', [(b"allow", b"POST")])
            return
        await self._manager.handle_request(scope, receive, send)


async def _respond(send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _quiet_libraries() -> None:
    root = logging.getLogger().getEffectiveLevel()
    level = root if root <= logging.DEBUG else max(root, logging.WARNING)  # as nanoslack.logs does
    for name in _QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)


__all__ = ["Endpoint", "HostToolServer"]
