"""send_to_agent end to end (docs/agents.md): a handoff wakes the recipient with the [agent]
cue and its answer lands in the thread the work came from; the allowlist, the chief and
the two-hop relay limit decide what may be handed on, and a refusal says why."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from nanoslack import failpoints
from nanoslack.emulator import App, Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.testing.fleet_env import scalar, sql, write_fleet_env
from nanoslack.testing.llm_server import LLMServer, Request, backend_env, openai_answer, send
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.helpers import openai_env
from tests.e2e.test_asks import by_instance, prompts_of, routine_cli, teammates
from tests.e2e.test_files_in import png


def _rules(room: Room, name: str, rules: list[dict[str, Any]]) -> dict[str, str]:
    path = room.tmp / f"{name}-rules.json"
    path.write_text(json.dumps({"rules": rules, "default": None}))
    return {f"NANOSLACK_AGENT_SCRIPT_{name.upper()}": str(path)}


def _thread(room: Room, ts: str) -> list[dict[str, Any]]:
    for top in room.emu.conversation_messages(room.channel):
        if top["ts"] == ts:
            return list(top["replies"])
    return []


def _steps(room: Room, instance: str) -> list[tuple[Any, ...]]:
    return room.sql(
        "SELECT s.name, s.error FROM turn_steps s JOIN turns t ON t.id = s.turn_id"
        " WHERE t.instance = ? ORDER BY s.turn_id, s.step",
        instance,
    )


def _settled(room: Room) -> bool:
    return room.sql(
        "SELECT (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM turns WHERE status = 'running')"
        " + (SELECT count(*) FROM outbox WHERE status IN ('queued', 'sending'))"
    ) == [(0,)]


DANA_DISPATCHES = {
    "match": "@{name}",
    "from": "human",
    "calls": [
        {"tool": "read_skill", "arguments": {"name": "handoff"}},
        {"tool": "send_to_agent", "arguments": {"to": "eli", "message": "please sketch the parser"}},
    ],
    "reply": "On it, {sender}: I asked eli for a sketch.",
}
ELI_ANSWERS = {"match": "from dana", "from": "agent", "reply": "Sketch: one module, one test."}


async def test_a_handoff_wakes_the_recipient_with_the_agent_cue_and_its_answer_lands_in_the_thread(
    room: Room, fleet_factory
) -> None:
    alice = room.human.id
    skills = room.tmp / "teammates" / "_skills"
    skills.mkdir(parents=True)
    (skills / "handoff.md").write_text("# Handoff: one ask per teammate\n")
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=alice,
        NANOSLACK_A2A_ALLOW="dana>eli",
        NANOSLACK_TEAMMATES=str(room.tmp / "teammates"),
        **_rules(room, "dana", [DANA_DISPATCHES]),
        **_rules(room, "eli", [ELI_ANSWERS]),
    )
    ask = await room.emu.post_as_user(alice, room.channel, f"{room.mention('dana')} we need a parser")
    await room.emu.wait_for(lambda: len(_thread(room, ask)) == 2 and _settled(room), timeout=15)

    texts = [m["text"] for m in _thread(room, ask)]
    assert texts == ["On it, alice: I asked eli for a sketch.", "Sketch: one module, one test."]
    assert _thread(room, ask)[1]["bot_id"] == room.apps["eli"].bot_id
    (handoff,) = room.sql("SELECT from_instance, to_instance, text, depth FROM handoffs")
    assert handoff == ("dana", "eli", "please sketch the parser", 1)
    # What eli's turn was shown: the cue, naming dana and the room.
    (cue,) = room.sql("SELECT text FROM messages WHERE instance = 'eli' AND handoff_depth = 1")
    assert cue[0].startswith("[agent] A message just arrived from dana (in ")
    assert cue[0].endswith("): please sketch the parser")
    assert [name for name, _ in _steps(room, "dana")] == ["read_skill", "send_to_agent"]
    assert [error for _, error in _steps(room, "dana")] == [None, None]


async def test_a_handoff_outside_the_allowlist_is_refused_with_the_reason_unless_the_chief_is_in_it(
    room: Room, fleet_factory
) -> None:
    alice = room.human.id
    to_dana = {
        "match": "@{name}",
        "from": "human",
        "calls": [{"tool": "send_to_agent", "arguments": {"to": "dana", "message": "review please"}}],
        "reply": None,
    }
    await fleet_factory(
        ["dana", "eli"], SLACK_OWNER=alice, NANOSLACK_A2A_ALLOW="dana>eli", **_rules(room, "eli", [to_dana])
    )
    await room.emu.post_as_user(alice, room.channel, f"{room.mention('eli')} over to you")
    await room.emu.wait_for(lambda: _steps(room, "eli") and _settled(room), timeout=15)
    ((name, error),) = _steps(room, "eli")
    assert name == "send_to_agent"
    assert error == "not sent: eli may not hand off to dana (NANOSLACK_A2A_ALLOW does not list eli>dana)"
    assert room.sql("SELECT count(*) FROM handoffs") == [(0,)]


async def test_a_handoff_to_a_name_no_teammate_has_is_refused_with_the_teammates_it_may_reach(
    room: Room, fleet_factory
) -> None:
    alice = room.human.id
    to_bob = {
        "match": "@{name}",
        "from": "human",
        "calls": [{"tool": "send_to_agent", "arguments": {"to": "bob", "message": "review please"}}],
        "reply": None,
    }
    await fleet_factory(
        ["dana", "eli", "fay"],
        SLACK_OWNER=alice,
        NANOSLACK_CHIEF="eli",  # the chief may hand off to anyone: anyone who is a teammate
        **_rules(room, "eli", [to_bob]),
    )
    ask = await room.emu.post_as_user(alice, room.channel, f"{room.mention('eli')} ask bob to review")
    await room.emu.wait_for(lambda: _steps(room, "eli") and _settled(room), timeout=15)
    ((name, error),) = _steps(room, "eli")
    assert name == "send_to_agent"
    assert error == "not sent: no teammate is named bob; the teammates you may reach: dana, fay"
    assert room.sql("SELECT count(*) FROM handoffs") == [(0,)]
    assert _thread(room, ask) == []


async def test_the_chief_may_be_handed_work_by_anyone(room: Room, fleet_factory) -> None:
    alice = room.human.id
    to_dana = {
        "match": "@{name}",
        "from": "human",
        "calls": [{"tool": "send_to_agent", "arguments": {"to": "dana", "message": "status?"}}],
        "reply": None,
    }
    await fleet_factory(
        ["dana", "eli"], SLACK_OWNER=alice, NANOSLACK_CHIEF="dana", **_rules(room, "eli", [to_dana])
    )
    await room.emu.post_as_user(alice, room.channel, f"{room.mention('eli')} check in with the chief")
    await room.emu.wait_for(lambda: room.sql("SELECT count(*) FROM handoffs") == [(1,)], timeout=15)
    assert [error for _, error in _steps(room, "eli")] == [None]


async def test_a_third_relay_hop_is_refused(room: Room, fleet_factory) -> None:
    alice = room.human.id
    relay = {
        "match": ".",
        "from": "agent",
        "calls": [{"tool": "send_to_agent", "arguments": {"to": "{next}", "message": "your turn"}}],
        "reply": None,
    }
    crew = {"crew": ["dana", "eli"], "rules": [DANA_DISPATCHES, relay], "default": None}
    for name in ("dana", "eli"):
        (room.tmp / f"{name}-crew.json").write_text(json.dumps(crew))
    await fleet_factory(
        ["dana", "eli"],
        SLACK_OWNER=alice,
        NANOSLACK_A2A_ALLOW="dana>eli,eli>dana",
        NANOSLACK_AGENT_SCRIPT_DANA=str(room.tmp / "dana-crew.json"),
        NANOSLACK_AGENT_SCRIPT_ELI=str(room.tmp / "eli-crew.json"),
    )
    await room.emu.post_as_user(alice, room.channel, f"{room.mention('dana')} start a relay")
    # dana → eli (depth 1), eli → dana (depth 2), and dana may not hand on a third time.
    await room.emu.wait_for(
        lambda: room.sql("SELECT count(*) FROM handoffs") == [(2,)] and _settled(room), timeout=15
    )
    assert room.sql("SELECT from_instance, to_instance, depth FROM handoffs ORDER BY id") == [
        ("dana", "eli", 1),
        ("eli", "dana", 2),
    ]
    errors = [error for name, error in _steps(room, "dana") if name == "send_to_agent" and error]
    assert len(errors) == 1 and errors[0].startswith("not sent: this turn answers a relay of 2 handoffs")


def _requests_of(llm: LLMServer, name: str) -> list[Request]:
    """The model requests of ``name``'s turns (told apart by the persona opening the system
    message), in order."""
    return [
        r
        for r in llm.openai.requests
        if " ".join(
            str(m.get("content", "")) for m in (r.json or {}).get("messages", []) if m.get("role") == "system"
        ).startswith(f"You are {name},")
    ]


async def _dana_and_eli_shown_a_shot(
    room: Room, fleet_factory: FleetFactory, llm: LLMServer, image: bytes
) -> dict[str, Any]:
    """dana and eli (dana may hand to eli, replies whole) run on ``llm``; the person shares
    ``image`` as shot.png asking dana what is wrong: Slack's message."""
    env = openai_env(
        room.human.id, llm, teammates(room), NANOSLACK_A2A_ALLOW="dana>eli", NANOSLACK_STREAM="0"
    )
    await fleet_factory(["dana", "eli"], **env)
    return await room.emu.share_file(
        room.human.id, room.channel, "shot.png", image, text=f"{room.mention('dana')} what is wrong?"
    )


