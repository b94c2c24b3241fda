"""Local HTTP endpoints refuse other sites (docs/operations.md).

The playground and the metrics endpoints listen on the user's machine, where any web
page the user visits can send them requests: a form or ``fetch`` with ``text/plain``
needs no CORS preflight, and DNS rebinding makes an attacker's name resolve to
127.0.0.1 so that even reads look same-origin to the browser. ``LocalGuard`` is an
aiohttp middleware that answers 403 unless:

- the ``Host`` header names the address served (``127.0.0.1:8787``, or ``localhost``
  / ``[::1]`` with that port when the address is a loopback one). A rebinding page's
  requests carry the attacker's name there, so they are refused, streams included.
  Bound to every address (``0.0.0.0``), any IP literal with the port passes and no
  name does: that is what a scraper on another machine sends, and not what a
  rebinding page can send;
- a write (any method but GET, HEAD, OPTIONS) is ``application/json`` and, when the
  request has an ``Origin``, that origin is this server's own. A browser sends
  ``Origin`` on every cross-site POST (and cannot send JSON cross-site without a
  preflight, which is never granted here), so a write without ``Origin`` comes from a
  program such as curl and is allowed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("", "0.0.0.0", "::")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def split_host(value: str) -> tuple[str, int | None]:
    """A ``Host`` header → (lower-cased name or address, port or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        host, rest = value[1:end], value[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = value.partition(":")
    if not port_text:
        return host, None
    return (host, int(port_text)) if port_text.isdigit() else (host, -1)


class LocalGuard:
    """Who may talk to a local server bound at ``host`` (call ``bind`` with the port)."""

    def __init__(self, host: str) -> None:
        self.host = host.strip("[]").lower()
        self.port = 0

    def bind(self, port: int) -> None:
        self.port = port

    def host_allowed(self, header: str | None) -> bool:
        if not header:
            return False
        host, port = split_host(header)
        if (port if port is not None else 80) != self.port:
            return False
        if self.host in WILDCARDS:
            return _is_ip(host) or host == "localhost"
        if _is_loopback(self.host):
            return host == self.host or _is_loopback(host)
        return host == self.host

    def refusal(self, request: web.Request) -> str | None:
        """Why the request is refused, or None."""
        if not self.host_allowed(request.headers.get("Host")):
            return "Host is not this server's address"
        if request.method in SAFE_METHODS:
            return None
        if request.content_type != "application/json":
            return "writes take Content-Type: application/json only"
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() != f"http://{request.headers.get('Host', '').lower()}":
            return "Origin is not this server"
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        reason = self.refusal(request)
        if reason is not None:
            return web.json_response({"ok": False, "error": "forbidden", "reason": reason}, status=403)
        return await handler(request)
