"""Room control end to end: acknowledgements, pause notices, halt and resume."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.fleetproc import FleetProcess
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.llm_server import LLMServer, Request, Script, openai_answer, openai_text, send
from tests.e2e.conftest import Recorder, Room
from tests.e2e.helpers import dm_buttons, message_text


def _outcome(rec: Recorder, instance: str, ts: str) -> Any:
    return next((o for i, m, o in rec.outcomes if i == instance and m.ts == ts), None)


def _bot_posts(room: Room, channel: str | None = None) -> list[dict[str, Any]]:
    return [m for m in room.emu.all_messages(channel or room.channel) if m.get("bot_id")]


def _turns(room: Room, instance: str, status: str | None = None) -> list[tuple[Any, ...]]:
    rows = room.sql("SELECT id, status FROM turns WHERE instance = ? ORDER BY id", instance)
    return [r for r in rows if status in (None, r[1])]


# -- no acknowledgement ping-pong ---------------------------------------------------------------


async def test_a_bots_thanks_wakes_nobody(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=room.human.id)
    thanks = await room.bot_post("eli", f"{room.mention('dana')} thanks!")
    question = await room.bot_post("eli", f"{room.mention('dana')} can you check the build?")
    await room.emu.wait_for(lambda: _outcome(rec, "dana", question) is not None)
    ack = _outcome(rec, "dana", thanks)
    assert ack.status == "processed" and not ack.route.engaged
    assert ack.reason == "acknowledgement"
    assert room.sql("SELECT status FROM messages WHERE instance='dana' AND ts=?", thanks) == [("context",)]
    assert _outcome(rec, "dana", question).route.engaged  # the same bot asking something does wake dana


async def test_an_agent_answering_acknowledged_posts_nothing(room: Room, fleet_factory) -> None:
    await fleet_factory(
        ["dana", "eli"], SLACK_OWNER=room.human.id, NANOSLACK_AGENT_COMMAND="echo Acknowledged."
    )
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} deploy is done")
    await room.emu.wait_for(lambda: _turns(room, "dana", "silent"), timeout=10)
    assert _bot_posts(room) == []
    assert room.sql("SELECT count(*) FROM outbox WHERE instance = 'dana'") == [(0,)]


# -- visible pauses ------------------------------------------------------------------------------

PAUSE_PREFIX = "⏸️ Paused after"


def _texts(room: Room, channel: str, prefix: str) -> list[dict[str, Any]]:
    return [m for m in room.emu.all_messages(channel) if str(m.get("text", "")).startswith(prefix)]


def _dropped_by_all(rec: Recorder, names: list[str], ts: str) -> bool:
    return all(any(m.ts == ts for m, _ in rec.dropped(name)) for name in names)


async def test_the_pause_notice_appears_exactly_once_per_pause_with_three_instances_in_the_room(
    room: Room, fleet_factory
) -> None:
    names = ["dana", "eli", "fay"]
    gus = room.emu.add_app("gus")  # a bot of another host: every fleet instance hears it
    members = [room.human.id, gus.bot_user_id, *(room.apps[n].bot_user_id for n in names)]
    mpim = room.emu.create_conversation(members, kind="mpim")
    _, rec = await fleet_factory(names, SLACK_A2A_ROOMS=mpim.id, SLACK_A2A_MAX_HOPS="2")
    gus_client = AsyncWebClient(token=gus.bot_token, base_url=room.emu.api_url)

    async def gus_talks(n: int) -> list[str]:
        return [
            str((await gus_client.chat_postMessage(channel=mpim.id, text=f"gus {i}"))["ts"]) for i in range(n)
        ]

    first = await gus_talks(4)  # hops 1, 2, then two drops at the limit for each instance
    await room.emu.wait_for(lambda: _dropped_by_all(rec, names, first[-1]))
    await room.emu.wait_for(lambda: len(_texts(room, mpim.id, PAUSE_PREFIX)) >= 1)
    (notice,) = _texts(room, mpim.id, PAUSE_PREFIX)
    assert notice["text"] == "⏸️ Paused after 2 bot messages — a human message resumes."
    assert notice["thread_ts"] == first[2]  # in the thread of the first message it stopped

    human = await room.emu.post_as_user(room.human.id, mpim.id, "go on")
    await room.emu.wait_for(lambda: all(any(m.ts == human for m in rec.delivered(n)) for n in names))
    second = await gus_talks(4)
    await room.emu.wait_for(lambda: _dropped_by_all(rec, names, second[-1]))
    await room.emu.wait_for(lambda: len(_texts(room, mpim.id, PAUSE_PREFIX)) >= 2)
    # Every claim was made in the transaction that dropped a message: all are in.
    assert room.sql(
        "SELECT count(*) FROM outbox WHERE purpose = 'notice' AND text LIKE '⏸️ Paused after%'"
    ) == [(2,)]
    assert len(_texts(room, mpim.id, PAUSE_PREFIX)) == 2


# -- halt and resume --------------------------------------------------------------------------------

HALT_PREFIX = "🛑 Halted by"
RESUME_PREFIX = "▶️ Resumed by"
NOTICES = (PAUSE_PREFIX, HALT_PREFIX, RESUME_PREFIX)
# Each bot hands the word to the other after a second's thought: an exchange that
# always has a turn under way.
PING_PONG = (
    'sleep 1; if [ "$NANOSLACK_INSTANCE" = dana ]; then echo "@eli your turn";'
    ' else echo "@dana your turn"; fi'
)


def _agent_posts(room: Room) -> list[dict[str, Any]]:
    return [m for m in _bot_posts(room) if not str(m.get("text", "")).startswith(NOTICES)]


def _hops(room: Room) -> list[tuple[Any, ...]]:
    return room.sql("SELECT instance, count(*) FROM a2a_hops WHERE room = ? GROUP BY instance", room.channel)


def _let_bots_talk(room: Room) -> None:
    """Each bot is a member of the other's agent group: the gate lets their mentions through."""
    for name, other in (("dana", "eli"), ("eli", "dana")):
        room.sql(
            "INSERT INTO agent_groups (instance, name, created_at) VALUES (?, ?, 0) ON CONFLICT DO NOTHING",
            name,
            name,
        )
        room.sql(
            "INSERT INTO agent_group_members (agent_group_id, user_id, role, added_at)"
            " SELECT id, ?, 'member', 0 FROM agent_groups WHERE instance = ?",
            f"slack:bot:{room.apps[other].bot_id}",
            name,
        )


