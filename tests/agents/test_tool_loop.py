"""The tool loop of the LLM back ends (docs/agents.md), each back end run on its own
(``LocalTools``) against the model server: tool results go back to the model, the step
limit ends a turn that never stops, budgets are checked before every call, every step is
reported, and a tool's schema reaches the provider as it was written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
import structlog
from pydantic import Field

from nanoslack.agents import (
    AnthropicAgent,
    BudgetExhausted,
    MemoryLedger,
    OpenAIAgent,
    ToolResult,
    TurnFailed,
)
from nanoslack.agents.local import LocalTools
from nanoslack.agents.tool import AnyArguments, Arguments, Tool
from nanoslack.testing.llm_server import (
    Answer,
    Endpoint,
    LLMServer,
    anthropic_answer,
    anthropic_text,
    error,
    openai_answer,
    openai_text,
    send,
)

from .conftest import Sleeps
from .helpers import Alone, make_turn

KINDS = ["openai", "anthropic"]


def agent_for(kind: str, http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, **kw: Any) -> Alone:
    if kind == "openai":
        backend: Any = OpenAIAgent(
            http,
            base_url=llm.openai_url,
            api_key="sk-test-1234567",
            model="gpt-test",
            instance="dana",
            sleep=sleeps,
        )
    else:
        backend = AnthropicAgent(
            http,
            base_url=llm.anthropic_url,
            api_key="sk-ant-1234567",
            model="claude-test",
            instance="dana",
            sleep=sleeps,
        )
    return Alone(backend, **kw)


def endpoint_of(kind: str, llm: LLMServer) -> Endpoint:
    return llm.openai if kind == "openai" else llm.anthropic


def calls(kind: str, *tool_calls: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (40, 2)) -> Answer:
    return (
        openai_answer(*tool_calls, tokens=tokens)
        if kind == "openai"
        else anthropic_answer(*tool_calls, tokens=tokens)
    )


def done(kind: str, text: str = "") -> Answer:
    return openai_text(text) if kind == "openai" else anthropic_text(text)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_model_that_reads_a_skill_then_posts_posts_once_and_hears_the_skill(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, teammates: Path, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    endpoint.push(
        calls(kind, ("read_skill", {"name": "review"})),
        calls(kind, send("Reviewed: the failure paths look fine.")),
        done(kind, "Posted."),
    )
    agent = agent_for(kind, http, sleeps, llm, skills_dir=teammates / "_skills")

    reply = await agent.run(make_turn())

    assert reply.posts == ("Reviewed: the failure paths look fine.",)
    assert len(endpoint.requests) == 3
    # The second request carries the skill's text as the tool's result.
    assert endpoint.requests[1].tool_results() == ["# Review: look for failure paths\n"]
    assert endpoint.requests[2].tool_results()[-1] == "posted"


@pytest.mark.parametrize("kind", KINDS)
async def test_a_refused_tool_call_comes_back_as_a_failed_result_the_model_reads(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, teammates: Path, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    endpoint.push(calls(kind, ("read_skill", {"name": "nope"})), done(kind))
    agent = agent_for(kind, http, sleeps, llm, skills_dir=teammates / "_skills")

    reply = await agent.run(make_turn())

    assert reply.posts == ()
    (result,) = endpoint.requests[1].tool_results()
    assert "no skill named 'nope'; the skills are: review" in result
    assert "try again" not in result.lower()  # a refusal, not a retry prompt
    if kind == "anthropic":
        (block,) = endpoint.requests[1].tool_result_blocks()
        assert block["is_error"] is True


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.timeout(60)  # a loop that ends on neither limit nor answer: fail, don't hang
async def test_a_model_that_never_stops_ends_after_max_steps_with_what_it_posted(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, teammates: Path, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    # Far past the limit, the model gives in: a loop without the limit then fails on the
    # count below instead of spinning. The timeout alone is no guard: its alarm is raised
    # inside the model client's call, and under the Anthropic client the loop goes on.
    endpoint.push(calls(kind, send("On it.")), *[calls(kind, ("read_skill", {"name": "review"}))] * 20)
    endpoint.default = done(kind)
    agent = agent_for(kind, http, sleeps, llm, skills_dir=teammates / "_skills", max_steps=4)

    with structlog.testing.capture_logs() as logs:
        reply = await agent.run(make_turn())

    assert len(endpoint.requests) == 4
    assert reply.posts == ("On it.",)
    assert reply.tokens == 4 * 42
    limit = [entry for entry in logs if entry["event"] == "turn step limit reached"]
    assert limit == [
        {"event": "turn step limit reached", "instance": "dana", "steps": 4, "log_level": "warning"}
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_daily_cap_spent_by_the_first_step_stops_the_loop_before_the_second_call(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, teammates: Path, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    endpoint.default = calls(kind, send("First step done."), tokens=(90, 10))
    ledger = MemoryLedger()
    agent = agent_for(kind, http, sleeps, llm, ledger=ledger, daily_tokens=100)

    with pytest.raises(BudgetExhausted, match="100 of 100"):
        await agent.run(make_turn())

    assert len(endpoint.requests) == 1
    (tools,) = agent.tools
    assert tools.posts == ["First step done."]  # collected; what becomes of it is the turn's business
    assert [(s.kind, s.name, s.tokens) for s in tools.steps] == [
        ("model", "gpt-test" if kind == "openai" else "claude-test", 100),
        ("tool", "send_message", 0),
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_every_model_call_and_tool_call_is_reported_as_a_step(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, teammates: Path, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    endpoint.push(
        calls(kind, ("read_skill", {"name": "review"}), send("a"), tokens=(10, 5)),
        done(kind),
    )
    agent = agent_for(kind, http, sleeps, llm, skills_dir=teammates / "_skills")

    await agent.run(make_turn())

    (tools,) = agent.tools
    model = "gpt-test" if kind == "openai" else "claude-test"
    assert [(s.kind, s.name, s.tokens, s.error) for s in tools.steps] == [
        ("model", model, 15, None),
        ("tool", "read_skill", 0, None),
        ("tool", "send_message", 0, None),
        ("model", model, 42, None),
    ]
    assert tools.calls == [("read_skill", {"name": "review"}), ("send_message", {"text": "a"})]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_failed_model_call_is_reported_with_its_reason_and_fails_the_turn(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    endpoint.push(error(400, "context too long"))
    agent = agent_for(kind, http, sleeps, llm)

    with pytest.raises(TurnFailed, match=r"answered 400: context too long$"):
        await agent.run(make_turn())

    assert len(endpoint.requests) == 1  # a refusal is not retried
    (tools,) = agent.tools
    (step,) = tools.steps
    assert (step.kind, step.tokens) == ("model", 0)
    assert step.error is not None and "answered 400: context too long" in step.error


@pytest.mark.parametrize("kind", KINDS)
async def test_a_429_with_retry_after_0_is_retried_at_once_then_answered(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    endpoint.push(error(429, "slow down", retry_after="0"), calls(kind, send("hello")), done(kind))
    agent = agent_for(kind, http, sleeps, llm)

    reply = await agent.run(make_turn())

    assert reply.posts == ("hello",)
    assert sleeps.waits == [0.0]
    assert len(endpoint.requests) == 3
    (tools,) = agent.tools
    assert [s.kind for s in tools.steps] == ["model", "tool", "model"]  # the retry is inside one step


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tools_schema_reaches_the_provider_exactly_as_written(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    # The shape MCP servers publish: titles, defaults, formats, open objects, optional fields.
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "search_issuesArguments",
        "type": "object",
        "properties": {
            "query": {"title": "Query", "type": "string", "minLength": 1},
            "limit": {"title": "Limit", "type": "integer", "default": 10, "maximum": 100},
            "since": {"type": "string", "format": "date-time"},
            "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
        "required": ["query"],
        "additionalProperties": True,
    }

    async def ok(_args: AnyArguments) -> ToolResult:
        return ToolResult("ok")

    spec = Tool(
        "tracker_search_issues",
        "Search the tracker.",
        AnyArguments,
        ok,
        origin="mcp:tracker",
        parameters=schema,
    )
    endpoint = endpoint_of(kind, llm)
    endpoint.push(
        calls(kind, ("tracker_search_issues", {"query": "flaky", "extra": [1, {"x": None}]})), done(kind)
    )
    tools = LocalTools(instance="dana", extra=(spec,))
    agent = agent_for(kind, http, sleeps, llm)

    await agent.agent.run(make_turn(), tools)

    sent = endpoint.requests[0].json["tools"]
    mine = [t for t in sent if _tool_name(t) == "tracker_search_issues"]
    assert [_tool_schema(t) for t in mine] == [schema]
    # The model's arguments reach the tool as it sent them, unvalidated by us.
    assert tools.calls == [("tracker_search_issues", {"query": "flaky", "extra": [1, {"x": None}]})]
    assert endpoint.requests[1].tool_results() == ["ok"]


def _tool_name(tool: dict[str, Any]) -> str:
    return str(tool["function"]["name"] if "function" in tool else tool["name"])


def _tool_schema(tool: dict[str, Any]) -> Any:
    return tool["function"]["parameters"] if "function" in tool else tool["input_schema"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_turn_cancelled_during_a_model_call_is_cancelled_not_failed(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    # A halt cancels the turn's task: the scheduler must see CancelledError, not a failure.
    endpoint = endpoint_of(kind, llm)
    endpoint.default = Answer(delay=30.0, json={})
    agent = agent_for(kind, http, sleeps, llm)

    task = asyncio.create_task(agent.run(make_turn()))
    for _ in range(500):
        if endpoint.requests:
            break
        await asyncio.sleep(0.01)
    assert endpoint.requests, "the model call never started"
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tool_call_with_arguments_that_do_not_fit_its_model_is_refused_with_the_reason(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    endpoint = endpoint_of(kind, llm)
    endpoint.push(
        calls(kind, ("send_message", {"txt": "hello"}), ("read_skill", {"name": ["review"]})),
        calls(kind, send("hello")),
        done(kind),
    )
    agent = agent_for(kind, http, sleeps, llm)

    reply = await agent.run(make_turn())

    (tools,) = agent.tools
    # Neither call ran, the model heard why, then got it right.
    assert reply.posts == ("hello",)
    post, skill = endpoint.requests[1].tool_results()
    # A failed result, as a refusal is (not a retry prompt).
    assert "not done: the arguments do not fit send_message: text: Field required" in post
    assert "not done: the arguments do not fit read_skill: name: Input should be a valid string" in skill
    assert "try again" not in (post + skill).lower()
    if kind == "anthropic":
        assert [b["is_error"] for b in endpoint.requests[1].tool_result_blocks()] == [True, True]
    # Both refusals are steps of the turn, like any other call.
    assert [(s.kind, s.name, s.error is not None) for s in tools.steps if s.kind == "tool"] == [
        ("tool", "send_message", True),
        ("tool", "read_skill", True),
        ("tool", "send_message", False),
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tool_gets_its_arguments_as_its_model(
    http: httpx2.AsyncClient, sleeps: Sleeps, llm: LLMServer, kind: str
) -> None:
    class Plan(Arguments):
        steps: int = Field(ge=1, description="How many steps.")
        title: str = Field("untitled", description="What it is called.")

    seen: list[Plan] = []

    async def plan(args: Plan) -> ToolResult:
        seen.append(args)
        return ToolResult(f"{args.steps} steps: {args.title}")

    endpoint = endpoint_of(kind, llm)
    endpoint.push(calls(kind, ("plan", {"steps": "3"})), done(kind))
    tools = LocalTools(instance="dana", extra=(Tool("plan", "Plan the work.", Plan, plan),))
    agent = agent_for(kind, http, sleeps, llm)

    await agent.agent.run(make_turn(), tools)

    assert seen == [Plan(steps=3)]  # validated once, by the model, before the call
    assert endpoint.requests[1].tool_results() == ["3 steps: untitled"]
    (sent,) = [t for t in endpoint.requests[0].json["tools"] if _tool_name(t) == "plan"]
    assert _tool_schema(sent) == {
        "type": "object",
        "properties": {
            "steps": {"type": "integer", "minimum": 1, "description": "How many steps."},
            "title": {"type": "string", "default": "untitled", "description": "What it is called."},
        },
        "required": ["steps"],
    }
