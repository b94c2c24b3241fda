"""``send_file`` from Slack's side (docs/agents.md): a file an agent wrote is uploaded once into
the thread its turn answers (Slack's external upload, through real slack-sdk clients and the
emulator), also when the fleet is SIGKILLed between the upload and its completion; more than
1 MB is refused as the tool's result; in an A2A room the file is a post like any other (a hop
for the bot that reads it; one of the turn's posts in ``nanoslack turns``)."""

from __future__ import annotations

import io
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.ops import admin
from nanoslack.testing.fleet_env import scalar, sql, write_fleet_env
from nanoslack.testing.llm_server import (
    Answer,
    LLMServer,
    Request,
    backend_env,
    openai_answer,
    openai_text,
    send,
)
from nanoslack.tools.host import MAX_FILE_BYTES
from tests.e2e.conftest import FleetFactory, Room

REPORT = "name,score\nada,3\nbob,5\n"


def _env(llm: LLMServer, owner: str, teammates: Path) -> dict[str, str]:
    return {
        "SLACK_OWNER": owner,
        "NANOSLACK_TEAMMATES": str(teammates),
        **backend_env("openai", llm, "sk-test-1"),
    }


def _teammates(tmp: Path, *names: str) -> Path:
    teammates = tmp / "teammates"
    for name in names:
        (teammates / name).mkdir(parents=True, exist_ok=True)
        (teammates / name / "SOUL.md").write_text(f"You are {name}.\n")
    return teammates


def _by_instance(scripts: dict[str, list[Answer]]) -> Any:
    """One model serving several instances: each request answered from its own script."""
    queues = {name: list(answers) for name, answers in scripts.items()}

    def answer(request: Request) -> Answer:
        system = str((request.json or {}).get("messages", [{}])[0].get("content", ""))
        for name, queue in queues.items():
            if system.startswith(f"You are {name}") and queue:  # its persona opens its system prompt
                return queue.pop(0)
        return openai_text()

    return answer


def _send_file(**args: str) -> tuple[str, dict[str, str]]:
    return ("send_file", {"filename": "scores.csv", "content": REPORT, **args})


def _thread(emu: Emulator, channel: str, parent: str) -> list[dict[str, Any]]:
    for top in emu.conversation_messages(channel):
        if top["ts"] == parent:
            return list(top["replies"])
    return []


def _shared_files(emu: Emulator, channel: str, parent: str, bot_id: str) -> list[dict[str, Any]]:
    """The files ``bot_id`` shared in the thread under ``parent``, each as its message says."""
    return [
        f
        for m in _thread(emu, channel, parent)
        if m.get("bot_id") == bot_id and m.get("subtype") == "file_share"
        for f in m.get("files") or []
    ]


def _uploads(emu: Emulator, app: str) -> int:
    """Upload URLs ``app`` asked Slack for: one a file uploaded."""
    return sum(1 for c in emu.api_calls if c.method == "files.getUploadURLExternal" and c.app_name == app)


async def test_send_file_uploads_the_file_once_into_the_thread_the_turn_answers(
    room: Room, fleet_factory: FleetFactory
) -> None:
    dana = room.apps["dana"]
    async with LLMServer() as llm:
        llm.openai.default = _by_instance(
            {
                "dana": [
                    openai_answer(
                        _send_file(title="Scores", comment="Here are the scores."), send("Sent the scores.")
                    ),
                    openai_text(),
                ]
            }
        )
        await fleet_factory(["dana", "eli"], **_env(llm, room.human.id, _teammates(room.tmp, "dana", "eli")))
        ask = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} the scores?")
        await room.emu.wait_for(lambda: _shared_files(room.emu, room.channel, ask, dana.bot_id), timeout=20)
        await room.emu.wait_for(
            lambda: room.sql("SELECT count(*) FROM outbox WHERE status != 'sent'") == [(0,)], timeout=20
        )
        tool_results = llm.openai.requests[1].tool_results()
    (shared,) = _shared_files(room.emu, room.channel, ask, dana.bot_id)
    assert (shared["name"], shared["title"], shared["user"]) == ("scores.csv", "Scores", dana.bot_user_id)
    assert room.emu.file_content(shared["id"]) == REPORT.encode()
    assert _uploads(room.emu, "dana") == 1
    message = next(m for m in _thread(room.emu, room.channel, ask) if m.get("subtype") == "file_share")
    assert message["text"] == "Here are the scores."
    assert tool_results[0] == f"sent scores.csv ({len(REPORT)} bytes) into the thread"
    # One of the turn's two posts, as ``nanoslack turns`` lists it.
    assert room.sql("SELECT status, posts FROM turns WHERE instance = 'dana'") == [("done", 2)]
    out = io.StringIO()
    assert admin.turns_main(["--env-file", str(room.tmp / ".env"), "--instance", "dana"], out=out) == 0
    assert " done " in out.getvalue() and " 2 " in out.getvalue()


