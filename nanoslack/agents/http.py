"""The one HTTP client the LLM back ends share, and the numbers of their retries.

The provider SDKs (``openai``, ``anthropic``) and pydantic-ai speak httpx2, so the
shared client is an ``httpx2.AsyncClient`` (connect 10 s, read 120 s). The SDKs' own
retries are off: the tool loop (``agents.loop``) retries one model call at a time, so
every wait is ours to cap, log and (in tests) skip: ``Retry-After`` honoured, each wait
capped at 30 s, otherwise exponential backoff 0.5, 1, 2 … s, up to ``DEFAULT_ATTEMPTS``.

Nothing here imports pydantic-ai or the SDKs (slow to import): the fleet builds this
client whatever its back ends, and only an LLM back end loads them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 120.0
MAX_RETRY_WAIT_S = 30.0
BACKOFF_BASE_S = 0.5
DEFAULT_ATTEMPTS = 4

Sleep = Callable[[float], Awaitable[None]]


def make_http_client(*, timeout: httpx2.Timeout | None = None) -> httpx2.AsyncClient:
    """The fleet's shared client: one connection pool for every LLM instance."""
    return httpx2.AsyncClient(timeout=timeout or httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))


def backoff_s(attempt: int) -> float:
    """0.5, 1, 2, … for attempt 1, 2, 3, …"""
    return float(min(BACKOFF_BASE_S * 2 ** (attempt - 1), MAX_RETRY_WAIT_S))


def safe_url(url: str) -> str:
    """Scheme, host and path only: a query string could carry a key (some proxies do that)."""
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError):
        return "the model server"
    port = f":{parsed.port}" if parsed.port else ""
    # No userinfo: http://user:secret@host is a valid base URL.
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"
