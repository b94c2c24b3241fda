"""Web API clients for the fleet: one per instance, with Slack's retry etiquette."""

from __future__ import annotations

import aiohttp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient


def make_web_client(token: str, api_url: str, *, timeout: int = 30) -> AsyncWebClient:
    """Honours ``Retry-After`` on 429 and retries transient 5xx/connection errors."""
    return AsyncWebClient(
        token=token,
        base_url=api_url,
        timeout=timeout,
        retry_handlers=[
            AsyncRateLimitErrorRetryHandler(max_retry_count=5),
            AsyncServerErrorRetryHandler(max_retry_count=3),
            AsyncConnectionErrorRetryHandler(max_retry_count=3),
        ],
    )


def make_post_client(
    token: str, api_url: str, *, timeout: int = 30, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """The poster's client: retries only a 429, which Slack answers without posting.

    After a dropped connection or a 5xx the post may have landed; a blind retry
    would post it twice. The poster leaves such a row in doubt instead, and finds
    it by its metadata key before sending anything again.

    ``session``: one HTTP session for every post of the instance (its owner closes
    it). Without one slack-sdk opens a session and a connection per call: measured,
    that was most of a reply's CPU at 100 mentions/s (issue 19).
    """
    return AsyncWebClient(
        token=token,
        base_url=api_url,
        timeout=timeout,
        session=session,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=5)],
    )