async def test_a_file_over_one_megabyte_is_refused_as_the_tools_result_and_nothing_is_uploaded(
    room: Room, fleet_factory: FleetFactory
) -> None:
    big = "x" * (MAX_FILE_BYTES + 1)
    async with LLMServer() as llm:
        llm.openai.default = _by_instance(
            {
                "dana": [
                    openai_answer(("send_file", {"filename": "big.txt", "content": big})),
                    openai_answer(send("That file is too big to send.")),
                    openai_text(),
                ]
            }
        )
        await fleet_factory(["dana"], **_env(llm, room.human.id, _teammates(room.tmp, "dana")))
        ask = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} the dump?")
        await room.emu.wait_for(
            lambda: [m for m in _thread(room.emu, room.channel, ask) if m.get("bot_id")], timeout=20
        )
        (result,) = llm.openai.requests[1].tool_results()
    more = f"the content is {MAX_FILE_BYTES + 1} bytes, more than the {MAX_FILE_BYTES} (1 MB) a file may be"
    assert json.loads(result) == {"error": f"not sent: {more}"}  # a failed tool, as the model reads one
    assert [m["text"] for m in _thread(room.emu, room.channel, ask)] == ["That file is too big to send."]
    assert _uploads(room.emu, "dana") == 0
    assert room.sql("SELECT count(*) FROM outbox_files") == [(0,)]


async def test_a_file_sent_into_an_a2a_room_is_a_post_that_costs_the_reading_bot_a_hop(
    room: Room, fleet_factory: FleetFactory
) -> None:
    dana = room.apps["dana"]
    async with LLMServer() as llm:
        llm.openai.default = _by_instance({"dana": [openai_answer(_send_file()), openai_text()]})
        _, recorder = await fleet_factory(
            ["dana", "eli"], **_env(llm, room.human.id, _teammates(room.tmp, "dana", "eli"))
        )
        ask = await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} the scores?")
        (shared,) = await room.emu.wait_for(
            lambda: _shared_files(room.emu, room.channel, ask, dana.bot_id), timeout=20
        )
        file_ts = next(
            m["ts"] for m in _thread(room.emu, room.channel, ask) if m.get("subtype") == "file_share"
        )
        await room.emu.wait_for(lambda: [m for m in recorder.delivered("eli") if m.ts == file_ts], timeout=20)
    (seen,) = [m for m in recorder.delivered("eli") if m.ts == file_ts]
    assert (seen.bot_id, seen.subtype, seen.hop) == (dana.bot_id, "file_share", 1)
    assert room.sql("SELECT instance, ts FROM a2a_hops") == [("eli", file_ts)]
    assert room.sql("SELECT posts FROM turns WHERE instance = 'dana'") == [(1,)]
    assert shared["name"] == "scores.csv"


