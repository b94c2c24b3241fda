"""ask_agent end to end (docs/agents.md "Asking a teammate"): an agent asks a teammate and
waits; the teammate answers in a turn of its own that posts nothing in Slack, its answer is
the asker's tool result, and ``nanoslack turns --steps`` shows the chain. A model that hangs
is cut off at NANOSLACK_ASK_TIMEOUT and its turn cancelled."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nanoslack.ops import admin
from nanoslack.ops import routines as routines_cli
from nanoslack.testing.llm_server import Answer, LLMServer, Request, openai_answer, openai_text, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env

NAMES = ("dana", "eli", "fay")


def teammates(room: Room) -> Path:
    root = room.tmp / "teammates"
    for name in NAMES:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "SOUL.md").write_text(f"You are {name}, a teammate.\n")
    return root


def system_text(request: Request) -> str:
    """The request's system messages, as one text (the persona opens it)."""
    messages = (request.json or {}).get("messages", [])
    return " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")


def by_instance(scripts: dict[str, Sequence[Answer]]) -> Callable[[Request], Answer]:
    """One model server for the fleet: each instance's requests answered from its own script
    (told apart by the persona that opens the system message: the teammates list there
    names the others), then with an empty answer."""
    queues = {name: list(answers) for name, answers in scripts.items()}

    def answer(request: Request) -> Answer:
        system = system_text(request)
        who = next((name for name in NAMES if system.startswith(f"You are {name},")), "")
        queue = queues.get(who, [])
        return queue.pop(0) if queue else openai_text()

    return answer


