"""The one HTTP client the LLM back ends share, and their retry policy.

The provider SDKs (``openai``, ``anthropic``) and pydantic-ai speak httpx2, so the
shared client is an ``httpx2.AsyncClient`` (connect 10 s, read 120 s). The SDKs' own
retries are off: the tool loop (``agents.loop``) retries one model call at a time with
this policy, so every wait is ours to cap, log and (in tests) skip.

Retried: 408, 429 and 5xx (``Retry-After``/``retry-after-ms`` honoured, each wait capped
at 30 s; otherwise exponential backoff 0.5, 1, 2 … s), connection errors and timeouts,
up to ``DEFAULT_ATTEMPTS`` attempts. Any other status fails at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2
from pydantic_ai.exceptions import ModelAPIError, ModelConnectionError, ModelHTTPError

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 120.0
MAX_RETRY_WAIT_S = 30.0
BACKOFF_BASE_S = 0.5
DEFAULT_ATTEMPTS = 4

Sleep = Callable[[float], Awaitable[None]]


def make_http_client(*, timeout: httpx2.Timeout | None = None) -> httpx2.AsyncClient:
    """The fleet's shared client: one connection pool for every LLM instance."""
    return httpx2.AsyncClient(timeout=timeout or httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))


def retryable(error: BaseException) -> bool:
    """A failed model call worth another attempt: the server was busy or unreachable."""
    if isinstance(error, ModelHTTPError):
        return error.status_code in (408, 429) or error.status_code >= 500
    return isinstance(error, ModelConnectionError)


def retry_wait_s(error: ModelAPIError, attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, …): the server's
    ``Retry-After`` when it sent one (pydantic-ai parses it), else backoff; capped."""
    asked = error.retry_after
    if asked is not None and asked == asked and asked >= 0:  # not NaN, not negative
        return min(float(asked), MAX_RETRY_WAIT_S)
    return backoff_s(attempt)


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
