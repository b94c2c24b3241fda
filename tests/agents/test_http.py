"""The shared client and the retry policy, on their own and through one back end."""

from __future__ import annotations

import httpx2
import pytest
import structlog
from pydantic_ai.exceptions import ModelConnectionError, ModelHTTPError, ModelTimeoutError

from nanoslack.agents import OpenAIAgent, TurnFailed, make_http_client
from nanoslack.agents.http import backoff_s, safe_url
from nanoslack.agents.local import LocalTools
from nanoslack.agents.loop import retry_wait_s, retryable
from nanoslack.testing.llm_server import LLMServer, error

from .conftest import Sleeps
from .helpers import make_turn

KEY = "local-secret-key-42"


async def test_shared_client_times_out_connects_at_10s_and_reads_at_120s() -> None:
    async with make_http_client() as client:
        assert (client.timeout.connect, client.timeout.read) == (10.0, 120.0)


def _http_error(status: int, **headers: str) -> ModelHTTPError:
    return ModelHTTPError(status, "m", body=None, headers=headers)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 529])
def test_busy_or_broken_servers_are_retried(status: int) -> None:
    assert retryable(_http_error(status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_refused_request_is_not_retried(status: int) -> None:
    assert not retryable(_http_error(status))


def test_connection_errors_and_timeouts_are_retried() -> None:
    assert retryable(ModelConnectionError("m", "connection refused"))
    assert retryable(ModelTimeoutError("m", "read timed out"))
    assert not retryable(ValueError("not a model error"))


def test_retry_after_is_honoured_capped_at_30_seconds_and_backoff_otherwise() -> None:
    assert retry_wait_s(_http_error(429, **{"Retry-After": "7"}), 1) == 7.0
    assert retry_wait_s(_http_error(429, **{"Retry-After": "0"}), 3) == 0.0
    assert retry_wait_s(_http_error(429, **{"retry-after-ms": "250"}), 1) == 0.25
    assert retry_wait_s(_http_error(429, **{"Retry-After": "3600"}), 1) == 30.0
    assert retry_wait_s(_http_error(503), 1) == 0.5
    assert [backoff_s(n) for n in (1, 2, 3, 4, 10)] == [0.5, 1.0, 2.0, 4.0, 30.0]


def test_safe_url_drops_credentials_and_query() -> None:
    assert safe_url("https://user:hunter2@llm.test/v1/chat/completions?key=abc") == (
        "https://llm.test/v1/chat/completions"
    )
    assert safe_url("http://127.0.0.1:11434/v1") == "http://127.0.0.1:11434/v1"


async def test_retry_logs_and_final_error_never_carry_the_key(sleeps: Sleeps, llm: LLMServer) -> None:
    llm.openai.default = error(503, f"bad key {KEY} and sk-proj-abcdefgh1234")

    async with httpx2.AsyncClient() as client:
        agent = OpenAIAgent(
            client, base_url=llm.openai_url, api_key=KEY, model="m", instance="dana", attempts=2, sleep=sleeps
        )
        with structlog.testing.capture_logs() as logs, pytest.raises(TurnFailed) as failed:
            await agent.run(make_turn(), LocalTools())

    assert [entry["event"] for entry in logs] == ["llm request retry"]
    assert logs[0]["attempt"] == 1 and logs[0]["wait_s"] == 0.5
    text = str(failed.value) + repr(logs)
    assert KEY not in text and "sk-proj-abcdefgh1234" not in text
    assert "503" in str(failed.value) and "after 2 attempts" in str(failed.value)
    assert len(llm.openai.requests) == 2
