"""Routines through the emulator (docs/routines.md): the real fleet, a real store, real
gate processes and a real ``command`` agent; each due time is one ``routine_runs`` row."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from nanoslack.ops import routines as routines_cli
from tests.e2e.conftest import Room
from tests.e2e.turn_agent import TurnAgent


def write_routines(room: Room, instance: str, body: str) -> Path:
    folder = room.tmp / "teammates" / instance
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "routines.toml"
    path.write_text(body)
    return path


def gate_script(room: Room, instance: str, name: str, body: str) -> str:
    path = room.tmp / "teammates" / instance / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return f"./{name}"


def runs(room: Room, routine: str, instance: str = "dana") -> list[tuple[Any, ...]]:
    return room.sql(
        "SELECT due_at, status, reason, turn_id FROM routine_runs WHERE instance = ? AND routine = ? ORDER BY due_at",
        instance,
        routine,
    )


def top_level_posts(room: Room, bot_user: str) -> list[dict[str, Any]]:
    return [
        m
        for m in room.emu.conversation_messages(room.channel)
        if m.get("user") == bot_user and m.get("thread_ts") in (None, m["ts"])
    ]


def replies(room: Room, root: str) -> list[dict[str, Any]]:
    for m in room.emu.conversation_messages(room.channel):
        if m["ts"] == root:
            return list(m.get("replies") or [])
    return []


def cli(*argv: str, db: Path) -> str:
    out = io.StringIO()
    assert routines_cli.main([*argv, "--db", str(db)], out=out) == 0
    return out.getvalue()


def fleet_keys(room: Room, program: TurnAgent, **extra: str) -> dict[str, str]:
    return {
        "SLACK_OWNER": room.human.id,
        "NANOSLACK_TEAMMATES": str(room.tmp / "teammates"),
        **program.env(),
        **extra,
    }


async def test_a_routine_every_2s_posts_top_level_in_its_room_and_routines_shows_its_last_status(
    room: Room, fleet_factory
) -> None:
    program = TurnAgent.install(room.tmp)
    program.reply("dana", "Plan #{turn}: ship it")
    write_routines(
        room,
        "dana",
        f'[[routine]]\nname = "plan"\nevery = "2s"\nchannel = "{room.channel}"\nprompt = "Post the plan."\n',
    )
    await fleet_factory(["dana"], **fleet_keys(room, program))
    dana = room.apps["dana"].bot_user_id
    await room.emu.wait_for(lambda: len(top_level_posts(room, dana)) >= 2, timeout=20)
    prompt = program.calls("dana")[0]["stdin"]
    assert prompt.startswith('[Routine "plan"]') and "Post the plan." in prompt
    await room.emu.wait_for(lambda: any(r[1] == "done" for r in runs(room, "plan")), timeout=10)
    listing = cli(db=room.db)
    assert "plan" in listing and "every 2s" in listing and "done" in listing, listing

    # A reply to the routine's post is an ordinary engaged thread: answered without a mention.
    root = top_level_posts(room, dana)[0]["ts"]
    program.reply("dana", "answer in thread")
    await room.emu.post_as_user(room.human.id, room.channel, "what about the tests?", thread_ts=root)
    await room.emu.wait_for(lambda: any(r.get("user") == dana for r in replies(room, root)), timeout=20)
    thread_prompts = [c["stdin"] for c in program.calls("dana") if "what about the tests?" in c["stdin"]]
    assert thread_prompts and "Plan #" in thread_prompts[0]  # the thread's turn sees the routine's post
    assert json.dumps(runs(room, "plan"))  # rows are plain values
