"""A small MCP server for the tests, written with the ``mcp`` package.

Run as ``python tests/mcp_servers/echo.py`` (stdio) or served over streamable HTTP by a
test (``build()`` gives the server; ``MCPServer.streamable_http_app()`` the ASGI app).
Its tools: ``echo`` gives its text back, ``env`` reads one of its environment variables,
``pid`` says which process serves it, ``slow`` sleeps (a call the client cancels is
noted in the file ``ECHO_CANCEL_LOG`` names, when set), ``fail`` raises. ``ECHO_STDERR``
set: that line is written to stderr first; ``ECHO_EXIT`` set: it writes it and exits
before speaking MCP (a server that cannot start).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer


def build(name: str = "echo") -> MCPServer:
    server: MCPServer = MCPServer(name)

    @server.tool(description="Give the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Read one of the server's environment variables.")
    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="The server's process id.")
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="Sleep, then answer.")
    async def slow(seconds: float) -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:  # the client sent notifications/cancelled for the call
            _note_cancel()
            raise
        return "awake"

    @server.tool(description="Always fails.")
    def fail(message: str) -> str:
        raise RuntimeError(message)

    return server


def _note_cancel() -> None:
    log = os.environ.get("ECHO_CANCEL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write("slow cancelled\n")


def main() -> None:
    line = os.environ.get("ECHO_STDERR")
    if line:
        print(line, file=sys.stderr, flush=True)
    if os.environ.get("ECHO_EXIT"):
        sys.exit(3)
    build(os.environ.get("ECHO_NAME", "echo")).run("stdio")


if __name__ == "__main__":
    main()
