"""ask_agent's rules as the tool checks them, before anything runs (docs/agents.md "Asking a
teammate"): the chief is exempt from the allowlist both ways, a turn asks at most three
times, and what reaches the asked instance (depth, who waits, the files as the turn saw them).
The end-to-end refusals (itself, unknown names, the allowlist, the asker, depth 3) are in
tests/e2e/test_asks.py."""

from __future__ import annotations

from nanoslack.agents import SeenFile, ToolResult
from nanoslack.config.tools import ToolSettings
from nanoslack.tools.ask import AskAgent, AskContext, AskedBy, AskRequest, AskTools, cut_answer

FLEET = ("dana", "eli", "fay")


def tools(me: str, settings: ToolSettings, sent: list[AskRequest], **extra: object) -> AskTools:
    async def route(request: AskRequest) -> ToolResult:
        sent.append(request)
        return ToolResult(f"{request.to} answers")

    ctx = AskContext(
        instance=me,
        turn_id=7,
        channel="C0ROOM",
        may_ask=settings.may_hand_off,
        fleet=FLEET,
        timeout=5.0,
        route=route,
        **extra,  # type: ignore[arg-type]
    )
    return AskTools(ctx)


async def call(ask: AskTools, to: str, question: str = "why?", files: list[str] | None = None) -> ToolResult:
    (tool,) = ask.tools()
    return await tool.run(AskAgent(to=to, question=question, files=files or []))


async def test_the_chief_may_ask_anyone_and_be_asked_by_anyone_outside_the_allowlist() -> None:
    settings = ToolSettings(chief="fay")
    sent: list[AskRequest] = []
    assert (await call(tools("fay", settings, sent), "dana")).text == "dana answers"
    assert (await call(tools("eli", settings, sent), "fay")).text == "fay answers"
    refused = await call(tools("dana", settings, sent), "eli")
    assert refused.is_error and "NANOSLACK_A2A_ALLOW does not list dana>eli" in refused.text
    assert [r.to for r in sent] == ["dana", "fay"]


async def test_a_turn_asks_three_times_at_most_and_a_refused_call_counts_toward_none() -> None:
    sent: list[AskRequest] = []
    ask = tools("dana", ToolSettings(allow=frozenset({("dana", "eli")})), sent)
    assert (await call(ask, "bob")).is_error  # refused: no ask spent
    for _ in range(3):
        assert not (await call(ask, "eli")).is_error
    fourth = await call(ask, "eli")
    assert fourth.text == "not asked: a turn asks at most 3 times"
    # Each ask's number is its call's, refused ones too: turns --steps pairs them with the steps.
    assert [r.seq for r in sent] == [2, 3, 4]
    assert {r.thread_key for r in sent} == {"ask:7:2", "ask:7:3", "ask:7:4"}


async def test_an_asked_turns_ask_goes_one_deeper_with_the_chain_and_the_files_it_was_passed() -> None:
    plan = SeenFile("F1", "plan.txt", "text/plain", 20, "text", "[file: plan.txt (20 B)]\nship Friday")
    sent: list[AskRequest] = []
    settings = ToolSettings(allow=frozenset({("eli", "fay")}))
    ask = tools("eli", settings, sent, asked=AskedBy(1, ("dana",)), files_seen=(plan,))
    assert not (await call(ask, "fay", files=["plan.txt"])).is_error
    (request,) = sent
    assert (request.asker, request.depth, request.chain, request.files) == (
        "eli",
        2,
        ("dana", "eli"),
        (plan,),
    )
    assert (await call(ask, "dana")).text.startswith("not asked: dana is waiting for your answer")


def test_an_answer_is_cut_to_4000_characters_with_a_note() -> None:
    assert cut_answer("short") == "short"
    cut = cut_answer("x" * 5000)
    assert len(cut) == 4000 and cut.endswith("[cut: an answer is at most 4000 characters]")
