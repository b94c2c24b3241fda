"""The two LLM back ends against a model server on 127.0.0.1 (``nanoslack.testing.llm_server``): the
exact request, tool calls as posts, retries, failures, usage and the daily budget
(docs/agents.md). The SDKs speak httpx2, which respx cannot intercept."""

from __future__ import annotations

import datetime as dt
import json
import socket
from pathlib import Path
from typing import Any

import httpx2
import pytest
import structlog

from nanoslack.agents import (
    AnthropicAgent,
    BudgetExhausted,
    LocalTools,
    MemoryLedger,
    OpenAIAgent,
    Turn,
    TurnFailed,
    load_teammate,
    make_http_client,
    render_prompt,
)
from nanoslack.testing.llm_server import (
    Answer,
    Endpoint,
    LLMServer,
    anthropic_answer,
    anthropic_text,
    error,
    openai_answer,
    openai_raw,
    openai_text,
    send,
)

from .conftest import Sleeps
from .helpers import Alone, bot, human, make_turn

OPENAI_KEY = "sk-test-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-test-0123456789"


def openai_agent(
    http: httpx2.AsyncClient,
    sleeps: Sleeps,
    llm: LLMServer,
    *,
    ledger: Any = None,
    daily_tokens: int | None = None,
    **kw: Any,
) -> Any:
    args: dict[str, Any] = {"base_url": llm.openai_url, "api_key": OPENAI_KEY, "model": "gpt-test"}
    args.update(kw)
    return Alone(OpenAIAgent(http, instance="dana", sleep=sleeps, **args), ledger, daily_tokens)


def anthropic_agent(
    http: httpx2.AsyncClient,
    sleeps: Sleeps,
    llm: LLMServer,
    *,
    ledger: Any = None,
    daily_tokens: int | None = None,
    **kw: Any,
) -> Any:
    args: dict[str, Any] = {"base_url": llm.anthropic_url, "api_key": ANTHROPIC_KEY, "model": "claude-test"}
    args.update(kw)
    return Alone(AnthropicAgent(http, instance="dana", sleep=sleeps, **args), ledger, daily_tokens)


def room_turn(teammates: Path) -> Turn:
    system = load_teammate(teammates, "dana").system_prompt(teammates / "_skills")
    return make_turn(
        human("@dana can you plan the release?"),
        bot("I can take the build.", "eli"),
        system=system,
    )


# -- the exact requests ------------------------------------------------------------------------


async def test_openai_request_carries_model_persona_skills_transcript_and_the_turns_tools(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, teammates: Path
) -> None:
    llm.openai.push(openai_answer(send("hi")), openai_text())
    turn = room_turn(teammates)

    await openai_agent(http, sleeps, llm).run(turn)

    request = llm.openai.requests[0]
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    body = request.json
    system, user = body["messages"]
    assert body["model"] == "gpt-test"
    assert system["role"] == "system"
    assert system["content"].startswith("You are Dana, the planner.\n\nHand work over with @name.")
    assert "Skills you can use:\n- review: Review: look for failure paths" in system["content"]
    assert "call the send_message tool" in system["content"]
    assert user == {"role": "user", "content": render_prompt(turn)}
    assert "alice: @dana can you plan the release?\neli: I can take the build." in user["content"]
    # Every tool of the turn, exactly as it says (name, description, its model's JSON schema).
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": s.name, "description": s.description, "parameters": s.schema()},
        }
        for s in LocalTools().tools()
    ]
    assert body["tool_choice"] == "auto"
    assert set(body) == {"model", "messages", "tools", "tool_choice", "stream"}
    assert body["stream"] is False