async def test_a_handoff_passes_on_an_image_the_turn_saw_and_refuses_a_name_it_did_not_see(
    room: Room, fleet_factory: FleetFactory
) -> None:
    image = png()
    hand = ("send_to_agent", {"to": "eli", "message": "What is wrong here?", "files": ["shot.png"]})
    unseen = ("send_to_agent", {"to": "eli", "message": "And this?", "files": ["secret.png"]})
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [openai_answer(hand, unseen), openai_answer(send("eli will look at it"))],
                "eli": [openai_answer(send("The save button is cut off."))],
            }
        )
        shared = await _dana_and_eli_shown_a_shot(room, fleet_factory, llm, image)
        ts = str(shared["ts"])
        await room.emu.wait_for(lambda: len(_thread(room, ts)) == 2 and _settled(room), timeout=20)

    assert [m["text"] for m in _thread(room, ts)] == ["eli will look at it", "The save button is cut off."]
    (eli_first, *_) = _requests_of(llm, "eli")
    # eli is shown the screenshot itself, and the words the handoff came with.
    assert eli_first.images() == [("image/png", image)]
    assert "What is wrong here?" in json.dumps(eli_first.json)
    assert "[file: shot.png (" in json.dumps(eli_first.json)
    # It travelled by reference, through the store: eli's own files row for the handoff.
    ((files,),) = _passed_files(room)
    assert json.loads(str(files))[0][1:3] == ["shot.png", "image/png"]
    assert [error for name, error in _steps(room, "dana") if name == "send_to_agent"] == [
        None,
        "not sent: you were shown no file named 'secret.png'; the files you saw: shot.png",
    ]
    assert room.sql("SELECT count(*) FROM handoffs") == [(1,)]