def _resume_buttons(room: Room, owner: str) -> list[dict[str, Any]]:
    found = []
    for conv in room.emu.conversations():
        if conv.kind == "im" and owner in conv.members:
            for msg in room.emu.conversation_messages(conv.id):
                for block in msg.get("blocks") or []:
                    for el in block.get("elements") or []:
                        if el.get("action_id") == "nanoslack_resume":
                            found.append({"channel": conv.id, "ts": msg["ts"], "value": el["value"]})
    return found


def _reaction_seen_by(rec: Recorder, names: list[str]) -> bool:
    return all(any(m.event_type == "reaction_added" for i, m, _ in rec.outcomes if i == n) for n in names)


async def test_an_owners_stop_sign_halts_two_bots_mid_exchange_and_resume_restarts_it(
    room: Room, fleet_factory
) -> None:
    owner = room.human.id
    _, rec = await fleet_factory(
        ["dana", "eli"], SLACK_OWNER=owner, SLACK_A2A_MAX_HOPS="50", NANOSLACK_AGENT_COMMAND=PING_PONG
    )
    _let_bots_talk(room)
    kickoff = await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} start the relay")
    await room.emu.wait_for(lambda: len(_agent_posts(room)) >= 2, timeout=15)
    await room.emu.wait_for(lambda: room.sql("SELECT 1 FROM turns WHERE status = 'running'"), timeout=5)

    await room.emu.react(owner, room.channel, kickoff, "octagonal_sign")
    await room.emu.wait_for(lambda: _reaction_seen_by(rec, ["dana", "eli"]))
    await room.emu.wait_for(lambda: room.sql("SELECT 1 FROM turns WHERE status = 'halted'"), timeout=5)
    await room.emu.wait_for(lambda: not room.sql("SELECT 1 FROM turns WHERE status = 'running'"), timeout=5)
    await room.emu.wait_for(lambda: _texts(room, room.channel, HALT_PREFIX) and _resume_buttons(room, owner))
    hops_at_halt = _hops(room)
    assert hops_at_halt, "the halt reset the hop counts"
    (halt_notice,) = _texts(room, room.channel, HALT_PREFIX)
    assert room.sql("SELECT room FROM room_halts") == [(room.channel,)]
    # A bot speaking now is not let in.
    late = await room.bot_post("eli", f"{room.mention('dana')} still there?")
    await room.emu.wait_for(lambda: any(m.ts == late for m, r in rec.dropped("dana") if r == "room halted"))
    assert _hops(room) == hops_at_halt

    (button,) = _resume_buttons(room, owner)
    assert button["value"] == room.channel
    await room.emu.click_button(owner, button["channel"], button["ts"], "nanoslack_resume", button["value"])
    await room.emu.wait_for(lambda: _texts(room, room.channel, RESUME_PREFIX))
    (resume_notice,) = _texts(room, room.channel, RESUME_PREFIX)
    silent = [
        m
        for m in _agent_posts(room)
        if float(halt_notice["ts"]) < float(m["ts"]) < float(resume_notice["ts"]) and m["ts"] != late
    ]
    assert silent == []
    # The cancelled turn runs again and the relay goes on.
    await room.emu.wait_for(
        lambda: any(float(m["ts"]) > float(resume_notice["ts"]) for m in _agent_posts(room)), timeout=10
    )
    assert len(_texts(room, room.channel, HALT_PREFIX)) == 1
    assert room.sql("SELECT count(*) FROM room_halts") == [(0,)]
    # The owner's DM now says who resumed instead of offering the button again.
    await room.emu.wait_for(lambda: not _resume_buttons(room, owner))
    assert f"Resumed by <@{owner}>" in message_text(room.emu, button)


