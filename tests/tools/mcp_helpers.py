"""Helpers for the MCP tests: the echo server's config, waiting on a condition, and the
echo server served over streamable HTTP on 127.0.0.1 (behind a bearer check)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import uvicorn

from nanoslack.tools.mcp import Lifecycle, TeammateMcp, load_mcp_config
from tests.mcp_servers.echo import build

ECHO = str(Path(__file__).resolve().parents[1] / "mcp_servers" / "echo.py")
# Quick to notice a death and to restart: the tests wait on conditions, not on these.
FAST = Lifecycle(start_wait=20.0, probe_interval=0.1, probe_timeout=5.0, backoff_min=0.3, backoff_max=1.0)


def echo_server(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [ECHO], **extra}


def write_config(path: Path, servers: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def teammate_mcp(
    teammates: Path,
    instance: str = "dana",
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = 10.0,
    lifecycle: Lifecycle = FAST,
) -> TeammateMcp:
    values = dict(env or {})
    config = load_mcp_config(teammates, instance, values.get)
    return TeammateMcp(instance, config, timeout=timeout, lifecycle=lifecycle)


async def until(check: Callable[[], bool | Awaitable[bool]], *, within: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + within
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what or check}")
        await asyncio.sleep(0.02)


class _Bearer:
    """Refuses (401) any HTTP request without ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.seen: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"")
            self.seen.append(auth)
            if auth != self.expected:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def http_echo(token: str, port: int = 0) -> AsyncIterator[str]:
    """The echo server over streamable HTTP on 127.0.0.1 (``port``, or a free one);
    yields its URL."""
    app = _Bearer(build("remote").streamable_http_app(), token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started or task.done(), what="uvicorn started")
        assert not task.done(), "the HTTP MCP server did not start"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        sock.close()
