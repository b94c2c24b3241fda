"""Edits and deletes (docs/agents.md, "Edits and deletes"), end to end against the emulator
with the fleet's real Slack clients and the local model server: a turn shows a message's
newest words, a message deleted before its turn is not answered and its words leave the
store, an edit after the answer is news for the thread's next turn and wakes a turn only
when it newly names the instance; a bot's edits and deletes wake nobody and cost no hop.

A turn that has not run yet is made so by a held model: the thread's first turn waits on
it, and the thread's next message waits for that turn (one turn at a time per thread)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from nanoslack import failpoints
from nanoslack.testing.llm_server import LLMServer
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.dana_alone import (
    dana_answering,
    first_requests,
    push_answers,
    start_dana,
    statuses,
    turns_done,
)


def _prompts(llm: LLMServer) -> list[str]:
    """Each turn's user prompt (its first request's last message), as text."""
    return [str(r.json["messages"][-1]["content"]) for r in first_requests(llm)]


def _requests(llm: LLMServer, since: int = 0) -> str:
    """Every request the model server was sent (from the ``since``-th on), as one text."""
    return "\n".join(r.body.decode() for r in llm.openai.requests[since:])


def _files_of(room: Room, ts: str) -> list[tuple[object, ...]]:
    return room.sql("SELECT files FROM message_files WHERE instance = 'dana' AND ts = ?", ts)


def _copy(room: Room, file_id: str) -> Path:
    """Where the fleet keeps its download of a file (docs/agents.md "Files")."""
    return room.db.parent / "files" / file_id


async def _share(room: Room, text: str, content: str, thread_ts: str | None = None) -> tuple[str, str]:
    """A person shares ``secret.txt``; the message's ts and the file's id."""
    message = await room.emu.share_file(
        room.human.id, room.channel, "secret.txt", content, text=text, thread_ts=thread_ts
    )
    return str(message["ts"]), str(message["files"][0]["id"])


def _row(room: Room, ts: str) -> list[tuple[object, ...]]:
    return room.sql("SELECT text, status FROM messages WHERE instance = 'dana' AND ts = ?", ts)


def _settled(room: Room) -> bool:
    """Every envelope dana recorded is processed and no message waits for a turn."""
    received = room.sql("SELECT count(*) FROM inbox WHERE status = 'received'")
    pending = room.sql("SELECT count(*) FROM messages WHERE status = 'pending'")
    return received == [(0,)] and pending == [(0,)] and "running" not in statuses(room)


async def _say(room: Room, text: str, thread_ts: str | None = None) -> str:
    """The room's person posts ``text``; its ts."""
    return await room.emu.post_as_user(room.human.id, room.channel, text, thread_ts=thread_ts)


async def _edit(room: Room, ts: str, text: str) -> None:
    """The person edits their message to ``text``."""
    await room.emu.edit_as_user(room.human.id, room.channel, ts, text)


async def _edit_before_its_turn(room: Room, ts: str, text: str) -> None:
    """The person edits their message to ``text``; the store holds the new words, unanswered."""
    await _edit(room, ts, text)
    await room.emu.wait_for(lambda: _row(room, ts) == [(text, "pending")], timeout=20)


async def _delete(room: Room, ts: str) -> None:
    """The person deletes their message; the store has marked it deleted, its words gone."""
    await room.emu.delete_as_user(room.human.id, room.channel, ts)
    await room.emu.wait_for(lambda: _row(room, ts) == [("", "deleted")], timeout=20)


async def _launch_plan(room: Room) -> str:
    """A thread's root that names nobody, in the store; its ts."""
    root = await _say(room, "the launch plan")
    await room.emu.wait_for(lambda: _row(room, root) != [], timeout=20)
    return root


async def _next_prompt(room: Room, llm: LLMServer, text: str, root: str, turns: int) -> str:
    """The person asks ``text`` in the thread, which makes dana's turns ``turns``; what that
    turn was shown."""
    await _say(room, text, thread_ts=root)
    await turns_done(room, turns)
    return _prompts(llm)[turns - 1]


async def _first_turn_held(room: Room, llm: LLMServer, hold: asyncio.Event) -> str:
    """The thread's first turn asked the model, which holds it; the thread's root ts."""
    root = await _say(room, f"{room.mention('dana')} hello")
    await room.emu.wait_for(lambda: len(llm.openai.requests) == 1, timeout=20)
    return root