async def test_openai_without_api_key_sends_no_authorization_for_local_servers(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.push(openai_answer(send("hi")), openai_text())

    reply = await openai_agent(http, sleeps, llm, base_url=llm.openai_url + "/", api_key=None).run(
        make_turn()
    )

    assert reply.posts == ("hi",)
    assert [r.path for r in llm.openai.requests] == ["/v1/chat/completions"] * 2
    assert all("authorization" not in r.headers for r in llm.openai.requests)


async def test_anthropic_request_carries_model_persona_skills_transcript_and_the_turns_tools(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, teammates: Path
) -> None:
    llm.anthropic.push(anthropic_answer(send("hi")), anthropic_text())
    turn = room_turn(teammates)

    await anthropic_agent(http, sleeps, llm).run(turn)

    request = llm.anthropic.requests[0]
    assert request.path == "/v1/messages"
    # The SDK's own authentication and API version (it now sends the key as a bearer token).
    assert request.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
    assert request.headers["anthropic-version"]
    body = request.json
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 1024
    (system,) = body["system"]
    assert system["text"].startswith("You are Dana, the planner.\n\nHand work over with @name.")
    assert "Skills you can use:\n- review: Review: look for failure paths" in system["text"]
    assert "call the send_message tool" in system["text"]
    # Prompt-cache breakpoints (docs/memory.md): the system prompt, the last tool, the
    # end of the messages; the next request of the thread reads them back.
    cache = {"cache_control": {"type": "ephemeral", "ttl": "5m"}}
    assert system["cache_control"] == cache["cache_control"]
    text = {"type": "text", "text": render_prompt(turn)}
    assert body["messages"] == [{"role": "user", "content": [{**text, **cache}]}]
    tools = [
        {"name": s.name, "description": s.description, "input_schema": s.schema()}
        for s in LocalTools().tools()
    ]
    assert body["tools"] == [*tools[:-1], {**tools[-1], **cache}]
    assert body["tool_choice"] == {"type": "auto"}
    assert set(body) == {"model", "max_tokens", "system", "messages", "tools", "tool_choice", "stream"}


# -- tool calls are the only posts --------------------------------------------------------------


async def test_openai_two_send_message_calls_post_two_messages_and_content_stays_private(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.push(
        openai_answer(send("Plan: A, then B."), send("@eli can you take A?"), content="thinking…"),
        openai_text("All posted; nothing more."),
    )

    reply = await openai_agent(http, sleeps, llm).run(make_turn())

    assert reply.posts == ("Plan: A, then B.", "@eli can you take A?")
    assert "thinking…" not in reply.posts


async def test_anthropic_two_send_message_calls_post_two_messages_and_text_stays_private(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.anthropic.push(
        anthropic_answer(send("Plan: A, then B."), send("@eli can you take A?"), text="Let me think."),
        anthropic_text("Done."),
    )

    reply = await anthropic_agent(http, sleeps, llm).run(make_turn())

    assert reply.posts == ("Plan: A, then B.", "@eli can you take A?")


async def test_openai_reply_without_tool_call_is_silence(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.push(openai_text("I would say hello, but no."))

    reply = await openai_agent(http, sleeps, llm).run(make_turn())

    assert reply.posts == ()
    assert len(llm.openai.requests) == 1


async def test_anthropic_reply_without_tool_use_is_silence(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.anthropic.push(anthropic_text("Nothing to add."))

    reply = await anthropic_agent(http, sleeps, llm).run(make_turn())

    assert reply.posts == ()
    assert len(llm.anthropic.requests) == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_an_empty_answer_is_silence_not_a_retry(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    agent, endpoint, _ok = _agent_endpoint_ok(kind, http, sleeps, llm)
    endpoint.push(openai_text("") if kind == "openai" else anthropic_text(""))

    reply = await agent.run(make_turn())

    assert reply.posts == ()
    assert len(endpoint.requests) == 1


async def test_openai_malformed_tool_arguments_are_skipped_and_the_rest_posted(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    llm.openai.push(
        openai_raw(
            [
                call("x", "send_message", "{not json"),
                call("g", "send_message", json.dumps({"text": "good one"})),
                call("y", "delete_repo", "{}"),
                call("z", "send_message", {"text": "obj"}),  # an object, as some local servers send
            ]
        ),
        openai_text(),
    )

    reply = await openai_agent(http, sleeps, llm).run(make_turn())

    assert reply.posts == ("good one", "obj")
    # The model hears about the two it got wrong, and the loop goes on.
    results = llm.openai.requests[1].tool_results()
    assert len(results) == 4
    assert "delete_repo" in results[2]


# -- retries and failures ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_429_with_retry_after_is_waited_out_then_answered(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    agent, endpoint, ok = _agent_endpoint_ok(kind, http, sleeps, llm)
    endpoint.push(error(429, "slow down", retry_after="7"), *ok)

    reply = await agent.run(make_turn())

    assert reply.posts == ("hello",)
    assert len(endpoint.requests) == 3  # the refused call, its retry, the closing call
    assert endpoint.requests[0].json == endpoint.requests[1].json  # the same call again
    assert sleeps.waits == [7.0]


async def test_retry_after_longer_than_30_seconds_is_capped(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.push(error(429, retry_after="3600"), openai_text())

    await openai_agent(http, sleeps, llm).run(make_turn())

    assert sleeps.waits == [30.0]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_500_is_retried_with_backoff(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    agent, endpoint, ok = _agent_endpoint_ok(kind, http, sleeps, llm)
    endpoint.push(Answer(500), Answer(503), *ok)

    reply = await agent.run(make_turn())

    assert reply.posts == ("hello",)
    assert len(endpoint.requests) == 4
    assert sleeps.waits == [0.5, 1.0]


async def test_server_errors_on_every_attempt_fail_the_turn_with_the_status(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.default = error(500, "upstream exploded")

    with pytest.raises(TurnFailed, match=r"answered 500: upstream exploded \(after 4 attempts\)"):
        await openai_agent(http, sleeps, llm).run(make_turn())

    assert len(llm.openai.requests) == 4
    assert sleeps.waits == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_timeout_on_every_attempt_is_a_failed_turn(sleeps: Sleeps, llm: LLMServer, kind: str) -> None:
    async with make_http_client(timeout=httpx2.Timeout(0.2)) as http:
        agent, endpoint, _ok = _agent_endpoint_ok(kind, http, sleeps, llm)
        endpoint.default = Answer(delay=2.0, json={})

        with pytest.raises(TurnFailed, match="timed out"):
            await agent.run(make_turn())

    assert len(endpoint.requests) == 4


async def test_a_timeout_then_success_is_answered(sleeps: Sleeps, llm: LLMServer) -> None:
    async with make_http_client(timeout=httpx2.Timeout(0.2)) as http:
        llm.openai.push(Answer(delay=2.0, json={}), openai_answer(send("ok")), openai_text())

        reply = await openai_agent(http, sleeps, llm).run(make_turn())

    assert reply.posts == ("ok",)


async def test_a_dropped_connection_is_retried(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.push(Answer(drop=True), openai_answer(send("ok")), openai_text())

    reply = await openai_agent(http, sleeps, llm).run(make_turn())

    assert reply.posts == ("ok",)
    assert sleeps.waits == [0.5]


async def test_connection_refused_is_retried_then_a_failed_turn(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"

    with pytest.raises(
        TurnFailed, match=r"cannot reach http://127.0.0.1:\d+/v1/chat/completions.*3 attempts"
    ):
        await openai_agent(http, sleeps, llm, base_url=url, attempts=3).run(make_turn())

    assert sleeps.waits == [0.5, 1.0]


async def test_client_error_fails_at_once_and_never_shows_the_api_key(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.default = error(401, f"Incorrect API key provided: {OPENAI_KEY}.")

    with pytest.raises(TurnFailed) as failed:
        await openai_agent(http, sleeps, llm).run(make_turn())

    assert len(llm.openai.requests) == 1
    assert "401" in str(failed.value)
    assert OPENAI_KEY not in str(failed.value)
    assert "0123456789" not in str(failed.value)
    assert OPENAI_KEY not in repr(openai_agent(http, sleeps, llm))


async def test_url_credentials_never_appear_in_errors(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.default = error(400, "bad request")
    url = llm.openai_url.replace("http://", "http://user:hunter2@")

    with pytest.raises(TurnFailed) as failed:
        await openai_agent(http, sleeps, llm, base_url=url).run(make_turn())

    assert "hunter2" not in str(failed.value)
    assert "answered 400: bad request" in str(failed.value)


async def test_unexpected_response_shape_is_a_failed_turn(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.push(Answer(json={"choices": [], "usage": {"total_tokens": 9}}))
    ledger = MemoryLedger()

    with pytest.raises(TurnFailed, match="unexpected shape"):
        await openai_agent(http, sleeps, llm, ledger=ledger).run(make_turn())

    assert len(llm.openai.requests) == 1  # not retried: the same call would get the same answer


async def test_a_success_that_is_not_json_is_a_failed_turn(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    llm.openai.push(Answer(200, text="<html>proxy says hi</html>"))

    with pytest.raises(TurnFailed, match="openai"):
        await openai_agent(http, sleeps, llm).run(make_turn())


# -- usage and the daily budget -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_usage_is_accumulated_per_instance_and_returned(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    ledger = MemoryLedger()
    agent, endpoint, _ok = _agent_endpoint_ok(kind, http, sleeps, llm, ledger=ledger)
    if kind == "openai":
        endpoint.push(*[openai_answer(send("a"), tokens=(40, 2)), openai_text(tokens=(5, 1))] * 2)
    else:
        endpoint.push(*[anthropic_answer(send("a"), tokens=(30, 12)), anthropic_text(tokens=(5, 1))] * 2)

    first = await agent.run(make_turn())
    await agent.run(make_turn())

    assert first.tokens == 48  # input + output of both calls
    assert ledger.used_today("dana") == 96
    assert ledger.used_today("eli") == 0


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_spent_daily_budget_refuses_before_any_request(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    ledger = MemoryLedger()
    agent, endpoint, _ok = _agent_endpoint_ok(kind, http, sleeps, llm, ledger=ledger, daily_tokens=100)
    endpoint.default = (
        openai_answer(send("a"), tokens=(40, 2)) if kind == "openai" else anthropic_answer(send("a"))
    )
    ledger.add("dana", 60)

    # 60 < 100: the first call is made; its tokens spend the cap, so the second is not.
    with pytest.raises(BudgetExhausted, match="100"):
        await agent.run(make_turn())
    calls = len(endpoint.requests)
    with pytest.raises(BudgetExhausted, match="100"):
        await agent.run(make_turn())

    assert calls == 1
    assert len(endpoint.requests) == 1


async def test_budget_refusal_makes_no_http_call_at_all(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    ledger = MemoryLedger()
    ledger.add("dana", 500)
    agent = openai_agent(http, sleeps, llm, ledger=ledger, daily_tokens=500)
    llm.openai.default = openai_answer(send("a"))

    with pytest.raises(BudgetExhausted):
        await agent.run(make_turn())

    assert llm.requests == []


async def test_budget_refusal_is_logged_with_instance_used_and_cap(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer
) -> None:
    ledger = MemoryLedger()
    ledger.add("dana", 700)
    agent = openai_agent(http, sleeps, llm, ledger=ledger, daily_tokens=500)

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


def _agent_endpoint_ok(
    kind: str, http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, **kw: Any
) -> tuple[Any, Endpoint, tuple[Answer, Answer]]:
    """The agent, its endpoint, and the two answers of a model that posts "hello" and stops."""
    if kind == "openai":
        return (
            openai_agent(http, sleeps, llm, **kw),
            llm.openai,
            (openai_answer(send("hello")), openai_text()),
        )
    return (
        anthropic_agent(http, sleeps, llm, **kw),
        llm.anthropic,
        (anthropic_answer(send("hello")), anthropic_text()),
    )


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