def _passed_files(room: Room) -> list[tuple[object, ...]]:
    """The files rows of the messages handoffs gave eli."""
    return room.sql(
        "SELECT f.files FROM message_files f JOIN messages m ON (m.instance, m.channel, m.ts) ="
        " (f.instance, f.channel, f.ts) WHERE f.instance = 'eli' AND m.handoff_depth = 1"
    )


async def test_a_file_a_handoff_passed_on_leaves_with_the_deleted_message_that_shared_it(
    room: Room, fleet_factory: FleetFactory
) -> None:
    image = png()
    hand = ("send_to_agent", {"to": "eli", "message": "What is wrong here?", "files": ["shot.png"]})
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [openai_answer(hand), openai_answer(send("eli will look at it"))],
                "eli": [openai_answer(send("I see no screenshot."))],
            }
        )
        shared = await _dana_and_eli_shown_a_shot(room, fleet_factory, llm, image)
        ts, file_id = str(shared["ts"]), str(shared["files"][0]["id"])
        copy = room.db.parent / "files" / file_id
        # dana's turn is past its build once it asks the model: the next turn built is eli's,
        # held there with the passed file fetched, its turn not started.
        await room.emu.wait_for(lambda: _requests_of(llm, "dana") != [], timeout=20)
        with failpoints.paused("turn.built") as built:
            await room.emu.wait_for(built.reached.is_set, timeout=20)
            assert copy.exists() and _passed_files(room) != []
            await room.emu.delete_as_user(room.human.id, room.channel, ts)
            await room.emu.wait_for(lambda: not copy.exists() and _passed_files(room) == [], timeout=20)
            assert _requests_of(llm, "eli") == []
            built.release()
            await room.emu.wait_for(
                lambda: (
                    room.sql("SELECT status FROM turns WHERE instance = 'eli'") == [("done",)]
                    and _settled(room)
                ),
                timeout=20,
            )

    (eli_first, *_) = _requests_of(llm, "eli")
    sent = json.dumps(eli_first.json)
    assert eli_first.images() == []
    assert "What is wrong here?" in sent and "[file: shot.png (" not in sent
    assert "[file: shot.png: the file is gone (deleted, or no longer shared)]" in sent, sent
    assert not copy.exists()
    assert room.sql("SELECT count(*) FROM message_files") == [(0,)]