def ask(to: str, question: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("ask_agent", {"to": to, "question": question, **extra})


def prompts_of(llm: LLMServer, name: str) -> list[str]:
    """The user prompts (the last user message) the model was sent for ``name``'s turns."""
    found = []
    for request in llm.openai.requests:
        if system_text(request).startswith(f"You are {name},"):
            messages = request.json["messages"]
            users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
            found.append(users[-1] if users else "")
    return found


def bot_posts(room: Room, name: str) -> list[str]:
    bot_id = room.apps[name].bot_id
    return [
        str(m["text"])
        for conv in room.emu.conversations()
        for m in room.emu.all_messages(conv.id)
        if m.get("bot_id") == bot_id
    ]


def settled(room: Room) -> bool:
    return room.sql(
        "SELECT (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM turns WHERE status = 'running')"
        " + (SELECT count(*) FROM outbox WHERE status IN ('queued', 'sending'))"
    ) == [(0,)]


def dm_with(room: Room, name: str) -> str:
    return room.emu.create_conversation([room.human.id, room.apps[name].bot_user_id], kind="im").id


async def start_fleet(
    room: Room,
    fleet_factory: FleetFactory,
    llm: LLMServer,
    names: Sequence[str] = ("dana", "eli"),
    *,
    root: Path | None = None,
    **env: str,
) -> None:
    """A fleet of ``names`` on the model server ``llm``, with the personas in ``root`` (by
    default ``teammates``) and the keys ``env``."""
    await fleet_factory(list(names), **openai_env(room.human.id, llm, root or teammates(room), **env))


async def dana_posted(room: Room, answer: str) -> None:
    """dana's one post anywhere is ``answer``, and the fleet has nothing left to do."""
    await room.emu.wait_for(lambda: bot_posts(room, "dana") == [answer] and settled(room), timeout=20)


async def ask_dana(room: Room, text: str, answer: str) -> None:
    """The owner writes ``text`` in dana's DM; dana answers ``answer`` and the fleet settles."""
    await room.emu.post_as_user(room.human.id, dm_with(room, "dana"), text)
    await dana_posted(room, answer)


def eli_turns_row(room: Room) -> str:
    """The one row of ``nanoslack turns --instance eli``."""
    listing = io.StringIO()
    argv = ["--db", str(room.db), "--env-file", str(room.tmp / ".env"), "--instance", "eli"]
    assert admin.turns_main(argv, out=listing) == 0
    (row,) = listing.getvalue().splitlines()[1:]
    return row


def steps_listing(room: Room, turn_id: int) -> list[list[str]]:
    out = io.StringIO()
    assert admin.turns_main(["--db", str(room.db), "--steps", str(turn_id)], out=out) == 0
    return [line.split() for line in out.getvalue().splitlines()[1:]]


async def test_in_a_dm_dana_asks_eli_and_answers_her_owner_with_elis_words_while_eli_posts_nothing(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [
                    openai_answer(ask("eli", "When do we ship?")),
                    openai_answer(send("eli says: Friday, after the freeze.")),
                ],
                "eli": [openai_answer(send("Friday, after the freeze.")), openai_text()],
            }
        )
        # DM replies stream (the default): eli's words reach dana's DM only as dana posts them.
        await start_fleet(room, fleet_factory, llm, NANOSLACK_A2A_ALLOW="dana>eli")
        await ask_dana(room, "when do we ship? ask eli", "eli says: Friday, after the freeze.")

    assert bot_posts(room, "eli") == []  # eli answered dana, not Slack
    eli_prompt = prompts_of(llm, "eli")[0]
    assert eli_prompt.startswith("[Asked by dana]")
    assert "When do we ship?" in eli_prompt
    assert "ask eli" not in eli_prompt  # the asker's conversation is not shown, only the question
    # dana's model read eli's words as the tool's result.
    results = {r for req in llm.openai.requests for r in req.tool_results() if "Friday" in r}
    assert "Friday, after the freeze." in results
    ((dana_turn,),) = room.sql("SELECT id FROM turns WHERE instance = 'dana'")
    ((eli_turn, key, status, tokens),) = room.sql(
        "SELECT id, thread_key, status, tokens FROM turns WHERE instance = 'eli'"
    )
    assert (key, status) == (f"ask:{dana_turn}:1", "done")
    assert tokens > 0  # eli's own budget paid for its turn
    assert room.sql("SELECT sum(tokens) FROM agent_usage WHERE instance = 'eli'") == [(tokens,)]
    listing = steps_listing(room, dana_turn)
    assert [row[:3] for row in listing] == [
        ["1", "model", "gpt-test"],
        ["2", "tool", "ask_agent"],
        ["2.0", "turn", "eli"],
        ["2.1", "model", "gpt-test"],
        ["2.2", "tool", "send_message"],
        ["2.3", "model", "gpt-test"],
        ["3", "model", "gpt-test"],
        ["4", "tool", "send_message"],
        ["5", "model", "gpt-test"],
    ]
    assert listing[2][3:7] == ["asked", "turn", f"{eli_turn}:", "done"]


async def test_in_a_dm_send_to_agent_is_refused_with_a_result_that_names_ask_agent(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {"dana": [openai_answer(("send_to_agent", {"to": "eli", "message": "when do we ship?"}))]}
        )
        await start_fleet(room, fleet_factory, llm, NANOSLACK_A2A_ALLOW="dana>eli", NANOSLACK_STREAM="0")
        await room.emu.post_as_user(room.human.id, dm_with(room, "dana"), "ask eli")
        await room.emu.wait_for(
            lambda: (
                room.sql("SELECT count(*) FROM turn_steps WHERE name = 'send_to_agent'") == [(1,)]
                and settled(room)
            ),
            timeout=20,
        )
    ((error,),) = room.sql("SELECT error FROM turn_steps WHERE name = 'send_to_agent'")
    assert "not in a direct message" in error and "use ask_agent" in error
    assert room.sql("SELECT count(*) FROM handoffs") == [(0,)]


def step_errors(room: Room, instance: str) -> list[tuple[str, str | None]]:
    """(arguments, error) of the instance's ask_agent calls, in order."""
    return [
        (str(args), error)
        for args, error in room.sql(
            "SELECT s.arguments, s.error FROM turn_steps s JOIN turns t ON t.id = s.turn_id"
            " WHERE t.instance = ? AND s.name = 'ask_agent' ORDER BY s.turn_id, s.step",
            instance,
        )
    ]