async def _pending_behind_held_turn(
    room: Room, llm: LLMServer, hold: asyncio.Event, text: str
) -> tuple[str, str]:
    """The thread's first turn held at the model, and ``text`` said in its thread and recorded
    pending behind it: (the thread's root ts, the message's ts)."""
    root = await _first_turn_held(room, llm, hold)
    ts = await _say(room, text, thread_ts=root)
    await room.emu.wait_for(lambda: _row(room, ts) == [(text, "pending")], timeout=20)
    return root, ts


def _still_held(room: Room, llm: LLMServer) -> None:
    """The thread's first turn still waits on the model: no later turn of the thread has been
    built yet (one turn at a time per thread), so what happened meanwhile came before it."""
    assert statuses(room) == ["running"] and len(llm.openai.requests) == 1, statuses(room)


async def test_an_edit_before_the_turn_is_what_the_turn_shows(
    room: Room, fleet_factory: FleetFactory
) -> None:
    hold = asyncio.Event()
    async with dana_answering(room, fleet_factory, turns=3, hold=hold) as llm:
        dana = room.mention("dana")
        root, ask = await _pending_behind_held_turn(room, llm, hold, f"{dana} what is 2+2?")
        await _edit_before_its_turn(room, ask, f"{dana} what is 3+3?")
        # Recorded pending, then edited, and only then can its turn be built.
        _still_held(room, llm)
        hold.set()
        await turns_done(room, 2)
        prompt = _prompts(llm)[1]
        # Its answer read the new words: the edit is no news for the thread's next turn.
        later = await _next_prompt(room, llm, f"{dana} and 4+4?", root, turns=3)
    assert "what is 3+3?" in prompt and "2+2" not in prompt, prompt
    assert "[edited]" not in prompt and "[edited]" not in later, later


async def test_a_message_deleted_before_its_turn_is_not_answered_and_its_words_leave_the_store(
    room: Room, fleet_factory: FleetFactory
) -> None:
    hold = asyncio.Event()
    async with dana_answering(room, fleet_factory, turns=2, hold=hold) as llm:
        dana = room.mention("dana")
        root, secret = await _pending_behind_held_turn(room, llm, hold, f"{dana} the password is hunter2")
        await _delete(room, secret)
        # Recorded pending, then deleted, and only then can its turn be built.
        _still_held(room, llm)
        hold.set()
        await turns_done(room, 1)
        await room.emu.wait_for(lambda: _settled(room), timeout=20)
        assert statuses(room) == ["done"], "the deleted message was answered"
        assert llm.openai.requests and "hunter2" not in _requests(llm, since=1)
        for table in ("messages", "inbox"):
            column = "text" if table == "messages" else "payload"
            assert room.sql(f"SELECT count(*) FROM {table} WHERE {column} LIKE '%hunter2%'") == [(0,)], table
        # A later turn in the thread is shown that a message was deleted, not what it said.
        prompt = await _next_prompt(room, llm, f"{dana} still there?", root, turns=2)
    assert "[a message was deleted]" in prompt and "hunter2" not in prompt, prompt


async def test_an_edit_after_the_answer_reaches_the_next_turn_as_edited_and_wakes_nobody(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=2) as llm:
        dana = room.mention("dana")
        ask = await _say(room, f"{dana} we ship on Friday")
        await turns_done(room, 1)
        # Still naming dana, as before: not newly named, so no turn.
        await _edit(room, ask, f"{dana} we ship on Monday")
        edits = "SELECT status FROM messages WHERE instance = 'dana' AND edit_of = ?"
        await room.emu.wait_for(lambda: room.sql(edits, ask) == [("context",)], timeout=20)
        await room.emu.wait_for(lambda: _settled(room), timeout=20)
        assert statuses(room) == ["done"], "an edit that does not newly name dana woke her"
        prompt = await _next_prompt(room, llm, f"{dana} when again?", ask, turns=2)
    assert re.search(r"^\[edited\] alice: @dana we ship on Monday$", prompt, re.M), prompt


async def test_an_edit_that_newly_names_the_instance_before_its_turn_wakes_it(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=1) as llm:
        dana, eli = room.mention("dana"), room.mention("eli")
        note = await _say(room, f"{eli} the build broke")
        await room.emu.wait_for(
            lambda: _row(room, note) == [(f"{eli} the build broke", "context")], timeout=20
        )
        await _edit(room, note, f"{eli} {dana} the build broke")
        await turns_done(room, 1)
        prompt = _prompts(llm)[0]
    # The message itself, with its new words, is what the turn answers.
    assert "@dana the build broke" in prompt and "[edited]" not in prompt, prompt


