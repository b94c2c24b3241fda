"""The one ``httpx.AsyncClient`` the LLM back ends share, and a POST that retries.

Retried: 408, 429 and 5xx (``Retry-After`` in seconds honoured, each wait capped at
30 s; otherwise exponential backoff 0.5, 1, 2 … s), connection errors and timeouts.
Any other status fails at once. Whatever the failure, ``TurnFailed`` carries the
status and a short, scrubbed reason: API keys never reach an exception or a log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
import structlog

from nanoslack.agents.redact import scrub
from nanoslack.agents.types import TurnFailed

log = structlog.get_logger("nanoslack.agents")

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 120.0
MAX_RETRY_WAIT_S = 30.0
BACKOFF_BASE_S = 0.5
DEFAULT_ATTEMPTS = 4
REASON_CHARS = 200

Sleep = Callable[[float], Awaitable[None]]


def make_http_client(**kwargs: Any) -> httpx.AsyncClient:
    """The fleet's shared client; one connection pool for every LLM instance."""
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    return httpx.AsyncClient(timeout=timeout, **kwargs)


def _retryable(status: int) -> bool:
    return status in (408, 429) or status >= 500


def retry_after_s(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after", "").strip()
    try:
        seconds = float(raw)
    except ValueError:
        return None  # absent, or the HTTP-date form: fall back to backoff
    if seconds != seconds or seconds < 0:  # NaN or negative
        return None
    return min(seconds, MAX_RETRY_WAIT_S)


def backoff_s(attempt: int) -> float:
    """0.5, 1, 2, … for attempt 1, 2, 3, …"""
    return float(min(BACKOFF_BASE_S * 2 ** (attempt - 1), MAX_RETRY_WAIT_S))


def _reason(response: httpx.Response, secrets: tuple[str | None, ...]) -> str:
    """The provider's error message when it has one (both APIs use ``error.message``)."""
    text = response.text
    try:
        body = response.json()
        err = body.get("error") if isinstance(body, dict) else None
        message = err.get("message") if isinstance(err, dict) else err
        if isinstance(message, str) and message:
            text = message
    except ValueError:
        pass
    return scrub(" ".join(text.split()), secrets)[:REASON_CHARS] or response.reason_phrase


async def post_json_with_retries(
    client: httpx.AsyncClient,
    url: str,
    json: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    sleep: Sleep = asyncio.sleep,
    secrets: tuple[str | None, ...] = (),
) -> dict[str, Any]:
    """POST ``json`` and return the JSON object answered; ``TurnFailed`` when it cannot.

    ``secrets`` are extra strings (the API key) scrubbed from any reason text.
    """
    failure = "no attempt made"
    for attempt in range(1, max(1, attempts) + 1):
        wait: float | None = None
        try:
            response = await client.post(url, json=dict(json), headers=dict(headers))
        except httpx.TimeoutException as exc:
            failure = f"request to {safe_url(url)} timed out ({type(exc).__name__})"
        except httpx.TransportError as exc:
            failure = f"cannot reach {safe_url(url)}: {scrub(str(exc), secrets)[:REASON_CHARS]}"
        else:
            if response.is_success:
                return _json_object(response, url)
            failure = f"{safe_url(url)} answered {response.status_code}: {_reason(response, secrets)}"
            if not _retryable(response.status_code):
                raise TurnFailed(failure)
            wait = retry_after_s(response)
        if attempt >= attempts:
            break
        delay = backoff_s(attempt) if wait is None else wait
        log.info("llm request retry", url=safe_url(url), attempt=attempt, wait_s=delay, reason=failure)
        await sleep(delay)
    raise TurnFailed(f"{failure} (after {attempts} attempts)")


def _json_object(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise TurnFailed(
            f"{safe_url(url)} answered {response.status_code} with a body that is not JSON"
        ) from exc
    if not isinstance(body, dict):
        raise TurnFailed(f"{safe_url(url)} answered {response.status_code} with JSON that is not an object")
    return body


def safe_url(url: str) -> str:
    """Scheme, host and path only: a query string could carry a key (some proxies do that)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "the model server"
    port = f":{parsed.port}" if parsed.port else ""
    # No userinfo: http://user:secret@host is a valid base URL.
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"