async def test_an_ask_to_itself_an_unknown_name_outside_the_allowlist_the_asker_or_three_deep_is_refused(
    room: Room, fleet_factory: FleetFactory
) -> None:
    room.apps["gus"] = room.emu.add_app("gus")
    root = teammates(room)
    (root / "gus").mkdir()
    (root / "gus" / "SOUL.md").write_text("You are gus, a teammate.\n")
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [
                    openai_answer(ask("dana", "q0"), ask("bob", "q0"), ask("fay", "q0"), ask("eli", "q1")),
                    openai_answer(send("done")),
                ],
                "eli": [openai_answer(ask("dana", "q1b"), ask("fay", "q2")), openai_answer(send("eli: ok"))],
                "fay": [openai_answer(ask("gus", "q3")), openai_answer(send("fay: ok"))],
            }
        )
        await start_fleet(
            room,
            fleet_factory,
            llm,
            ["dana", "eli", "fay", "gus"],
            root=root,
            # eli>dana is allowed: what refuses eli's ask back is the rule, not the allowlist.
            NANOSLACK_A2A_ALLOW="dana>eli,eli>dana,eli>fay,fay>gus",
            NANOSLACK_STREAM="0",
        )
        await ask_dana(room, "ask around", "done")

    dana = [error for _, error in step_errors(room, "dana")]
    assert dana[0] == "not asked: you cannot ask yourself"
    assert dana[1] == "not asked: no teammate is named bob; the teammates you may reach: eli"
    assert dana[2] == "not asked: dana may not ask fay (NANOSLACK_A2A_ALLOW does not list dana>fay)"
    assert dana[3] is None
    eli = [error for _, error in step_errors(room, "eli")]
    assert eli == ["not asked: dana is waiting for your answer; answer them with send_message instead", None]
    (fay,) = [error for _, error in step_errors(room, "fay")]
    assert fay is not None and fay.startswith("not asked: you are answering an ask 2 deep")
    # Nobody was asked past depth 2, and nothing but dana's answer reached Slack.
    assert room.sql("SELECT count(*) FROM turns WHERE instance = 'gus'") == [(0,)]
    assert [bot_posts(room, name) for name in ("eli", "fay", "gus")] == [[], [], []]
    assert room.sql("SELECT instance, status FROM turns ORDER BY id") == [
        ("dana", "done"),
        ("eli", "done"),
        ("fay", "done"),
    ]


async def test_an_ask_to_a_teammate_whose_model_hangs_times_out_and_its_turn_is_cancelled(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [openai_answer(ask("eli", "When do we ship?")), openai_answer(send("eli is away"))],
                "eli": [Answer(delay=30, json=openai_text("too late").json)],
            }
        )
        await start_fleet(
            room,
            fleet_factory,
            llm,
            NANOSLACK_A2A_ALLOW="dana>eli",
            NANOSLACK_ASK_TIMEOUT="1",
            NANOSLACK_STREAM="0",
        )
        await ask_dana(room, "ask eli", "eli is away")

    ((_, error),) = step_errors(room, "dana")
    assert error == (
        "no answer: eli did not answer within 1 seconds (NANOSLACK_ASK_TIMEOUT); the question was withdrawn"
    )
    assert room.sql("SELECT status, error FROM turns WHERE instance = 'eli'") == [
        ("cancelled", "no answer within 1 s (NANOSLACK_ASK_TIMEOUT): cancelled")
    ]
    # How a withdrawn ask looks in nanoslack turns: its own thread, status cancelled, the reason.
    row = eli_turns_row(room)
    assert row.split()[3:5] == [f"ask:{dana_turn_id(room)}:1", "cancelled"]
    assert "no answer within 1 s" in row
    assert bot_posts(room, "eli") == []