def _routine(room: Room, prompt: str) -> Path:
    root = teammates(room)
    (root / "dana" / "routines.toml").write_text(
        f'[[routine]]\nname = "morning"\nevery = "1d"\nchannel = "{room.channel}"\nprompt = "{prompt}"\n'
    )
    return root


def _top_level(room: Room, name: str) -> list[dict[str, Any]]:
    bot_id = room.apps[name].bot_id
    return [m for m in room.emu.conversation_messages(room.channel) if m.get("bot_id") == bot_id]


async def _run_routine(room: Room, fleet_factory: FleetFactory, env: dict[str, str], done: Any) -> None:
    await fleet_factory(["dana", "eli"], **env)
    await room.emu.wait_for(
        lambda: room.sql("SELECT count(*) FROM routines WHERE instance = 'dana'") == [(1,)]
    )
    assert "asked for now" in routine_cli("run", "dana", "morning", db=room.db)
    await room.emu.wait_for(lambda: done() and _settled(room), timeout=20)


async def test_a_routines_handoff_is_answered_once_in_the_thread_of_the_runs_post(
    room: Room, fleet_factory: FleetFactory
) -> None:
    root = _routine(room, "Report the release status and have eli add the build's.")
    hand = ("send_to_agent", {"to": "eli", "message": "Add the build status under my report."})
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {
                "dana": [openai_answer(send("Morning report: the plan is on track."), hand)],
                "eli": [openai_answer(send("Build: green."))],
            }
        )
        env = openai_env(room.human.id, llm, root, NANOSLACK_A2A_ALLOW="dana>eli")
        await _run_routine(room, fleet_factory, env, lambda: _top_level(room, "dana") and _eli_answered(room))

    (post,) = _top_level(room, "dana")
    assert post["text"] == "Morning report: the plan is on track."
    assert [m["text"] for m in _thread(room, str(post["ts"]))] == ["Build: green."]
    assert _top_level(room, "eli") == []
    assert [error for name, error in _steps(room, "dana") if name == "send_to_agent"] == [None]
    (handoff,) = room.sql("SELECT thread_key, waits_on, depth FROM handoffs")
    assert handoff == (post["ts"], None, 1)
    # eli was shown the run's post the handoff hangs under, then the handoff.
    eli_prompt = prompts_of(llm, "eli")[0]
    assert eli_prompt.index("Morning report: the plan is on track.") < eli_prompt.index(
        "[agent] A message just arrived from dana"
    )
    ((status,),) = room.sql("SELECT status FROM routine_runs WHERE routine = 'morning'")
    assert status == "done"


async def test_a_routine_that_only_hands_off_posts_that_it_did_and_the_answer_follows_under_it(
    room: Room, fleet_factory: FleetFactory
) -> None:
    root = _routine(room, "Have eli report the build status.")
    hand = ("send_to_agent", {"to": "eli", "message": "Report the build status, please."})
    async with LLMServer() as llm:
        llm.openai.default = by_instance(
            {"dana": [openai_answer(hand)], "eli": [openai_answer(send("Build: green."))]}
        )
        env = openai_env(room.human.id, llm, root, NANOSLACK_A2A_ALLOW="dana>eli")
        await _run_routine(room, fleet_factory, env, lambda: _top_level(room, "dana") and _eli_answered(room))

    (post,) = _top_level(room, "dana")
    assert post["text"] == "Handed to eli; the answer follows in this thread."
    assert [m["text"] for m in _thread(room, str(post["ts"]))] == ["Build: green."]
    # Named in plain words: eli is woken once, by the handoff.
    assert room.sql("SELECT count(*) FROM turns WHERE instance = 'eli'") == [(1,)]


