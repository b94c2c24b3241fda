"""Web API clients for the fleet: one per instance, with Slack's retry etiquette.

Each client counts what Slack refused (``nanoslack_slack_api_errors_total``): every
error answer, each 429 and 5xx that a retry handler waits out included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

# (method, error): a Slack error code, ``http_<status>``, or the exception's type.
OnError = Callable[[str, str], None]


def _ignore(_method: str, _error: str) -> None:
    return None


class CountingWebClient(AsyncWebClient):
    """An ``AsyncWebClient`` that tells ``on_error`` about every call Slack refused."""

    def __init__(self, *args: Any, on_error: OnError = _ignore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_error = on_error

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        try:
            return await super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            self.on_error(api_method, _error_code(exc))
            raise
        except Exception as exc:  # no answer at all: a timeout, a dropped connection
            self.on_error(api_method, type(exc).__name__)
            raise


def _error_code(exc: SlackApiError) -> str:
    response = exc.response
    error = response.get("error") if isinstance(response.data, dict) else None
    return str(error) if error else f"http_{response.status_code}"


def _method(request: HttpRequest) -> str:
    """``https://slack.com/api/chat.postMessage?…`` → ``chat.postMessage``."""
    return request.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


class _Counted:
    """Counts each answer a retry handler is about to wait out (its 429s, its 5xx).

    ``_can_retry_async`` is the hook slack-sdk's docs give custom retry handlers to
    override; the statuses are the built-in handlers' own."""

    on_error: OnError
    error: str
    statuses: tuple[int, ...]

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is None or response.status_code not in self.statuses:
            return False
        self.on_error(_method(request), self.error or f"http_{response.status_code}")
        return True


class CountedRateLimits(_Counted, AsyncRateLimitErrorRetryHandler):
    def __init__(self, on_error: OnError, max_retry_count: int) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.on_error, self.error, self.statuses = on_error, "ratelimited", (429,)


class CountedServerErrors(_Counted, AsyncServerErrorRetryHandler):
    def __init__(self, on_error: OnError, max_retry_count: int) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.on_error, self.error, self.statuses = on_error, "", (500, 503)


def make_web_client(
    token: str, api_url: str, *, timeout: int = 30, on_error: OnError = _ignore
) -> AsyncWebClient:
    """Honours ``Retry-After`` on 429 and retries transient 5xx/connection errors."""
    handlers: list[AsyncRetryHandler] = [
        CountedRateLimits(on_error, max_retry_count=5),
        CountedServerErrors(on_error, max_retry_count=3),
        AsyncConnectionErrorRetryHandler(max_retry_count=3),
    ]
    return CountingWebClient(
        token=token, base_url=api_url, timeout=timeout, retry_handlers=handlers, on_error=on_error
    )


def make_post_client(
    token: str,
    api_url: str,
    *,
    timeout: int = 30,
    on_error: OnError = _ignore,
    session: aiohttp.ClientSession | None = None,
) -> AsyncWebClient:
    """The poster's client: retries only a 429, which Slack answers without posting.

    After a dropped connection or a 5xx the post may have landed; a blind retry
    would post it twice. The poster leaves such a row in doubt instead, and finds
    it by its metadata key before sending anything again.

    ``session``: one HTTP session for every post of the instance (its owner closes
    it). Without one slack-sdk opens a session and a connection per call: measured,
    that was most of a reply's CPU at 100 mentions/s (the bench).
    """
    return CountingWebClient(
        token=token,
        base_url=api_url,
        timeout=timeout,
        session=session,
        retry_handlers=[CountedRateLimits(on_error, max_retry_count=5)],
        on_error=on_error,
    )