async def test_an_ask_passes_on_a_file_the_turn_saw_and_refuses_a_name_it_did_not_see(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [
                    openai_answer(
                        ask("eli", "Read the notes: when?", files=["plan.txt"]),
                        ask("eli", "And this?", files=["secret.txt"]),
                    ),
                    openai_answer(send("eli read it")),
                ],
                "eli": [openai_answer(send("Friday, says the plan."))],
            }
        )
        await start_fleet(room, fleet_factory, llm, NANOSLACK_A2A_ALLOW="dana>eli", NANOSLACK_STREAM="0")
        await room.emu.share_file(
            room.human.id, dm_with(room, "dana"), "plan.txt", "We ship on Friday.\n", text="ask eli"
        )
        await dana_posted(room, "eli read it")

    eli_prompt = prompts_of(llm, "eli")[0]
    assert "Read the notes: when?" in eli_prompt and "We ship on Friday." in eli_prompt
    assert [error for _, error in step_errors(room, "dana")] == [
        None,
        "not asked: you were shown no file named 'secret.txt'; the files you saw: plan.txt",
    ]


async def test_a_routines_turn_asks_a_teammate_and_posts_the_combined_answer(
    room: Room, fleet_factory: FleetFactory
) -> None:
    root = teammates(room)
    (root / "dana" / "routines.toml").write_text(
        f'[[routine]]\nname = "morning"\nevery = "1d"\nchannel = "{room.channel}"\n'
        'prompt = "Report the release status: ask eli about the build."\n'
    )
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [
                    openai_answer(ask("eli", "How is the build?")),
                    openai_answer(send("Morning report: plan on track; eli says the build is green.")),
                ],
                "eli": [openai_answer(send("The build is green."))],
            }
        )
        await start_fleet(room, fleet_factory, llm, root=root, NANOSLACK_A2A_ALLOW="dana>eli")
        await room.emu.wait_for(
            lambda: room.sql("SELECT count(*) FROM routines WHERE instance = 'dana'") == [(1,)]
        )
        assert "asked for now" in routine_cli("run", "dana", "morning", db=room.db)
        await room.emu.wait_for(lambda: bot_posts(room, "dana") and settled(room), timeout=20)

    assert bot_posts(room, "dana") == ["Morning report: plan on track; eli says the build is green."]
    assert bot_posts(room, "eli") == []
    assert "[Asked by dana]" in prompts_of(llm, "eli")[0]
    assert [error for _, error in step_errors(room, "dana")] == [None]
    ((status,),) = room.sql("SELECT status FROM routine_runs WHERE routine = 'morning'")
    assert status == "done"


def routine_cli(*argv: str, db: Path) -> str:
    out = io.StringIO()
    env = ["--env-file", str(db.parent.parent / ".env")]
    assert routines_cli.main(["--db", str(db), *env, *argv], out=out) == 0
    return out.getvalue()


async def test_a_serial_teammate_busy_in_another_thread_answers_the_ask_when_that_turn_is_done(
    room: Room, fleet_factory: FleetFactory
) -> None:
    root = teammates(room)
    (root / "eli" / "SOUL.md").write_text("---\nserial: true\n---\nYou are eli, a teammate.\n")
    held = asyncio.Event()
    dana = [openai_answer(ask("eli", "When do we ship?")), openai_answer(send("eli says: Friday."))]

    def model(request: Request) -> Answer:
        messages = request.json["messages"]
        if system_text(request).startswith("You are dana,"):
            return dana.pop(0) if dana else openai_text()
        if messages[-1]["role"] == "tool":
            return openai_text()
        if str(messages[-1]["content"]).startswith("[Asked by dana]"):
            return openai_answer(send("Friday."))
        return dataclasses.replace(openai_answer(send("on it")), hold=held)  # eli's room turn

    async with LLMServer() as llm:
        llm.openai.default = model
        await start_fleet(
            room, fleet_factory, llm, root=root, NANOSLACK_A2A_ALLOW="dana>eli", NANOSLACK_ASK_TIMEOUT="30"
        )
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('eli')} the build?")
        await room.emu.wait_for(lambda: len(prompts_of(llm, "eli")) == 1, timeout=20)
        await room.emu.post_as_user(room.human.id, dm_with(room, "dana"), "ask eli when we ship")
        await room.emu.wait_for(
            lambda: room.sql("SELECT status FROM turns WHERE thread_key LIKE 'ask:%'") == [("running",)],
            timeout=20,
        )
        assert len(prompts_of(llm, "eli")) == 1  # the asked turn waits for eli's slot
        held.set()
        await dana_posted(room, "eli says: Friday.")

    eli = prompts_of(llm, "eli")
    assert not eli[0].startswith("[Asked by") and eli[-1].startswith("[Asked by dana]")
    assert llm.most_in_flight() <= 2  # dana's and one of eli's, never two of eli's
    assert [error for _, error in step_errors(room, "dana")] == [None]


