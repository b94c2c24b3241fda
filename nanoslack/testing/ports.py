"""Local servers for the tests: a socket bound to a free port of 127.0.0.1 (aiohttp's
``TCPSite`` keeps the port it bound in a private attribute, so the servers bind their own
socket and serve it with ``web.SockSite``), and ``serve``, which does that for an app."""

from __future__ import annotations

import socket

from aiohttp import web


def free_socket(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


async def serve(app: web.Application, host: str) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on a free port of ``host``: its runner (to clean up) and the port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    sock = free_socket(host)
    await web.SockSite(runner, sock).start()
    return runner, sock.getsockname()[1]