async def test_a_non_owners_stop_sign_or_stop_changes_nothing(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER="U0SOMEONEELSE")
    hop = await room.bot_post("eli", f"{room.mention('dana')} hello")
    await room.emu.react(room.human.id, room.channel, hop, "octagonal_sign")
    stop = await room.emu.post_as_user(room.human.id, room.channel, "stop")
    await room.emu.wait_for(lambda: _outcome(rec, "dana", stop) is not None)
    await room.emu.wait_for(lambda: _reaction_seen_by(rec, ["dana", "eli"]))
    assert room.sql("SELECT count(*) FROM room_halts") == [(0,)]
    assert _outcome(rec, "dana", stop).reason != "room halted"
    after = await room.bot_post("eli", f"{room.mention('dana')} still talking")
    await room.emu.wait_for(lambda: any(m.ts == after for m in rec.delivered("dana")))
    assert not _texts(room, room.channel, HALT_PREFIX)


async def test_stop_typed_by_an_owner_halts_without_resetting_hops_and_resume_resumes(
    room: Room, fleet_factory
) -> None:
    owner = room.human.id
    _, rec = await fleet_factory(["dana", "eli"], SLACK_OWNER=owner)
    hops = [await room.bot_post("eli", f"{room.mention('dana')} hop {i}") for i in range(2)]
    await room.emu.wait_for(lambda: any(m.ts == hops[-1] for m in rec.delivered("dana")))
    stop = await room.emu.post_as_user(
        owner, room.channel, f"{room.mention('dana')} {room.mention('eli')} STOP"
    )
    await room.emu.wait_for(lambda: _outcome(rec, "dana", stop) is not None and _outcome(rec, "eli", stop))
    assert _outcome(rec, "dana", stop).reason in ("room halted", "room already halted")
    assert room.sql("SELECT room, halted_by FROM room_halts") == [(room.channel, f"slack:{owner}")]
    assert ("dana", 2) in _hops(room)  # a human message would have reset them
    await room.emu.wait_for(lambda: _texts(room, room.channel, HALT_PREFIX))
    dropped = await room.bot_post("eli", f"{room.mention('dana')} hop 3?")
    await room.emu.wait_for(
        lambda: any(m.ts == dropped for m, r in rec.dropped("dana") if r == "room halted")
    )

    resume = await room.emu.post_as_user(owner, room.channel, "resume")
    await room.emu.wait_for(
        lambda: _outcome(rec, "dana", resume) is not None and _outcome(rec, "eli", resume)
    )
    assert room.sql("SELECT count(*) FROM room_halts") == [(0,)]
    again = await room.bot_post("eli", f"{room.mention('dana')} hop 3")
    await room.emu.wait_for(lambda: any(m.ts == again for m in rec.delivered("dana")))
    assert len(_texts(room, room.channel, HALT_PREFIX)) == 1


def _nanoslack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nanoslack", *args], capture_output=True, text=True, timeout=60, check=False
    )


def _inbox(room: Room, instance: str, ts: str) -> list[tuple[Any, ...]]:
    return room.sql("SELECT status, reason FROM inbox WHERE instance = ? AND ts = ?", instance, ts)


