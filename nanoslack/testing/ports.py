"""A socket bound to a free port of 127.0.0.1, for the local servers of the tests: aiohttp's
``TCPSite`` keeps the port it bound in a private attribute, so the servers bind their own
socket and serve it with ``web.SockSite``."""

from __future__ import annotations

import socket


def free_socket(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock
