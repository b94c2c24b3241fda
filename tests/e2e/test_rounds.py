"""``round`` rooms end to end (docs/team-rooms.md): a question to the room is answered by every bot
at once, then the chief closes with a dispatch; one round at a time; naming bots asks only
them; an owner's 🛑 ends a round; a SIGKILL does not make a round close twice."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.rounds import SETTLE_S
from nanoslack.store import Store, sqlite_url
from nanoslack.testing.fleet_env import write_fleet_env
from tests.e2e.conftest import Room

AGENT = r"""
import json, os, sys, time
from pathlib import Path

here = Path(__file__).resolve().parent
me = os.environ["NANOSLACK_INSTANCE"]
prompt = sys.stdin.read()
fd = os.open(here / "calls.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (json.dumps({"instance": me, "stdin": prompt, "at": time.time()}) + "\n").encode())
os.close(fd)
deadline = time.monotonic() + 30
while (here / (me + ".hold")).exists() and time.monotonic() < deadline:
    time.sleep(0.02)
if "[round] Everyone has answered" in prompt:
    print("✓ Parser → @eli · Friday\nOne thing needs you today: pick the parser's name.")
else:
    time.sleep(0.8)
    print(f"{me} takes care of {me}'s part.")
"""

CREW = ("dana", "eli", "fay")


class Crew:
    """The command agent every bot of the round room runs, and what it was asked."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "round_agent.py").write_text(AGENT)

    @property
    def command(self) -> str:
        return f"{shlex.quote(sys.executable)} {shlex.quote(str(self.folder / 'round_agent.py'))}"

    def hold(self, *names: str) -> None:
        for name in names:
            (self.folder / f"{name}.hold").touch()

    def release(self, *names: str) -> None:
        for name in names:
            (self.folder / f"{name}.hold").unlink(missing_ok=True)

    def calls(self, instance: str | None = None) -> list[dict[str, Any]]:
        log = self.folder / "calls.jsonl"
        if not log.exists():
            return []
        calls = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return [c for c in calls if instance in (None, c["instance"])]


def _round_room(room: Room, kind: str = "round") -> str:
    """alice and all three bots in a room of its own, listed, of ``kind``."""
    members = [room.human.id, *(room.apps[n].bot_user_id for n in CREW)]
    channel = room.emu.create_conversation(members, kind="mpim").id
    with Store.open(sqlite_url(str(room.db))) as store:
        store.room_kinds.set(
            channel,
            kind=kind,
            mission="Ship the parser",
            members=CREW,
            member_users=tuple(room.apps[n].bot_user_id for n in CREW),
        )
    return channel


def _thread(room: Room, channel: str, ts: str) -> list[dict[str, Any]]:
    for top in room.emu.conversation_messages(channel):
        if top["ts"] == ts:
            return list(top["replies"])
    return []


def _who(room: Room, msg: dict[str, Any]) -> str:
    return next(n for n, a in room.apps.items() if a.bot_id == msg.get("bot_id"))


def _rounds(room: Room) -> list[tuple[Any, ...]]:
    return room.sql("SELECT question_ts, status, chief, closed_at FROM rounds ORDER BY id")


def _idle(room: Room) -> bool:
    return room.sql(
        "SELECT (SELECT count(*) FROM messages WHERE status = 'pending')"
        " + (SELECT count(*) FROM turns WHERE status = 'running')"
        " + (SELECT count(*) FROM outbox WHERE status IN ('queued', 'sending'))"
        " + (SELECT count(*) FROM rounds WHERE status IN ('waiting', 'open', 'closing'))"
    ) == [(0,)]


async def _crew_fleet(room: Room, fleet_factory: Any, crew: Crew, channel: str, **extra: str) -> Any:
    return await fleet_factory(
        list(CREW),
        SLACK_OWNER=room.human.id,
        SLACK_A2A_ROOMS=channel,
        NANOSLACK_AGENT="command",
        NANOSLACK_AGENT_COMMAND=crew.command,
        **extra,
    )


async def test_a_question_to_a_round_room_is_answered_by_every_bot_at_once_and_the_chief_closes_last(
    room: Room, fleet_factory: Any
) -> None:
    channel = _round_room(room)
    crew = Crew(room.tmp)
    await _crew_fleet(room, fleet_factory, crew, channel, NANOSLACK_CHIEF="dana")
    ask = await room.emu.post_as_user(room.human.id, channel, "how do we ship the parser?")
    await room.emu.wait_for(lambda: _idle(room) and len(_thread(room, channel, ask)) == 4, timeout=30)

    posts = _thread(room, channel, ask)
    assert sorted(_who(room, p) for p in posts[:3]) == ["dana", "eli", "fay"]
    eli = room.apps["eli"].bot_user_id
    assert _who(room, posts[-1]) == "dana" and posts[-1]["text"].startswith(f"✓ Parser → <@{eli}> · Friday")
    # Their turns ran at the same time, each told the others answer too.
    spans = room.sql("SELECT started_at, finished_at FROM turns ORDER BY id LIMIT 3")
    assert max(s for s, _ in spans) < min(f for _, f in spans)
    members = crew.calls()[:3]
    assert all("Everyone in this room answers this question at once" in c["stdin"] for c in members)
    assert all(c["stdin"].splitlines()[1] == "Mission: Ship the parser" for c in members)
    # The chief's close sees every answer.
    (brief,) = [c for c in crew.calls("dana") if "[round]" in c["stdin"]]
    for name in CREW:
        assert f"- {name}: {name} takes care of {name}'s part." in brief["stdin"]
    assert [r[1:3] for r in _rounds(room)] == [("closed", "dana")]


async def test_a_member_slower_than_the_settle_time_is_waited_for_and_its_answer_is_in_the_brief(
    room: Room, fleet_factory: Any
) -> None:
    channel = _round_room(room)
    crew = Crew(room.tmp)
    crew.hold("fay")
    await _crew_fleet(room, fleet_factory, crew, channel, NANOSLACK_CHIEF="dana")
    ask = await room.emu.post_as_user(room.human.id, channel, "how do we ship the parser?")
    await room.emu.wait_for(
        lambda: sorted(_who(room, p) for p in _thread(room, channel, ask)) == ["dana", "eli"], timeout=30
    )
    # Two polls past the settle time with fay still answering: a round closed by the
    # first members to finish would have briefed the chief by now.
    [(created,)] = room.sql("SELECT created_at FROM rounds")
    await room.emu.wait_for(lambda: time.time() > created + SETTLE_S + 2, timeout=10)
    assert not [c for c in crew.calls("dana") if "[round]" in c["stdin"]]
    crew.release("fay")
    await room.emu.wait_for(lambda: _idle(room) and len(_thread(room, channel, ask)) == 4, timeout=30)
    posts = _thread(room, channel, ask)
    assert _who(room, posts[-1]) == "dana" and posts[-1]["text"].startswith("✓ Parser")
    (brief,) = [c for c in crew.calls("dana") if "[round]" in c["stdin"]]
    for name in CREW:
        assert f"- {name}: {name} takes care of {name}'s part." in brief["stdin"]


async def test_a_members_answer_that_reaches_slack_after_the_settle_time_is_in_the_brief(
    room: Room, fleet_factory: Any
) -> None:
    """fay's turn is over in time but Slack makes its post wait (rate limited): the
    round closes once the answer is in Slack, so the brief has it."""
    channel = _round_room(room)
    crew = Crew(room.tmp)
    await _crew_fleet(room, fleet_factory, crew, channel, NANOSLACK_CHIEF="dana")
    room.emu.fail_next(
        "chat.postMessage", error="ratelimited", retry_after=int(SETTLE_S) + 3, app_id=room.apps["fay"].app_id
    )
    ask = await room.emu.post_as_user(room.human.id, channel, "how do we ship the parser?")
    await room.emu.wait_for(lambda: _idle(room) and len(_thread(room, channel, ask)) == 4, timeout=40)
    posts = _thread(room, channel, ask)
    assert sorted(_who(room, p) for p in posts[:3]) == ["dana", "eli", "fay"]
    assert _who(room, posts[-1]) == "dana" and posts[-1]["text"].startswith("✓ Parser")
    (brief,) = [c for c in crew.calls("dana") if "[round]" in c["stdin"]]
    assert "- fay: fay takes care of fay's part." in brief["stdin"]


async def test_a_round_past_the_hop_limit_ends_on_the_dispatch_with_no_pause_notice(
    room: Room, fleet_factory: Any
) -> None:
    channel = _round_room(room)
    crew = Crew(room.tmp)
    await _crew_fleet(
        room, fleet_factory, crew, channel,
        NANOSLACK_CHIEF="dana", SLACK_A2A_MAX_HOPS="3", SLACK_A2A_HOP_SCOPE="room",
    )  # fmt: skip
    ask = await room.emu.post_as_user(room.human.id, channel, "how do we ship the parser?")
    await room.emu.wait_for(lambda: _idle(room) and len(_thread(room, channel, ask)) == 4, timeout=30)
    dispatch = _thread(room, channel, ask)[-1]
    assert dispatch["text"].startswith("✓ Parser")

    # Three answers and the dispatch are four bot messages, one past the limit: the guard
    # still counts them and drops the dispatch for eli and fay...
    def dropped() -> list[tuple[Any, ...]]:
        return room.sql(
            "SELECT instance, reason FROM inbox WHERE ts = ? AND status = 'dropped' ORDER BY instance",
            dispatch["ts"],
        )

    await room.emu.wait_for(lambda: len(dropped()) == 2 and _idle(room), timeout=10)
    assert dropped() == [("eli", "hop limit reached"), ("fay", "hop limit reached")]
    # ...but no bot answers a bot in a round room, so nothing was paused: no notice.
    assert _thread(room, channel, ask)[-1]["ts"] == dispatch["ts"]
    assert not [m for m in room.emu.all_messages(channel) if "Paused after" in m["text"]]


async def test_a_second_question_during_a_round_starts_only_after_the_close(
    room: Room, fleet_factory: Any
) -> None:
    channel = _round_room(room)
    crew = Crew(room.tmp)
    crew.hold("eli")
    await _crew_fleet(room, fleet_factory, crew, channel, NANOSLACK_CHIEF="dana")
    first = await room.emu.post_as_user(room.human.id, channel, "first question")
    await room.emu.wait_for(lambda: crew.calls("eli"), timeout=15)
    second = await room.emu.post_as_user(room.human.id, channel, "second question")
    await room.emu.wait_for(lambda: [r[1] for r in _rounds(room)] == ["open", "waiting"], timeout=10)
    crew.release("eli")
    await room.emu.wait_for(lambda: _idle(room) and len(_thread(room, channel, second)) == 4, timeout=40)

    (_, _, _, first_closed), (_, status, _, _) = _rounds(room)
    assert status == "closed"
    asked_second = [
        c["at"] for c in crew.calls() if "second question" in c["stdin"] and "[round]" not in c["stdin"]
    ]
    assert len(asked_second) == 3 and min(asked_second) > first_closed
    assert len(_thread(room, channel, first)) == 4  # the first round's answers and dispatch, untouched


async def test_naming_eli_in_a_round_room_wakes_only_eli_and_nobody_closes(
    room: Room, fleet_factory: Any
) -> None:
    channel = _round_room(room)
    crew = Crew(room.tmp)
    await _crew_fleet(room, fleet_factory, crew, channel, NANOSLACK_CHIEF="dana")
    ask = await room.emu.post_as_user(room.human.id, channel, f"<@{room.apps['eli'].bot_user_id}> just you")
    await room.emu.wait_for(lambda: _idle(room) and _thread(room, channel, ask), timeout=20)
    assert [_who(room, p) for p in _thread(room, channel, ask)] == ["eli"]
    (call,) = crew.calls()
    assert (
        call["instance"] == "eli" and "alice addressed this to you directly: answer in full." in call["stdin"]
    )
    assert [r[1:3] for r in _rounds(room)] == [("closed", None)]


async def test_an_owners_stop_sign_during_a_round_leaves_no_later_post_and_no_close(
    room: Room, fleet_factory: Any
) -> None:
    channel = _round_room(room)
    crew = Crew(room.tmp)
    crew.hold(*CREW)
    await _crew_fleet(room, fleet_factory, crew, channel, NANOSLACK_CHIEF="dana")
    ask = await room.emu.post_as_user(room.human.id, channel, "what now?")
    await room.emu.wait_for(lambda: len(crew.calls()) == 3, timeout=15)
    await room.emu.react(room.human.id, channel, ask, "octagonal_sign")
    await room.emu.wait_for(lambda: [r[1] for r in _rounds(room)] == ["stopped"], timeout=10)
    await room.emu.wait_for(lambda: room.sql("SELECT count(*) FROM turns WHERE status = 'halted'") == [(3,)])
    crew.release(*CREW)
    room.sql("DELETE FROM room_halts")  # the operator resumes (no notice needed here)
    later = await room.emu.post_as_user(room.human.id, channel, "fresh start")
    await room.emu.wait_for(lambda: _idle(room) and len(_thread(room, channel, later)) == 4, timeout=30)

    assert [p for p in _thread(room, channel, ask) if p.get("bot_id")] == []  # nothing of the stopped round
    assert [r[1] for r in _rounds(room)] == ["stopped", "closed"]
    assert (
        len([c for c in crew.calls("dana") if "[round]" in c["stdin"]]) == 1
    )  # the fresh round's close only


async def test_a_round_room_without_a_chief_says_so_at_start_and_closes_without_a_dispatch(
    room: Room, fleet_factory: Any
) -> None:
    channel = _round_room(room)
    crew = Crew(room.tmp)
    with pytest.MonkeyPatch.context():
        from structlog.testing import capture_logs

        with capture_logs() as logs:
            await _crew_fleet(room, fleet_factory, crew, channel)
    assert any(e["event"] == "round room without a chief" and e["room"] == channel for e in logs)
    ask = await room.emu.post_as_user(room.human.id, channel, "anyone?")
    await room.emu.wait_for(lambda: _idle(room) and len(_thread(room, channel, ask)) == 3, timeout=30)
    assert [r[1:3] for r in _rounds(room)] == [("closed", None)]


async def test_a_sigkill_during_an_open_round_still_closes_it_once(emu: Emulator, tmp_path: Path) -> None:
    alice = emu.add_user("alice")
    apps = {n: emu.add_app(n) for n in CREW}
    channel = emu.create_conversation([alice.id, *(a.bot_user_id for a in apps.values())], kind="mpim").id
    db = tmp_path / "data" / "nanoslack.db"
    crew = Crew(tmp_path)
    env = write_fleet_env(
        tmp_path / ".env",
        emu,
        list(apps.values()),
        db,
        SLACK_A2A_ROOMS=channel,
        SLACK_OWNER=alice.id,
        NANOSLACK_CHIEF="dana",
        NANOSLACK_AGENT="command",
        NANOSLACK_AGENT_COMMAND=crew.command,
        LOG_FORMAT="json",
    )
    db.parent.mkdir(parents=True, exist_ok=True)
    with Store.open(sqlite_url(str(db))) as store:
        store.room_kinds.set(
            channel, kind="round", members=CREW, member_users=tuple(a.bot_user_id for a in apps.values())
        )
    crew.hold("fay")
    fleet = FleetProcess.start(env)
    await fleet.wait_for_event("fleet started")
    ask = await emu.post_as_user(alice.id, channel, "plan?")
    await emu.wait_for(lambda: len(crew.calls()) == 3, timeout=20)  # fay is still answering
    await fleet.kill()
    crew.release("fay")
    fleet = FleetProcess.start(env)
    try:

        def posts() -> list[dict[str, Any]]:
            for top in emu.conversation_messages(channel):
                if top["ts"] == ask:
                    return [r for r in top["replies"] if r.get("bot_id")]
            return []

        await emu.wait_for(lambda: len(posts()) == 4, timeout=40)
        await fleet.wait_for_event("round closed")
    finally:
        assert await fleet.stop() == 0
    assert [p["text"].startswith("✓ Parser → ") for p in posts()].count(True) == 1
    with Store.open(sqlite_url(str(db))) as store:
        (only,) = store.rounds.under_way() or [None]  # type: ignore[misc]
    assert only is None
    assert len([c for c in crew.calls("dana") if "[round]" in c["stdin"]]) == 1