async def test_a_halt_survives_sigkill_and_restart_and_operators_see_and_resume_it(room: Room) -> None:
    emu, owner = room.emu, room.human.id
    env_file = write_fleet_env(
        room.tmp / ".env",
        emu,
        [room.apps["dana"], room.apps["eli"]],
        room.db,
        SLACK_A2A_ROOMS=room.channel,
        SLACK_OWNER=owner,
        LOG_FORMAT="json",
    )
    apps = [room.apps["dana"].app_id, room.apps["eli"].app_id]
    fleet = FleetProcess.start(env_file)
    try:
        await emu.wait_for(lambda: all(emu.connections(a) >= 1 for a in apps), timeout=30)
        said = await emu.post_as_user(owner, room.channel, "about to stop you")
        await emu.react(owner, room.channel, said, "octagonal_sign")
        await emu.wait_for(lambda: room.sql("SELECT room FROM room_halts"), timeout=10)
    finally:
        await fleet.kill()

    fleet = FleetProcess.start(env_file)
    try:
        await emu.wait_for(lambda: all(emu.connections(a) >= 1 for a in apps), timeout=30)
        late = await room.bot_post("eli", f"{room.mention('dana')} are we still halted?")
        await emu.wait_for(lambda: _inbox(room, "dana", late) == [("dropped", "room halted")], timeout=10)

        listed = await asyncio.to_thread(_nanoslack, "rooms", "--db", str(room.db))
        assert listed.returncode == 0 and room.channel in listed.stdout and "HALTED ROOM" in listed.stdout
        resumed = await asyncio.to_thread(_nanoslack, "resume", room.channel, "--db", str(room.db))
        assert resumed.returncode == 0 and f"{room.channel}: resumed" in resumed.stdout
        again = await room.bot_post("eli", f"{room.mention('dana')} and now?")
        await emu.wait_for(lambda: [s for s, _ in _inbox(room, "dana", again)] == ["done"], timeout=10)
        halted = await asyncio.to_thread(_nanoslack, "halt", room.channel, "--db", str(room.db))
        assert halted.returncode == 0 and f"{room.channel}: halted" in halted.stdout
        stopped = await room.bot_post("eli", f"{room.mention('dana')} one more?")
        await emu.wait_for(lambda: _inbox(room, "dana", stopped) == [("dropped", "room halted")], timeout=10)
    finally:
        await fleet.stop()


# -- only real humans reset hops -------------------------------------------------------------------


def _envelope(room: Room, **event: Any) -> dict[str, Any]:
    team = room.emu.engine.ws.team_id
    base = {"type": "message", "channel": room.channel, "channel_type": "mpim", "team": team}
    return {
        "type": "event_callback",
        "team_id": team,
        "event_id": f"Ev{event['ts'].replace('.', '')}",
        "event": {**base, **event},
        "authorizations": [{"team_id": team, "user_id": room.apps["dana"].bot_user_id, "is_bot": True}],
    }


async def test_joins_topics_user_token_bot_posts_and_other_teams_never_reset_hops(
    room: Room, fleet_factory
) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_A2A_MAX_HOPS="2")
    dana = room.apps["dana"]
    hops = [await room.bot_post("eli", f"{room.mention('dana')} hop {i}") for i in range(2)]
    await room.emu.wait_for(lambda: any(m.ts == hops[-1] for m in rec.delivered("dana")))
    acked = room.emu.stats(dana.app_id).acked
    human = room.human.id
    not_humans = [
        {"subtype": "channel_join", "user": human, "text": "<@U> has joined", "ts": "1900000001.000100"},
        {
            "subtype": "channel_topic",
            "user": human,
            "text": "set the topic",
            "topic": "x",
            "ts": "1900000002.000100",
        },
        # A bot posting through a user token: Slack names the human and the bot.
        {"user": human, "bot_id": "B0USERTOKEN", "text": "via a user token", "ts": "1900000003.000100"},
        # A Slack Connect guest from another team.
        {
            "user": "U0GUEST",
            "user_team": "T0OTHERTEAM",
            "team": "T0OTHERTEAM",
            "text": "hi",
            "ts": "1900000004.000100",
        },
    ]
    for event in not_humans:
        await room.emu.inject_envelope(dana.app_id, _envelope(room, **event))
    await room.emu.wait_for(lambda: room.emu.stats(dana.app_id).acked >= acked + len(not_humans))
    await room.emu.wait_for(lambda: _outcome(rec, "dana", "1900000004.000100") is not None)
    assert room.sql("SELECT count(*) FROM a2a_hops WHERE instance = 'dana'") == [(2,)]
    third = await room.bot_post("eli", f"{room.mention('dana')} hop 3")
    await room.emu.wait_for(
        lambda: any(m.ts == third for m, r in rec.dropped("dana") if r == "hop limit reached")
    )
    # The control: one of our people speaking does re-arm the room.
    await room.emu.post_as_user(human, room.channel, "go on")
    fourth = await room.bot_post("eli", f"{room.mention('dana')} hop 4")
    await room.emu.wait_for(lambda: any(m.ts == fourth for m in rec.delivered("dana")))


