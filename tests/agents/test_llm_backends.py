"""The two LLM back ends against respx: the exact request, tool calls as posts,
retries, failures, usage and the daily budget (DESIGN §5 "Back ends")."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
import structlog

from nanoslack.agents import (
    AnthropicAgent,
    BudgetExhausted,
    MemoryLedger,
    OpenAIAgent,
    Turn,
    TurnFailed,
    load_teammate,
    render_prompt,
)

from .conftest import Sleeps
from .helpers import Alone, bot, human, make_turn

OPENAI_URL = "https://llm.test/v1/chat/completions"
ANTHROPIC_URL = "https://claude.test/v1/messages"
OPENAI_KEY = "sk-test-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-test-0123456789"


def openai_agent(
    http: httpx.AsyncClient, sleeps: Sleeps, *, ledger: Any = None, daily_tokens: int | None = None, **kw: Any
) -> Any:
    args: dict[str, Any] = {"base_url": "https://llm.test/v1", "api_key": OPENAI_KEY, "model": "gpt-test"}
    args.update(kw)
    return Alone(OpenAIAgent(http, instance="dana", sleep=sleeps, **args), ledger, daily_tokens)


def anthropic_agent(
    http: httpx.AsyncClient, sleeps: Sleeps, *, ledger: Any = None, daily_tokens: int | None = None, **kw: Any
) -> Any:
    args: dict[str, Any] = {
        "base_url": "https://claude.test",
        "api_key": ANTHROPIC_KEY,
        "model": "claude-test",
    }
    args.update(kw)
    return Alone(AnthropicAgent(http, instance="dana", sleep=sleeps, **args), ledger, daily_tokens)


def openai_reply(*texts: str, content: str | None = "thinking…", total: int = 42) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "send_message", "arguments": json.dumps({"text": t})},
        }
        for i, t in enumerate(texts)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": total - 2, "completion_tokens": 2, "total_tokens": total},
    }


def anthropic_reply(
    *texts: str, scratch: str = "Let me think.", usage: tuple[int, int] = (30, 12)
) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": scratch}]
    blocks += [
        {"type": "tool_use", "id": f"toolu_{i}", "name": "send_message", "input": {"text": t}}
        for i, t in enumerate(texts)
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": blocks,
        "stop_reason": "tool_use" if texts else "end_turn",
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def room_turn(teammates: Path) -> Turn:
    system = load_teammate(teammates, "dana").system_prompt(teammates / "_skills")
    return make_turn(
        human("@dana can you plan the release?"),
        bot("I can take the build.", "eli"),
        system=system,
    )


# -- the exact requests ------------------------------------------------------------------------


@respx.mock
async def test_openai_request_carries_model_persona_skills_transcript_and_send_message_tool(
    http: httpx.AsyncClient, sleeps: Sleeps, teammates: Path
) -> None:
    route = respx.post(OPENAI_URL).respond(json=openai_reply("hi"))
    turn = room_turn(teammates)

    await openai_agent(http, sleeps).run(turn)

    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    body = json.loads(request.content)
    system, user = body["messages"]
    assert body["model"] == "gpt-test"
    assert system["role"] == "system"
    assert system["content"].startswith("You are Dana, the planner.\n\nHand work over with @name.")
    assert "Skills you can use:\n- review: Review: look for failure paths" in system["content"]
    assert "call the send_message tool" in system["content"]
    assert user == {"role": "user", "content": render_prompt(turn)}
    assert "alice: @dana can you plan the release?\neli: I can take the build." in user["content"]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "send_message",
                "description": body["tools"][0]["function"]["description"],
                "parameters": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "The message text (Slack mrkdwn)."}
                    },
                    "required": ["text"],
                },
            },
        }
    ]
    assert body["tool_choice"] == "auto"
    assert set(body) == {"model", "messages", "tools", "tool_choice"}


@respx.mock
async def test_openai_without_api_key_sends_no_authorization_for_local_servers(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    route = respx.post("http://127.0.0.1:11434/v1/chat/completions").respond(json=openai_reply("hi"))

    await openai_agent(http, sleeps, base_url="http://127.0.0.1:11434/v1/", api_key=None).run(make_turn())

    assert "authorization" not in route.calls.last.request.headers


@respx.mock
async def test_anthropic_request_carries_model_persona_skills_transcript_and_send_message_tool(
    http: httpx.AsyncClient, sleeps: Sleeps, teammates: Path
) -> None:
    route = respx.post(ANTHROPIC_URL).respond(json=anthropic_reply("hi"))
    turn = room_turn(teammates)

    await anthropic_agent(http, sleeps).run(turn)

    request = route.calls.last.request
    assert request.headers["x-api-key"] == ANTHROPIC_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    body = json.loads(request.content)
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 1024
    assert body["system"].startswith("You are Dana, the planner.\n\nHand work over with @name.")
    assert "Skills you can use:\n- review: Review: look for failure paths" in body["system"]
    assert "call the send_message tool" in body["system"]
    assert body["messages"] == [{"role": "user", "content": render_prompt(turn)}]
    assert body["tools"] == [
        {
            "name": "send_message",
            "description": body["tools"][0]["description"],
            "input_schema": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The message text (Slack mrkdwn)."}},
                "required": ["text"],
            },
        }
    ]
    assert set(body) == {"model", "max_tokens", "system", "messages", "tools"}


# -- tool calls are the only posts --------------------------------------------------------------


@respx.mock
async def test_openai_two_send_message_calls_post_two_messages_and_content_stays_private(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    respx.post(OPENAI_URL).respond(json=openai_reply("Plan: A, then B.", "@eli can you take A?"))

    reply = await openai_agent(http, sleeps).run(make_turn())

    assert reply.posts == ("Plan: A, then B.", "@eli can you take A?")
    assert "thinking…" not in reply.posts


@respx.mock
async def test_anthropic_two_send_message_calls_post_two_messages_and_text_stays_private(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    respx.post(ANTHROPIC_URL).respond(json=anthropic_reply("Plan: A, then B.", "@eli can you take A?"))

    reply = await anthropic_agent(http, sleeps).run(make_turn())

    assert reply.posts == ("Plan: A, then B.", "@eli can you take A?")


@respx.mock
async def test_openai_reply_without_tool_call_is_silence(http: httpx.AsyncClient, sleeps: Sleeps) -> None:
    respx.post(OPENAI_URL).respond(json=openai_reply(content="I would say hello, but no."))

    reply = await openai_agent(http, sleeps).run(make_turn())

    assert reply.posts == ()


@respx.mock
async def test_anthropic_reply_without_tool_use_is_silence(http: httpx.AsyncClient, sleeps: Sleeps) -> None:
    respx.post(ANTHROPIC_URL).respond(json=anthropic_reply(scratch="Nothing to add."))

    reply = await anthropic_agent(http, sleeps).run(make_turn())

    assert reply.posts == ()


@respx.mock
async def test_openai_malformed_tool_arguments_are_skipped_and_the_rest_posted(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    body = openai_reply("good one")
    calls = body["choices"][0]["message"]["tool_calls"]
    calls.insert(
        0, {"id": "x", "type": "function", "function": {"name": "send_message", "arguments": "{not json"}}
    )
    calls.append({"id": "y", "type": "function", "function": {"name": "delete_repo", "arguments": "{}"}})
    calls.append(
        {"id": "z", "type": "function", "function": {"name": "send_message", "arguments": {"text": "obj"}}}
    )
    respx.post(OPENAI_URL).respond(json=body)

    reply = await openai_agent(http, sleeps).run(make_turn())

    assert reply.posts == ("good one", "obj")


# -- retries and failures ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@respx.mock
async def test_429_with_retry_after_is_waited_out_then_answered(
    http: httpx.AsyncClient, sleeps: Sleeps, kind: str
) -> None:
    agent, url, ok = _agent_url_ok(kind, http, sleeps)
    route = respx.post(url).mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {"message": "slow down"}}),
            ok,
        ]
    )

    reply = await agent.run(make_turn())

    assert reply.posts == ("hello",)
    assert route.call_count == 2
    assert sleeps.waits == [7.0]


@respx.mock
async def test_retry_after_longer_than_30_seconds_is_capped(http: httpx.AsyncClient, sleeps: Sleeps) -> None:
    respx.post(OPENAI_URL).mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "3600"}),
            httpx.Response(200, json=openai_reply("x")),
        ]
    )

    await openai_agent(http, sleeps).run(make_turn())

    assert sleeps.waits == [30.0]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@respx.mock
async def test_500_is_retried_with_backoff(http: httpx.AsyncClient, sleeps: Sleeps, kind: str) -> None:
    agent, url, ok = _agent_url_ok(kind, http, sleeps)
    route = respx.post(url).mock(side_effect=[httpx.Response(500), httpx.Response(503), ok])

    reply = await agent.run(make_turn())

    assert reply.posts == ("hello",)
    assert route.call_count == 3
    assert sleeps.waits == [0.5, 1.0]


@respx.mock
async def test_server_errors_on_every_attempt_fail_the_turn_with_the_status(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    route = respx.post(OPENAI_URL).respond(500, json={"error": {"message": "upstream exploded"}})

    with pytest.raises(TurnFailed, match=r"answered 500: upstream exploded \(after 4 attempts\)"):
        await openai_agent(http, sleeps).run(make_turn())

    assert route.call_count == 4
    assert sleeps.waits == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@respx.mock
async def test_timeout_on_every_attempt_is_a_failed_turn(
    http: httpx.AsyncClient, sleeps: Sleeps, kind: str
) -> None:
    agent, url, _ok = _agent_url_ok(kind, http, sleeps)
    route = respx.post(url).mock(side_effect=httpx.ReadTimeout("read timed out"))

    with pytest.raises(TurnFailed, match="timed out"):
        await agent.run(make_turn())

    assert route.call_count == 4


@respx.mock
async def test_a_timeout_then_success_is_answered(http: httpx.AsyncClient, sleeps: Sleeps) -> None:
    respx.post(OPENAI_URL).mock(
        side_effect=[httpx.ConnectTimeout("slow"), httpx.Response(200, json=openai_reply("ok"))]
    )

    reply = await openai_agent(http, sleeps).run(make_turn())

    assert reply.posts == ("ok",)


@respx.mock
async def test_client_error_fails_at_once_and_never_shows_the_api_key(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    message = f"Incorrect API key provided: {OPENAI_KEY}."
    route = respx.post(OPENAI_URL).respond(401, json={"error": {"message": message}})

    with pytest.raises(TurnFailed) as failed:
        await openai_agent(http, sleeps).run(make_turn())

    assert route.call_count == 1
    assert "401" in str(failed.value)
    assert OPENAI_KEY not in str(failed.value)
    assert "0123456789" not in str(failed.value)
    assert OPENAI_KEY not in repr(openai_agent(http, sleeps))


@respx.mock
async def test_unexpected_response_shape_is_a_failed_turn_and_its_tokens_still_count(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    respx.post(OPENAI_URL).respond(json={"choices": [], "usage": {"total_tokens": 9}})
    ledger = MemoryLedger()

    with pytest.raises(TurnFailed, match="unexpected shape"):
        await openai_agent(http, sleeps, ledger=ledger).run(make_turn())

    assert ledger.used_today("dana") == 9  # spent all the same


# -- usage and the daily budget -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@respx.mock
async def test_usage_is_accumulated_per_instance_and_returned(
    http: httpx.AsyncClient, sleeps: Sleeps, kind: str
) -> None:
    ledger = MemoryLedger()
    agent, url, _ok = _agent_url_ok(kind, http, sleeps, ledger=ledger)
    reply_body = openai_reply("a", total=42) if kind == "openai" else anthropic_reply("a", usage=(30, 12))
    respx.post(url).respond(json=reply_body)

    first = await agent.run(make_turn())
    await agent.run(make_turn())

    assert first.tokens == 42
    assert ledger.used_today("dana") == 84
    assert ledger.used_today("eli") == 0


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@respx.mock
async def test_spent_daily_budget_refuses_before_any_request(
    http: httpx.AsyncClient, sleeps: Sleeps, kind: str
) -> None:
    ledger = MemoryLedger()
    agent, url, _ok = _agent_url_ok(kind, http, sleeps, ledger=ledger, daily_tokens=100)
    route = respx.post(url).respond(
        json=openai_reply("a", total=60) if kind == "openai" else anthropic_reply("a")
    )
    ledger.add("dana", 60)

    await agent.run(make_turn())  # 60 < 100: allowed, and now 60 + usage >= 100
    calls = route.call_count
    with pytest.raises(BudgetExhausted, match="100"):
        await agent.run(make_turn())

    assert calls == 1
    assert route.call_count == 1


async def test_budget_refusal_makes_no_http_call_at_all(http: httpx.AsyncClient, sleeps: Sleeps) -> None:
    ledger = MemoryLedger()
    ledger.add("dana", 500)
    agent = openai_agent(http, sleeps, ledger=ledger, daily_tokens=500)

    with respx.mock(assert_all_called=False) as router:
        route = router.post(OPENAI_URL).respond(json=openai_reply("a"))
        with pytest.raises(BudgetExhausted):
            await agent.run(make_turn())

    assert not route.called
    assert len(router.calls) == 0


def _agent_url_ok(
    kind: str, http: httpx.AsyncClient, sleeps: Sleeps, **kw: Any
) -> tuple[Any, str, httpx.Response]:
    if kind == "openai":
        return openai_agent(http, sleeps, **kw), OPENAI_URL, httpx.Response(200, json=openai_reply("hello"))
    return (
        anthropic_agent(http, sleeps, **kw),
        ANTHROPIC_URL,
        httpx.Response(200, json=anthropic_reply("hello")),
    )


async def test_budget_refusal_is_logged_with_instance_used_and_cap(
    http: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    ledger = MemoryLedger()
    ledger.add("dana", 700)
    agent = openai_agent(http, sleeps, ledger=ledger, daily_tokens=500)

    with structlog.testing.capture_logs() as logs, pytest.raises(BudgetExhausted):
        await agent.run(make_turn())

    assert {
        "event": "budget exhausted",
        "instance": "dana",
        "used": 700,
        "cap": 500,
        "log_level": "warning",
    } in logs


def test_memory_ledger_counts_per_utc_day() -> None:
    day = [dt.date(2026, 11, 30)]
    ledger = MemoryLedger(today=lambda: day[0])
    ledger.add("dana", 10)

    day[0] = dt.date(2026, 12, 1)

    assert ledger.used_today("dana") == 0
