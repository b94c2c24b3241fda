"""The shared client and the retrying POST, on their own."""

from __future__ import annotations

import httpx
import pytest
import respx
import structlog

from nanoslack.agents import TurnFailed, make_http_client, post_json_with_retries

from .conftest import Sleeps

URL = "https://llm.test/v1/chat/completions"
KEY = "local-secret-key-42"


async def test_shared_client_times_out_connects_at_10s_and_reads_at_120s() -> None:
    async with make_http_client() as client:
        assert (client.timeout.connect, client.timeout.read) == (10.0, 120.0)


@respx.mock
async def test_retry_logs_and_final_error_never_carry_the_key(sleeps: Sleeps) -> None:
    respx.post(URL).respond(503, json={"error": {"message": f"bad key {KEY} and sk-proj-abcdefgh1234"}})

    async with httpx.AsyncClient() as client:
        with structlog.testing.capture_logs() as logs, pytest.raises(TurnFailed) as failed:
            await post_json_with_retries(
                client,
                URL,
                {"a": 1},
                {"Authorization": f"Bearer {KEY}"},
                attempts=2,
                sleep=sleeps,
                secrets=(KEY,),
            )

    assert [entry["event"] for entry in logs] == ["llm request retry"]
    text = str(failed.value) + repr(logs)
    assert KEY not in text and "sk-proj-abcdefgh1234" not in text
    assert "503" in str(failed.value)


@respx.mock
async def test_connection_refused_is_retried_then_a_failed_turn(sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(side_effect=httpx.ConnectError("connection refused"))

    async with httpx.AsyncClient() as client:
        with pytest.raises(
            TurnFailed, match=r"cannot reach https://llm.test/v1/chat/completions.*3 attempts"
        ):
            await post_json_with_retries(client, URL, {}, {}, attempts=3, sleep=sleeps)

    assert route.call_count == 3


@respx.mock
async def test_non_json_success_is_a_failed_turn(sleeps: Sleeps) -> None:
    respx.post(URL).respond(200, text="<html>proxy says hi</html>")

    async with httpx.AsyncClient() as client:
        with pytest.raises(TurnFailed, match="not JSON"):
            await post_json_with_retries(client, URL, {}, {}, sleep=sleeps)


@respx.mock
async def test_url_credentials_never_appear_in_errors(sleeps: Sleeps) -> None:
    url = "https://user:hunter2@llm.test/v1/chat/completions"
    respx.post(url).respond(400, json={"error": {"message": "bad request"}})

    async with httpx.AsyncClient() as client:
        with pytest.raises(TurnFailed) as failed:
            await post_json_with_retries(client, url, {}, {}, sleep=sleeps)

    assert "hunter2" not in str(failed.value)
    assert "answered 400: bad request" in str(failed.value)