async def test_bot_replies_inside_a_thread_count_toward_the_rooms_cap(room: Room, fleet_factory) -> None:
    _, rec = await fleet_factory(["dana", "eli"], SLACK_A2A_MAX_HOPS="2")
    top = await room.bot_post("eli", f"{room.mention('dana')} top level")
    replies = [
        await room.bot_post("eli", f"{room.mention('dana')} in the thread {i}", thread_ts=top)
        for i in range(2)
    ]
    await room.emu.wait_for(lambda: any(m.ts == replies[-1] for m, _ in rec.dropped("dana")))
    assert [m.ts for m in rec.delivered("dana")] == [top, replies[0]]
    assert next(r for m, r in rec.dropped("dana") if m.ts == replies[-1]) == "hop limit reached"


# -- approvals go to every owner ------------------------------------------------------------------


async def test_two_owners_both_get_the_approval_dm_and_the_second_sees_the_first_ones_decision(
    room: Room, fleet_factory
) -> None:
    alice, bob = room.human.id, room.emu.add_user("bob").id
    await fleet_factory(["dana", "eli"], SLACK_OWNER=f"{alice},{bob}")
    held = await room.bot_post("eli", f"{room.mention('dana')} may I join?")
    await room.emu.wait_for(
        lambda: (
            dm_buttons(room.emu, alice, "nanoslack_approve")
            and dm_buttons(room.emu, bob, "nanoslack_approve")
        )
    )
    (alices,) = dm_buttons(room.emu, alice, "nanoslack_approve")
    (bobs,) = dm_buttons(room.emu, bob, "nanoslack_approve")
    assert alices["value"] == bobs["value"]

    await room.emu.click_button(alice, alices["channel"], alices["ts"], "nanoslack_approve", alices["value"])
    await room.emu.wait_for(lambda: f"Allowed by <@{alice}>" in message_text(room.emu, bobs))
    await room.emu.wait_for(lambda: f"Allowed by <@{alice}>" in message_text(room.emu, alices))
    assert not dm_buttons(room.emu, bob, "nanoslack_approve")  # nothing left to click
    status = room.sql("SELECT status FROM messages WHERE instance = 'dana' AND ts = ?", held)
    assert status in ([("pending",)], [("done",)])
    assert room.sql("SELECT status, decided_by FROM pending_sender_approvals") == [("approved", alice)]


# -- budgets that pause and ask -------------------------------------------------------------------


# Token budgets need a back end that counts tokens: an OpenAI-compatible server, the
# small one of nanoslack.testing.llm_server on 127.0.0.1 (the one remote service tests may stand
# in for). Slack traffic is the emulator's, untouched. Dollar budgets need a model the price
# table knows: the server answers as gpt-4o.
def _llm_env(llm: LLMServer, model: str = "gpt-test") -> dict[str, str]:
    return {
        "NANOSLACK_AGENT": "openai",
        "NANOSLACK_MODEL": model,
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "sk-test-0123456789",
    }


@dataclass(frozen=True)
class Cap:
    """A budget in one unit: the keys that cap a room and an instance, and the model."""

    room_key: str
    daily_key: str
    value: str
    model: str
    budget: str  # how the texts name it

    def env(self, llm: LLMServer, key: str) -> dict[str, str]:
        return {key: self.value, **_llm_env(llm, self.model)}


# A turn of _llm_answer("on it", 42) spends 42 tokens; on gpt-4o $0.000135 (its first call
# $0.0000275): either cap is spent by the first turn as a whole, never by its first call.
CAPS = [
    pytest.param(
        Cap("NANOSLACK_ROOM_TOKENS", "NANOSLACK_DAILY_TOKENS", "10", "gpt-test", "token budget"), id="tokens"
    ),
    pytest.param(
        Cap("NANOSLACK_ROOM_USD", "NANOSLACK_DAILY_USD", "0.0001", "gpt-4o", "dollar budget"), id="usd"
    ),
]


def _llm_answer(text: str, tokens: int) -> Script:
    """A model that answers every turn by posting ``text`` once, then stops: the turn's
    two calls spend ``tokens`` together. The first spends only a few, so a small cap is
    spent by the turn as a whole (each call checks the budget before it is made)."""

    def answer(request: Request) -> Any:
        if request.tool_results():  # its post went out: nothing more to say
            return openai_text(tokens=(tokens - 7, 2))
        return openai_answer(send(text), tokens=(3, 2))

    return answer


@pytest.mark.parametrize("cap", CAPS)
async def test_a_spent_room_budget_pauses_the_room_and_asks_and_allow_lets_one_more_turn_through(
    room: Room, fleet_factory, cap: Cap
) -> None:
    owner = room.human.id
    paused = f"⏸️ Paused: this room's {cap.budget}"
    async with LLMServer() as llm:
        llm.openai.default = _llm_answer("on it", 42)
        await fleet_factory(["dana", "eli"], SLACK_OWNER=owner, **cap.env(llm, cap.room_key))

        def answers() -> list[dict[str, Any]]:
            return [m for m in _bot_posts(room) if m.get("text") == "on it"]

        await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} first job")
        await room.emu.wait_for(lambda: len(answers()) == 1, timeout=10)
        second = await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} second job")
        await room.emu.wait_for(lambda: dm_buttons(room.emu, owner, "nanoslack_budget_allow"), timeout=10)
        await room.emu.wait_for(lambda: _texts(room, room.channel, paused))
        assert room.sql("SELECT status FROM messages WHERE instance = 'dana' AND ts = ?", second) == [
            ("pending",)
        ]
        assert len(answers()) == 1

        (allow,) = dm_buttons(room.emu, owner, "nanoslack_budget_allow")
        await room.emu.click_button(
            owner, allow["channel"], allow["ts"], "nanoslack_budget_allow", allow["value"]
        )
        await room.emu.wait_for(lambda: len(answers()) == 2, timeout=10)
        await room.emu.wait_for(lambda: f"Allowed 1× more by <@{owner}>" in message_text(room.emu, allow))
        # One more turn spent the raised cap: the third job waits for a new answer.
        third = await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} third job")
        await room.emu.wait_for(
            lambda: len(dm_buttons(room.emu, owner, "nanoslack_budget_allow")) == 1, timeout=10
        )
        await room.emu.wait_for(lambda: len(_texts(room, room.channel, paused)) == 2)
        assert room.sql("SELECT status FROM messages WHERE instance = 'dana' AND ts = ?", third) == [
            ("pending",)
        ]
        assert len(answers()) == 2


@pytest.mark.parametrize("cap", CAPS)
async def test_a_spent_instance_budget_asks_the_owners_and_allow_gives_it_one_more_budget(
    room: Room, fleet_factory, cap: Cap
) -> None:
    owner = room.human.id
    async with LLMServer() as llm:
        llm.openai.default = _llm_answer("on it", 42)
        await fleet_factory(["dana", "eli"], SLACK_OWNER=owner, **cap.env(llm, cap.daily_key))

        def answers() -> list[dict[str, Any]]:
            return [m for m in _bot_posts(room) if m.get("text") == "on it"]

        await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} first job")
        await room.emu.wait_for(lambda: len(answers()) == 1, timeout=10)
        await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} second job")
        await room.emu.wait_for(lambda: dm_buttons(room.emu, owner, "nanoslack_budget_allow"), timeout=10)
        assert room.sql("SELECT status FROM turns WHERE instance = 'dana' ORDER BY id") == [
            ("done",),
            ("budget",),
        ]

        (allow,) = dm_buttons(room.emu, owner, "nanoslack_budget_allow")
        assert f"*dana* spent its daily {cap.budget} ({cap.daily_key})" in message_text(room.emu, allow)
        await room.emu.click_button(
            owner, allow["channel"], allow["ts"], "nanoslack_budget_allow", allow["value"]
        )
        await room.emu.wait_for(lambda: f"Allowed 1× more by <@{owner}>" in message_text(room.emu, allow))
        await room.emu.post_as_user(owner, room.channel, f"{room.mention('dana')} third job")
        await room.emu.wait_for(lambda: len(answers()) == 2, timeout=10)
