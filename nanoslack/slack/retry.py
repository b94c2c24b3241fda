"""Connecting to Slack through its blips (docs/operations.md, "Start-up and Slack's outages").

When an instance connects (``auth.test``, then ``apps.connections.open``), at start and on
every reconnect, a failure is either Slack's, and passes (HTTP 5xx, ``internal_error``,
``fatal_error``, ``service_unavailable``, ``request_timeout``, ``ratelimited``, a connection
error, a timeout): tried again with ``Backoff`` for as long as the process runs, logged
``instance waiting for Slack``; or it is what Slack says about the token (``invalid_auth``,
``token_revoked``, …) or something Slack will say again: the instance is skipped
(``instance skipped``), since no retry can fix it.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import aiohttp
from slack_sdk.errors import SlackApiError

# What Slack says about the token: no retry helps, the operator must act.
TOKEN_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
    }
)
# Slack's own failures: they pass.
SLACK_FAILURES = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0


@dataclass(frozen=True)
class Failure:
    """Why a connect failed: Slack's error code, ``http_<status>`` or the exception's type;
    whether it passes; and the ``Retry-After`` Slack asked for, if any."""

    error: str
    passes: bool
    retry_after: float | None = None


def classify(exc: BaseException) -> Failure:
    if isinstance(exc, SlackApiError):
        response = exc.response
        data = response.data if isinstance(response.data, dict) else {}
        status = int(response.status_code or 0)
        error = str(data.get("error") or f"http_{status}")
        retry_after = _retry_after(response.headers) if status == 429 or error == "ratelimited" else None
        if error in TOKEN_ERRORS:
            return Failure(error, passes=False)
        passes = error in SLACK_FAILURES or status >= 500 or status == 429
        return Failure(error, passes=passes, retry_after=retry_after)
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | TimeoutError | ConnectionError):
        return Failure(type(exc).__name__, passes=True)
    if isinstance(exc, OSError):  # a refused or reset TCP connection, a DNS failure
        return Failure(type(exc).__name__, passes=True)
    return Failure(type(exc).__name__, passes=False)


def _retry_after(headers: object) -> float | None:
    items = headers.items() if isinstance(headers, dict) else ()
    for key, value in items:
        if str(key).lower() == "retry-after":
            raw = value[0] if isinstance(value, list) and value else value
            try:
                return max(0.0, float(str(raw)))
            except ValueError:
                return None
    return None


class Backoff:
    """``first`` seconds, doubling to ``cap``, each wait jittered down to half so that many
    instances (or hosts) do not all come back in the same second; never shorter than the
    ``Retry-After`` Slack asked for."""

    def __init__(self, first: float = FIRST_DELAY_S, cap: float = MAX_DELAY_S) -> None:
        self._next = first
        self._cap = cap

    def delay(self, retry_after: float | None = None) -> float:
        base = min(self._next, self._cap)
        self._next = min(self._next * 2, self._cap)
        wait = base * random.uniform(0.5, 1.0)
        return max(wait, retry_after or 0.0)