async def test_an_ask_to_a_teammate_whose_daily_budget_is_spent_is_refused_before_its_model_is_called(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {"dana": [openai_answer(ask("eli", "When?")), openai_answer(send("eli is out of budget"))]}
        )
        await start_fleet(
            room,
            fleet_factory,
            llm,
            NANOSLACK_A2A_ALLOW="dana>eli",
            NANOSLACK_DAILY_TOKENS_ELI="100",
            NANOSLACK_STREAM="0",
        )
        room.sql(
            "INSERT INTO agent_usage (instance, day, tokens) VALUES ('eli', ?, 150)",
            time.strftime("%Y-%m-%d", time.gmtime()),
        )
        await ask_dana(room, "ask eli", "eli is out of budget")
    assert prompts_of(llm, "eli") == []  # eli's model was never called
    ((_, error),) = step_errors(room, "dana")
    assert error == "not answered: eli's daily token budget spent: 150 of 100 tokens used today"
    assert room.sql("SELECT status FROM turns WHERE instance = 'eli'") == [("budget",)]
    row = eli_turns_row(room)
    assert row.split()[3:5] == [f"ask:{dana_turn_id(room)}:1", "budget"]


def dana_turn_id(room: Room) -> int:
    ((turn_id,),) = room.sql("SELECT id FROM turns WHERE instance = 'dana'")
    return int(turn_id)


async def test_an_ask_to_a_teammate_another_process_runs_is_refused_saying_so(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {"dana": [openai_answer(ask("eli", "When?")), openai_answer(send("eli is elsewhere"))]}
        )
        # eli is named by the allowlist but run by another process (several hosts).
        await start_fleet(
            room, fleet_factory, llm, ["dana"], NANOSLACK_A2A_ALLOW="dana>eli", NANOSLACK_STREAM="0"
        )
        await ask_dana(room, "ask eli", "eli is elsewhere")
    ((_, error),) = step_errors(room, "dana")
    assert error is not None and error.startswith("not asked: eli runs in another process (several hosts)")
    assert room.sql("SELECT count(*) FROM turns WHERE instance = 'eli'") == [(0,)]


async def test_a_halt_that_cancels_the_asking_turn_cancels_the_asked_turn_too(
    room: Room, fleet_factory: FleetFactory
) -> None:
    held = asyncio.Event()
    dana = [openai_answer(ask("eli", "When do we ship?"))]

    def model(request: Request) -> Answer:
        if "You are dana," in system_text(request):
            return dana.pop(0) if dana else openai_text()
        return dataclasses.replace(openai_answer(send("Friday.")), hold=held)  # eli thinks, held

    async with LLMServer() as llm:
        llm.openai.default = model
        await start_fleet(room, fleet_factory, llm, NANOSLACK_A2A_ALLOW="dana>eli")
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} when do we ship?")
        await room.emu.wait_for(lambda: len(prompts_of(llm, "eli")) == 1, timeout=20)
        room.sql(
            "INSERT INTO room_halts (room, halted_by, halted_at, instance) VALUES (?, 'cli', 0, NULL)",
            room.channel,
        )
        await room.emu.wait_for(
            lambda: (
                room.sql("SELECT instance, status FROM turns ORDER BY id")
                == [("dana", "halted"), ("eli", "cancelled")]
            ),
            timeout=20,
        )
        held.set()
    assert room.sql("SELECT error FROM turns WHERE instance = 'eli'") == [("the asking turn was cancelled",)]
    assert bot_posts(room, "eli") == [] and bot_posts(room, "dana") == []
