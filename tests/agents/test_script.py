"""The ``script`` back end: rules, placeholders, wrap-up, and the sample crew's exchange."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nanoslack.agents import Line, RulesError, ScriptAgent, Turn, TurnFailed
from nanoslack.agents.local import LocalTools

from .helpers import bot, human, make_turn

REPO_TEAMMATES = Path(__file__).resolve().parents[2] / "teammates"
MEMBERS = ("alice", "dana", "eli", "fay")


def rules_file(tmp_path: Path, rules: dict[str, Any], name: str = "script.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(rules), encoding="utf-8")
    return path


async def test_first_matching_rule_answers_with_placeholders_filled(tmp_path: Path) -> None:
    path = rules_file(
        tmp_path,
        {
            "rules": [
                {"match": "deploy", "reply": "not this one"},
                {
                    "match": "@{name}\\b",
                    "reply": ["Hi {sender}, {name} here.", "@{next}: you said '{text}'?"],
                },
                {"match": ".", "reply": "too late"},
            ]
        },
    )

    reply = await ScriptAgent(path, instance="dana").run(make_turn(human("@DANA hello")), LocalTools())

    assert reply.posts == ("Hi alice, dana here.", "@eli: you said '@DANA hello'?")


async def test_from_human_and_from_bot_rules_tell_senders_apart(tmp_path: Path) -> None:
    path = rules_file(
        tmp_path,
        {
            "rules": [
                {"from": "bot", "reply": "a bot: {sender}"},
                {"from": "human", "reply": "a human: {sender}"},
            ]
        },
    )
    agent = ScriptAgent(path, instance="dana")

    assert (await agent.run(make_turn(bot("x", "fay")), LocalTools())).posts == ("a bot: fay",)
    assert (await agent.run(make_turn(human("x")), LocalTools())).posts == ("a human: alice",)


async def test_no_match_uses_default_and_absent_default_is_silence(tmp_path: Path) -> None:
    silent = ScriptAgent(rules_file(tmp_path, {"rules": [{"match": "never", "reply": "x"}]}), instance="dana")
    talker = ScriptAgent(
        rules_file(tmp_path, {"rules": [], "default": "Noted, {sender}."}, "b.json"), instance="dana"
    )

    assert (await silent.run(make_turn(human("hello")), LocalTools())).posts == ()
    assert (await talker.run(make_turn(human("hello")), LocalTools())).posts == ("Noted, alice.",)


async def test_wrapping_up_uses_the_rule_wrap_up_answer_or_silence(tmp_path: Path) -> None:
    path = rules_file(
        tmp_path,
        {
            "rules": [
                {"match": "short", "reply": "long answer", "when_wrapping_up": "brief"},
                {"match": "quiet", "reply": "long answer", "when_wrapping_up": None},
                {"match": "plain", "reply": "same answer"},
            ]
        },
    )
    agent = ScriptAgent(path, instance="dana")

    async def answer(text: str) -> tuple[str, ...]:
        return (await agent.run(make_turn(bot(text), wrapping_up=True), LocalTools())).posts

    assert await answer("short") == ("brief",)
    assert await answer("quiet") == ()
    assert await answer("plain") == ("same answer",)


async def test_rules_look_at_the_newest_message_only(tmp_path: Path) -> None:
    path = rules_file(tmp_path, {"rules": [{"match": "@{name}", "reply": "yes"}]})

    reply = await ScriptAgent(path, instance="dana").run(
        make_turn(human("@dana hi"), bot("@fay over to you")), LocalTools()
    )

    assert reply.posts == ()


@pytest.mark.parametrize(
    ("me", "crew", "members", "expected"),
    [
        ("dana", ["dana", "eli", "fay"], MEMBERS, "eli"),
        ("fay", ["dana", "eli", "fay"], MEMBERS, "dana"),  # cycles past the end
        ("dana", ["dana", "eli", "fay"], ("alice", "dana", "fay"), "fay"),  # eli not in the room
        ("eli", [], MEMBERS, "fay"),  # no crew: the room's member list
        ("fay", [], MEMBERS, "alice"),
        ("dana", ["dana"], MEMBERS, ""),
    ],
)
async def test_next_is_the_teammate_after_me(
    tmp_path: Path, me: str, crew: list[str], members: tuple[str, ...], expected: str
) -> None:
    path = rules_file(tmp_path, {"crew": crew, "rules": [{"reply": "[{next}]"}]})

    reply = await ScriptAgent(path, instance=me).run(
        make_turn(human("hi"), instance=me, name=me, members=members), LocalTools()
    )

    assert reply.posts == (f"[{expected}]",)


async def test_other_braces_are_kept_literally(tmp_path: Path) -> None:
    path = rules_file(tmp_path, {"rules": [{"reply": 'json: {"a": 1} {unknown} {{name}}'}]})

    reply = await ScriptAgent(path, instance="dana").run(make_turn(), LocalTools())

    assert reply.posts == ('json: {"a": 1} {unknown} {dana}',)


async def test_named_groups_of_the_match_fill_the_reply_and_the_calls(tmp_path: Path) -> None:
    path = rules_file(
        tmp_path,
        {
            "rules": [
                {
                    "match": "remember(?: that)? (?P<what>.+)|(?P<never>zzz)",
                    "calls": [{"tool": "note", "arguments": {"text": "{what}", "n": 1}}],
                    "reply": "{what}|{never}|{sender}",
                }
            ]
        },
    )
    tools = LocalTools()

    reply = await ScriptAgent(path, instance="dana").run(
        make_turn(human("@dana remember that deploys are on Thursday ")), tools
    )

    assert reply.posts == ("deploys are on Thursday||alice",)
    assert tools.calls == [("note", {"text": "deploys are on Thursday", "n": 1})]


async def test_rules_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = rules_file(tmp_path, {"rules": [{"reply": "old"}]})
    agent = ScriptAgent(path, instance="dana")
    assert (await agent.run(make_turn(), LocalTools())).posts == ("old",)

    path.write_text(json.dumps({"rules": [{"reply": "new and longer"}]}), encoding="utf-8")
    os.utime(path, ns=(1, 1))

    assert (await agent.run(make_turn(), LocalTools())).posts == ("new and longer",)

    path.write_text("{broken", encoding="utf-8")
    with pytest.raises(TurnFailed, match="not valid JSON"):
        await agent.run(make_turn(), LocalTools())


@pytest.mark.parametrize(
    ("rules", "problem"),
    [
        ("[1, 2]", "expected a JSON object"),
        ('{"rules": [{"match": "("}]}', r"rules\[0\].match: not a valid regular expression"),
        ('{"rules": [{"from": "robot"}]}', r"rules\[0\].from: expected one of human, bot, agent, any"),
        ('{"rules": [{"reply": 3}]}', r"rules\[0\].reply: expected a string"),
        ('{"crew": "dana"}', "'crew' must be a list"),
        ('{"rules": [{"note": "["}]}', r"rules\[0\].note: not a valid regular expression"),
        ('{"rules": [{"match": "(?P<text>.+)"}]}', r"rules\[0\].match: group name 'text' is a placeholder"),
    ],
)
def test_malformed_rules_are_refused_at_load_with_the_place(tmp_path: Path, rules: str, problem: str) -> None:
    path = tmp_path / "script.json"
    path.write_text(rules, encoding="utf-8")

    with pytest.raises(RulesError, match=problem):
        ScriptAgent(path, instance="dana")


async def test_a_note_rule_answers_only_turns_that_carry_that_note(tmp_path: Path) -> None:
    path = rules_file(
        tmp_path,
        {"rules": [{"from": "human", "note": "at once", "reply": "my part"}, {"reply": "plain"}]},
    )
    agent = ScriptAgent(path, instance="eli")
    together = ("Everyone in this room answers this question at once, each for their own part.",)

    in_round = await agent.run(make_turn(human("plan Friday?"), notes=together), LocalTools())
    elsewhere = await agent.run(make_turn(human("plan Friday?")), LocalTools())

    assert (in_round.posts, elsewhere.posts) == (("my part",), ("plain",))


# -- the sample crew -------------------------------------------------------------------------


async def test_sample_crew_hands_off_round_robin_and_then_falls_silent() -> None:
    """alice mentions dana; each bot answers only what mentions it; dana closes without a mention."""
    agents = {name: ScriptAgent(REPO_TEAMMATES / name / "script.json", instance=name) for name in MEMBERS[1:]}
    history: list[Line] = [human("@dana can we plan the release?")]
    posts: list[tuple[str, str]] = []

    for _round in range(6):  # every bot gets a turn on every new message (mention-sticky room)
        spoke = False
        for name, agent in agents.items():
            reply = await agent.run(_turn_for(name, history), LocalTools())
            for text in reply.posts:
                posts.append((name, text))
                history.append(bot(text, name, ts=f"17.{len(history)}"))
                spoke = True
        if not spoke:
            break

    assert [who for who, _ in posts] == ["dana", "eli", "fay", "dana"]
    assert "@eli" in posts[0][1] and "@fay" in posts[1][1] and "@dana" in posts[2][1]
    assert "@" not in posts[3][1]
    assert all(len(text) < 200 for _, text in posts)


@pytest.mark.parametrize("name", ["dana", "eli", "fay"])
async def test_sample_crew_remembers_what_alice_asks_and_forgets_a_note_by_its_id(name: str) -> None:
    agent = ScriptAgent(REPO_TEAMMATES / name / "script.json", instance=name)
    asked, forgot, chat = LocalTools(), LocalTools(), LocalTools()

    kept = await agent.run(_turn_for(name, [human(f"@{name} remember that deploys are on Thursday")]), asked)
    gone = await agent.run(_turn_for(name, [human(f"@{name} please forget m3")]), forgot)
    await agent.run(_turn_for(name, [human(f"@{name} do you remember the plan?")]), chat)

    assert asked.calls == [("remember", {"text": "deploys are on Thursday", "scope": "self"})]
    assert kept.posts == ("Noted, alice. I'll remember: deploys are on Thursday",)
    assert forgot.calls == [("forget", {"id": "m3"})]
    assert gone.posts == ("Forgetting m3, alice.",)
    assert "remember" not in [tool for tool, _ in chat.calls]  # a question about memory asks nothing


@pytest.mark.parametrize("name", ["dana", "eli", "fay"])
async def test_sample_crew_is_brief_or_silent_when_wrapping_up(name: str) -> None:
    agent = ScriptAgent(REPO_TEAMMATES / name / "script.json", instance=name)
    normal = await agent.run(
        _turn_for(name, [bot(f"@{name} over to you", "eli" if name != "eli" else "fay")]), LocalTools()
    )
    wrap = await agent.run(
        _turn_for(name, [bot(f"@{name} over to you", "eli" if name != "eli" else "fay")], wrapping_up=True),
        LocalTools(),
    )

    assert len(" ".join(wrap.posts)) <= len(" ".join(normal.posts))
    assert "@" not in " ".join(wrap.posts)  # a wrap-up answer hands nothing on


def _turn_for(name: str, history: list[Line], wrapping_up: bool = False) -> Turn:
    return make_turn(*history, instance=name, name=name, members=MEMBERS, wrapping_up=wrapping_up)