async def test_an_edit_after_the_answer_that_newly_names_the_instance_wakes_it(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=2) as llm:
        dana, eli = room.mention("dana"), room.mention("eli")
        note = await _say(room, f"{eli} the build broke")
        await room.emu.wait_for(lambda: _row(room, note) != [], timeout=20)
        await _say(room, f"{dana} seen this?", thread_ts=note)
        await turns_done(room, 1)
        assert "the build broke" in _prompts(llm)[0]  # the turn was shown the note
        await _edit(room, note, f"{eli} {dana} the build broke, fix it")
        await turns_done(room, 2)
        prompt = _prompts(llm)[1]
    assert re.search(r"^\[edited\] alice: \S+ @dana the build broke, fix it$", prompt, re.M), prompt


async def test_a_bots_edit_and_delete_wake_nobody_and_cost_no_hop(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with LLMServer() as llm:
        push_answers(llm, 1)
        _, rec = await start_dana(room, fleet_factory, llm)
        post = await room.bot_post("eli", "working on it…")
        await room.emu.wait_for(lambda: _settled(room) and rec.outcomes, timeout=20)
        hops = room.sql("SELECT count(*) FROM a2a_hops")
        eli = room.client("eli")
        await eli.chat_update(channel=room.channel, ts=post, text=f"{room.mention('dana')} done, your turn")
        await eli.chat_delete(channel=room.channel, ts=post)

        def changes() -> list[str]:
            return [
                o.reason for _, m, o in rec.outcomes if m.subtype in ("message_changed", "message_deleted")
            ]

        await room.emu.wait_for(lambda: len(changes()) == 2 and _settled(room), timeout=20)
    assert room.sql("SELECT count(*) FROM a2a_hops") == hops
    assert statuses(room) == [] and llm.openai.requests == []
    assert room.sql("SELECT count(*) FROM messages WHERE text LIKE '%your turn%'") == [(0,)]


async def test_a_shared_file_deleted_before_its_turn_is_never_shown_and_leaves_the_store(
    room: Room, fleet_factory: FleetFactory
) -> None:
    hold = asyncio.Event()
    async with dana_answering(room, fleet_factory, turns=2, hold=hold) as llm:
        root = await _first_turn_held(room, llm, hold)
        dana = room.mention("dana")
        shared, file_id = await _share(room, f"{dana} see this", "launch code 4455", thread_ts=root)
        await room.emu.wait_for(lambda: _files_of(room, shared) != [], timeout=20)
        await _delete(room, shared)
        assert _files_of(room, shared) == []
        hold.set()
        await turns_done(room, 1)
        await room.emu.wait_for(lambda: _settled(room), timeout=20)
        # A later turn of the thread is shown that a message was deleted, not its file.
        prompt = await _next_prompt(room, llm, f"{dana} still there?", root, turns=2)
        sent = _requests(llm)
    assert statuses(room) == ["done", "done"]
    assert "[a message was deleted]" in prompt and "secret.txt" not in prompt, prompt
    assert "4455" not in sent
    assert not _copy(room, file_id).exists()


async def test_a_message_deleted_as_its_turn_is_built_is_not_answered_and_its_download_goes(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=1) as llm:
        dana = room.mention("dana")
        root = await _launch_plan(room)
        with failpoints.paused("turn.built") as built:
            # Held with its transcript built and its file downloaded, its turn not started.
            shared, file_id = await _share(room, f"{dana} see this", "launch code 4455", thread_ts=root)
            await room.emu.wait_for(built.reached.is_set, timeout=20)
            assert _copy(room, file_id).exists()
            await _delete(room, shared)
            assert not _copy(room, file_id).exists()
            built.release()
            # The thread's next turn starts only once the held one is over (one at a time).
            await _say(room, f"{dana} still there?", thread_ts=root)
            await turns_done(room, 1)
        prompt = _prompts(llm)[0]
        sent = _requests(llm)
    assert statuses(room) == ["done"], "the deleted message had a turn of its own"
    assert "[a message was deleted]" in prompt and "still there?" in prompt, prompt
    assert "4455" not in sent and "see this" not in sent
    assert not _copy(room, file_id).exists()


async def test_an_edit_as_the_turn_is_built_is_what_the_turn_shows(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=1) as llm:
        dana = room.mention("dana")
        with failpoints.paused("turn.built") as built:
            ask = await _say(room, f"{dana} what is 2+2?")
            await room.emu.wait_for(built.reached.is_set, timeout=20)
            await _edit_before_its_turn(room, ask, f"{dana} what is 3+3?")
            built.release()
            await turns_done(room, 1)
        prompt = _prompts(llm)[0]
    assert "what is 3+3?" in prompt and "2+2" not in prompt, prompt


def _kept(room: Room, words: str) -> list[tuple[object, ...]]:
    """The stored rows, in any table that holds words, that still hold ``words``."""
    like = f"%{words}%"
    return [
        *room.sql(
            "SELECT 'agent_history', id FROM agent_history WHERE prompt LIKE ? OR messages LIKE ?", like, like
        ),
        *room.sql("SELECT 'messages', ts FROM messages WHERE text LIKE ?", like),
        *room.sql("SELECT 'inbox', ts FROM inbox WHERE payload LIKE ?", like),
    ]


async def test_a_message_deleted_after_its_answer_is_shown_as_deleted_and_its_words_reach_no_later_request(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=4) as llm:
        dana = room.mention("dana")
        root = await _say(room, f"{dana} hello")
        await turns_done(room, 1)
        secret = await _say(room, f"{dana} the password is hunter2", thread_ts=root)
        await turns_done(room, 2)
        # Edited after its answer: the thread's next turn is shown the edit.
        await _edit(room, secret, f"{dana} the password is hunter3")
        await room.emu.wait_for(
            lambda: room.sql("SELECT count(*) FROM messages WHERE edit_of = ?", secret) == [(1,)], timeout=20
        )
        await _say(room, f"{dana} got it?", thread_ts=root)
        await turns_done(room, 3)
        assert "[edited] alice: @dana the password is hunter3" in _prompts(llm)[2]
        assert [t for t, _ in _kept(room, "hunter") if t == "agent_history"] != []
        await room.emu.delete_as_user(room.human.id, room.channel, secret)
        await room.emu.wait_for(lambda: _kept(room, "hunter") == [], timeout=20)
        before = len(llm.openai.requests)
        await _say(room, f"{dana} what did I say?", thread_ts=root)
        await turns_done(room, 4)
        later = _requests(llm, since=before)
        replayed = llm.openai.requests[before].json["messages"]
    assert "hunter" not in later
    # Its line, and its edit's line, in the turns that were shown them say it was deleted.
    shown = "\n".join(str(m.get("content")) for m in replayed if m["role"] == "user")
    assert len(re.findall(r"^alice: \[a message was deleted\]$", shown, re.M)) == 1, shown
    assert len(re.findall(r"^\[edited\] alice: \[a message was deleted\]$", shown, re.M)) == 1, shown


async def test_a_message_deleted_while_its_turn_runs_leaves_the_history_that_turn_keeps(
    room: Room, fleet_factory: FleetFactory
) -> None:
    hold = asyncio.Event()
    async with dana_answering(room, fleet_factory, turns=2, hold=hold) as llm:
        dana = room.mention("dana")
        root = await _launch_plan(room)
        secret = await _say(room, f"{dana} the password is hunter2", thread_ts=root)
        # The model is answering it (held): its turn runs, and keeps what it read.
        await room.emu.wait_for(lambda: len(llm.openai.requests) == 1, timeout=20)
        await _delete(room, secret)
        hold.set()
        await turns_done(room, 1)
        assert "hunter2" in llm.openai.requests[0].body.decode()
        assert _kept(room, "hunter") == []
        await _say(room, f"{dana} what did I say?", thread_ts=root)
        await turns_done(room, 2)
        later = _requests(llm, since=2)
    assert "hunter" not in later and "alice: [a message was deleted]" in later


async def test_a_shared_file_deleted_after_its_answer_leaves_the_store_the_disk_and_later_requests(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=2) as llm:
        dana = room.mention("dana")
        root = await _launch_plan(room)
        shared, file_id = await _share(room, f"{dana} see this", "launch code 4455", thread_ts=root)
        await turns_done(room, 1)
        assert "launch code 4455" in _prompts(llm)[0]  # its answer was shown the file
        assert _copy(room, file_id).exists() and _kept(room, "4455") != []
        await _delete(room, shared)
        assert _files_of(room, shared) == [] and _kept(room, "4455") == []
        assert not _copy(room, file_id).exists()
        before = len(llm.openai.requests)
        await _say(room, f"{dana} what did I share?", thread_ts=root)
        await turns_done(room, 2)
        later = _requests(llm, since=before)
    assert "4455" not in later and "secret.txt" not in later
    assert "alice: [a message was deleted]" in later