async def test_a_routines_handoff_whose_post_slack_refuses_is_dropped_saying_why(
    room: Room, fleet_factory: FleetFactory
) -> None:
    root = _routine(room, "Report, and have eli add the build's status.")
    hand = ("send_to_agent", {"to": "eli", "message": "Add the build status under my report."})
    room.emu.fail_next("chat.postMessage", 1, error="is_archived", app_id=room.apps["dana"].app_id)
    failed = "SELECT count(*) FROM outbox WHERE instance = 'dana' AND status = 'failed'"
    async with LLMServer() as llm:
        llm.openai.default = by_instance({"dana": [openai_answer(send("Morning report."), hand)]})
        env = openai_env(room.human.id, llm, root, NANOSLACK_A2A_ALLOW="dana>eli")
        with capture_logs() as logs:
            await _run_routine(room, fleet_factory, env, lambda: room.sql(failed) == [(1,)])

    assert room.sql("SELECT waits_on FROM handoffs") == [(None,)]
    assert room.sql("SELECT status FROM messages WHERE instance = 'eli' AND handoff_depth = 1") == [
        ("waiting",)
    ]
    assert room.sql("SELECT count(*) FROM turns WHERE instance = 'eli'") == [(0,)]
    (dropped,) = [e for e in logs if e["event"] == "handoff not delivered"]
    assert dropped["to"] == "eli" and "(is_archived)" in dropped["reason"]


def _eli_answered(room: Room) -> bool:
    bot_id = room.apps["eli"].bot_id
    return any(
        m.get("bot_id") == bot_id
        for top in room.emu.conversation_messages(room.channel)
        for m in top["replies"]
    )


async def test_a_routines_handoff_is_answered_once_across_a_kill_before_the_runs_post_is_recorded(
    tmp_path: Path,
) -> None:
    """``nanoslack run`` SIGKILLed after Slack accepted the run's post, before the outbox
    recorded it (the handoff still waiting): the restarted fleet finds the post, delivers the
    handoff into its thread, and eli answers there once."""
    async with Emulator(ack_timeout=1.0) as emu, LLMServer() as llm:
        alice = emu.add_user("alice")
        dana, eli = emu.add_app("dana"), emu.add_app("eli")
        channel = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id]).id
        root = tmp_path / "teammates"
        for name in ("dana", "eli"):
            (root / name).mkdir(parents=True)
            (root / name / "SOUL.md").write_text(f"You are {name}, a teammate.\n")
        (root / "dana" / "routines.toml").write_text(
            f'[[routine]]\nname = "morning"\nevery = "1d"\nchannel = "{channel}"\nprompt = "Report."\n'
        )
        hand = ("send_to_agent", {"to": "eli", "message": "Add the build status."})
        llm.openai.default = by_instance(
            {
                "dana": [openai_answer(send("Morning report."), hand)],
                "eli": [openai_answer(send("Build: green."))],
            }
        )
        db = tmp_path / "data" / "nanoslack.db"
        env_file = write_fleet_env(
            tmp_path / ".env",
            emu,
            [dana, eli],
            db,
            SLACK_A2A_ROOMS=channel,
            SLACK_OWNER=alice.id,
            NANOSLACK_A2A_ALLOW="dana>eli",
            NANOSLACK_TEAMMATES=str(root),
            LOG_FORMAT="json",
            **backend_env("openai", llm, "sk-test-0123456789"),
        )

        def posts(app: App) -> list[dict[str, Any]]:
            return [
                m
                for top in emu.conversation_messages(channel)
                for m in (top, *top["replies"])
                if m.get("bot_id") == app.bot_id
            ]

        fleet = FleetProcess.start(env_file, failpoints="outbox.posted=kill@1")
        try:
            await fleet.wait_for_event("fleet started")
            await emu.wait_for(lambda: scalar(db, "SELECT count(*) FROM routines") == 1, timeout=30)
            assert "asked for now" in routine_cli("run", "dana", "morning", db=db)
            assert await fleet.wait(30) == -signal.SIGKILL, "the failpoint did not fire"
        finally:
            await fleet.kill()
        (post,) = posts(dana)
        assert post["text"] == "Morning report." and posts(eli) == []
        assert sql(db, "SELECT waits_on FROM handoffs") == [(f"turn:dana:{post_turn(db)}:0",)]

        fleet = FleetProcess.start(env_file)
        try:
            await fleet.wait_for_event("handoff delivered", to="eli")
            await emu.wait_for(lambda: posts(eli), timeout=30)
            await emu.wait_for(
                lambda: scalar(db, "SELECT count(*) FROM turns WHERE status = 'running'") == 0, timeout=10
            )
        finally:
            assert await fleet.stop() == 0
        assert fleet.events("post recovered: already posted")
        assert [m["text"] for m in posts(dana)] == ["Morning report."]
        (answer,) = posts(eli)
        assert (answer["text"], answer["thread_ts"]) == ("Build: green.", post["ts"])
        assert sql(db, "SELECT thread_key, waits_on FROM handoffs") == [(post["ts"], None)]


def post_turn(db: Path) -> int:
    return scalar(db, "SELECT id FROM turns WHERE instance = 'dana'")