@pytest.mark.parametrize(
    ("failpoint", "recovered", "info_fails"),
    [
        # Killed between the upload and its completion: the file is shared nowhere yet.
        ("outbox.uploaded", "file recovered: completing it", False),
        # Killed after the completion, before the row was marked sent: shared already.
        ("outbox.posted", "file recovered: already shared", False),
        # The same, with files.info failing after the restart: Slack's file_already_completed says it.
        ("outbox.posted", "file recovered: already completed", True),
    ],
)
async def test_a_fleet_killed_while_sending_a_file_shares_that_file_once_after_restart(
    emu: Emulator, tmp_path: Path, failpoint: str, recovered: str, info_fails: bool
) -> None:
    alice = emu.add_user("alice")
    dana = emu.add_app("dana")
    channel = emu.create_conversation([alice.id, dana.bot_user_id, emu.add_app("eli").bot_user_id]).id
    db = tmp_path / "data" / "nanoslack.db"
    async with LLMServer() as llm:
        llm.openai.default = _by_instance(
            {"dana": [openai_answer(_send_file(comment="The scores.")), openai_text()]}
        )
        env = write_fleet_env(
            tmp_path / ".env",
            emu,
            [dana],
            db,
            SLACK_A2A_ROOMS=channel,
            LOG_FORMAT="json",
            **_env(llm, alice.id, _teammates(tmp_path, "dana")),
        )
        fleet = FleetProcess.start(env, failpoints=f"{failpoint}=kill@1")
        await fleet.wait_for_event("fleet started")
        ask = await emu.post_as_user(alice.id, channel, f"<@{dana.bot_user_id}> the scores?")
        assert await fleet.wait(30) == -signal.SIGKILL, "the failpoint did not fire"
        # The bytes are up and the id recorded; the row is in doubt.
        (uploaded,) = sql(db, "SELECT file_id FROM outbox_files")
        assert uploaded[0] and emu.file_content(uploaded[0]) == REPORT.encode()
        assert sql(db, "SELECT status FROM outbox") == [("sending",)]
        shared_before = len(_shared_files(emu, channel, ask, dana.bot_id))
        assert shared_before == (failpoint == "outbox.posted")
        if info_fails:
            emu.fail_next("files.info", error="internal_error")

        fleet = FleetProcess.start(env)
        try:
            await emu.wait_for(
                lambda: scalar(db, "SELECT count(*) FROM outbox WHERE status = 'sent'") == 1, 30
            )
        finally:
            assert await fleet.stop() == 0
    (shared,) = _shared_files(emu, channel, ask, dana.bot_id)
    assert shared["id"] == uploaded[0]  # the file uploaded before the crash, not another
    assert _uploads(emu, "dana") == 1
    assert [m.get("text") for m in _thread(emu, channel, ask)] == ["The scores."]
    assert sql(db, "SELECT kind, status, posted_ts FROM outbox") == [("file", "sent", uploaded[0])]
    assert [e["id"] for e in fleet.events(recovered)] == [uploaded[0]]


async def test_in_a_dm_the_file_goes_into_the_thread_where_the_turns_words_are_streamed(
    room: Room, fleet_factory: FleetFactory
) -> None:
    dana = room.apps["dana"]
    async with LLMServer() as llm:
        llm.openai.default = _by_instance(
            {"dana": [openai_answer(_send_file(), send("The scores are in the file.")), openai_text()]}
        )
        await fleet_factory(["dana"], **_env(llm, room.human.id, _teammates(room.tmp, "dana")))
        im = room.emu.create_conversation([room.human.id, dana.bot_user_id], kind="im").id
        ask = await room.emu.post_as_user(room.human.id, im, "the scores as a file?")
        await room.emu.wait_for(lambda: _shared_files(room.emu, im, ask, dana.bot_id), timeout=20)
        await room.emu.wait_for(
            lambda: [m for m in _thread(room.emu, im, ask) if m.get("text") == "The scores are in the file."],
            timeout=20,
        )
    # The words stream while the turn runs (docs/agent-surface.md); the file follows them there.
    assert [m.get("subtype") for m in _thread(room.emu, im, ask)] == [None, "file_share"]
    assert not [m for m in room.emu.all_messages(im) if m.get("bot_id") and not m.get("thread_ts")]
