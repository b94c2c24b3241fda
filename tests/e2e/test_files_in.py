"""Files in (docs/agents.md "Files"): what a person shares reaches the turn that answers it,
end to end against the emulator, with the fleet's real Slack clients and the local model
server. A file that cannot be had, or does not read as what it says it is, is a line the
agent reads; the turn answers anyway."""

from __future__ import annotations

import json
import shlex
import struct
import sys
import zlib
from typing import Any

from aiohttp import web

from nanoslack.testing.llm_server import (
    LLMServer,
    Request,
    anthropic_answer,
    anthropic_text,
    backend_env,
    send,
)
from nanoslack.testing.ports import serve
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.dana_alone import dana_answering, first_requests, statuses, teammates, turns_done


def png(width: int = 2, height: int = 2) -> bytes:
    """A real, tiny PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _prompt(llm: LLMServer, turn: int = 0) -> str:
    """The user prompt of a turn's first request (its last message), as text."""
    content = first_requests(llm)[turn].json["messages"][-1]["content"]
    if not isinstance(content, str):
        content = "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    # The transcript indents a message's later lines under its sender.
    return "\n".join(line.removeprefix("  ") for line in content.split("\n"))


def _first(llm: LLMServer, turn: int = 0) -> Request:
    return first_requests(llm)[turn]


async def _share(room: Room, name: str, content: bytes | str, **kw: Any) -> str:
    text = f"{room.mention('dana')} look"
    message = await room.emu.share_file(room.human.id, room.channel, name, content, text=text, **kw)
    return str(message["ts"])


Shared = tuple[str, bytes | str, dict[str, Any]]


async def _each_answered(
    room: Room, fleet_factory: FleetFactory, shares: list[Shared], **env: str
) -> LLMServer:
    """A fleet of dana on the model server; each file shared in turn, each answered by its
    own turn before the next. The model server, with every request it saw."""
    async with dana_answering(room, fleet_factory, turns=len(shares), env=env) as llm:
        for turn, (name, content, kw) in enumerate(shares, 1):
            await _share(room, name, content, **kw)
            await turns_done(room, turn)
    return llm


async def test_an_image_a_person_shares_reaches_the_model_as_an_image(
    room: Room, fleet_factory: FleetFactory
) -> None:
    image = png()
    async with dana_answering(room, fleet_factory, turns=2) as llm:
        ts = await _share(room, "shot.png", image)
        await turns_done(room, 1)
        first = _first(llm)
        assert first.images() == [("image/png", image)]
        assert "[file: shot.png (" in _prompt(llm)
        # The next turn in the room replays the first one's line, never the image again.
        await room.emu.post_as_user(
            room.human.id, room.channel, f"{room.mention('dana')} and now?", thread_ts=ts
        )
        await turns_done(room, 2)
        later = _first(llm, 1)
    assert later.images() == []
    assert "shot.png" in json.dumps(later.json["messages"])
    assert statuses(room) == ["done", "done"]


async def test_a_csv_a_person_shares_reaches_the_model_as_its_rows(
    room: Room, fleet_factory: FleetFactory
) -> None:
    rows = "city,people\nLyon,522250\nNantes,320732\n"
    async with dana_answering(room, fleet_factory, turns=1) as llm:
        await _share(room, "cities.csv", rows)
        await turns_done(room, 1)
    prompt = _prompt(llm)
    assert f"[file: cities.csv ({len(rows)} B)]\n{rows}" in prompt
    assert _first(llm).images() == []


async def test_a_long_text_file_is_cut_with_a_line_saying_how_much_was_not_shown(
    room: Room, fleet_factory: FleetFactory
) -> None:
    log = "".join(f"line {i}\n" for i in range(5000))
    llm = await _each_answered(room, fleet_factory, [("app.log", log, {})], NANOSLACK_FILE_CHARS="100")
    prompt = _prompt(llm)
    assert log[:100] in prompt
    assert log[:101] not in prompt
    assert "of this file not shown: the first 100 characters are]" in prompt


async def test_files_that_cannot_be_had_each_become_a_line_and_the_turn_still_answers(
    room: Room, fleet_factory: FleetFactory
) -> None:
    shares: list[Shared] = [
        ("big.bin", b"\0" * (30 * 1024 * 1024), {}),
        ("secret.txt", "no", {"fault": "refused"}),
        ("old.txt", "gone", {"fault": "gone"}),
    ]
    llm = await _each_answered(room, fleet_factory, shares)
    assert "[file: big.bin: could not be fetched: too big (30.0 MB; the limit is 20.0 MB" in _prompt(llm, 0)
    assert "[file: secret.txt: could not be fetched: Slack refused the download (HTTP 403)]" in _prompt(
        llm, 1
    )
    assert "[file: old.txt: could not be fetched: the file is gone" in _prompt(llm, 2)
    assert statuses(room) == ["done", "done", "done"]
    # Each turn answered in the room.
    await room.emu.wait_for(
        lambda: room.sql("SELECT count(*) FROM outbox WHERE instance = 'dana' AND status = 'sent'") == [(3,)],
        timeout=10,
        message="not every turn's answer was posted",
    )


async def test_the_bot_token_never_follows_a_redirect_to_another_host(
    room: Room, fleet_factory: FleetFactory
) -> None:
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(body=b"stolen", content_type="text/plain")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner, port = await serve(app, "127.0.0.1")
    try:
        async with dana_answering(room, fleet_factory, turns=1) as llm:
            await _share(
                room, "notes.txt", "hello", fault="redirect", location=f"http://127.0.0.1:{port}/steal"
            )
            await turns_done(room, 1)
    finally:
        await runner.cleanup()
    assert seen == []  # not followed at all: the other host never heard from the fleet
    assert "Slack redirected it to another host (127.0.0.1:" in _prompt(llm)
    assert statuses(room) == ["done"]


async def test_bad_files_each_become_a_clear_line_and_the_turn_still_answers(
    room: Room, fleet_factory: FleetFactory
) -> None:
    shares: list[Shared] = [
        ("photo.png", b"this is not a png at all", {"mimetype": "image/png"}),
        ("empty.txt", b"", {}),
        ("latin.txt", "café crème".encode("latin-1"), {}),
        ("report.pdf", b"%PDF-1.4\nthis is not really a pdf\n%%EOF", {"mimetype": "application/pdf"}),
    ]
    llm = await _each_answered(room, fleet_factory, shares)
    prompts = [_prompt(llm, i) for i in range(4)]
    assert _first(llm, 0).images() == []
    assert "[file: photo.png: said to be image/png, but its bytes are not such an image]" in prompts[0]
    assert "[file: empty.txt: the file is empty]" in prompts[1]
    assert "[file: latin.txt: text in an encoding not readable here" in prompts[2]
    assert "[file: report.pdf: a PDF that does not parse" in prompts[3]
    assert statuses(room) == ["done"] * 4


def pdf(text: str) -> bytes:
    """A real one-page PDF whose text is ``text``."""
    stream = f"BT /F1 18 Tf 20 100 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 144] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _file_share(room: Room, ts: str, files: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``file_share`` envelope as Slack would deliver it to dana, with these ``files``."""
    team = room.emu.engine.ws.team_id
    return {
        "type": "event_callback",
        "team_id": team,
        "event_id": f"Ev{ts.replace('.', '')}",
        "event": {
            "type": "message",
            "subtype": "file_share",
            "channel": room.channel,
            "channel_type": "mpim",
            "team": team,
            "user": room.human.id,
            "text": f"{room.mention('dana')} look",
            "ts": ts,
            "files": files,
        },
        "authorizations": [{"team_id": team, "user_id": room.apps["dana"].bot_user_id, "is_bot": True}],
    }


async def test_a_pdf_arrives_as_its_text_and_a_file_shared_by_id_is_looked_up_with_files_info(
    room: Room, fleet_factory: FleetFactory
) -> None:
    shares: list[Shared] = [
        ("q3.pdf", pdf("Quarterly revenue 4242"), {}),
        ("connect.txt", "shared from another org", {"check_file_info": True}),
    ]
    llm = await _each_answered(room, fleet_factory, shares)
    assert "[file: q3.pdf (" in _prompt(llm, 0)
    assert "PDF, 1 pages)]\nQuarterly revenue 4242" in _prompt(llm, 0)
    assert "[file: connect.txt (23 B)]\nshared from another org" in _prompt(llm, 1)


async def test_a_files_entry_without_a_url_is_a_line_and_the_turn_still_answers(
    room: Room, fleet_factory: FleetFactory
) -> None:
    async with dana_answering(room, fleet_factory, turns=1) as llm:
        entry = {"id": "F0NOURL1", "name": "nourl.txt", "mimetype": "text/plain", "size": 5}
        await room.emu.inject_envelope(
            room.apps["dana"].app_id, _file_share(room, "1900000001.000100", [entry])
        )
        await turns_done(room, 1)
    assert "[file: nourl.txt: could not be fetched: Slack gave no URL to download it from]" in _prompt(llm)
    assert statuses(room) == ["done"]


FILES_AGENT = """
import json, os, pathlib
files = json.loads(os.environ["NANOSLACK_FILES"])
for f in files:
    print(f["name"], f["mimetype"], pathlib.Path(f["path"]).read_bytes().decode(), sep=" | ")
"""


async def test_the_command_back_end_gets_the_files_saved_in_its_turn_folder_and_listed_in_nanoslack_files(
    room: Room, fleet_factory: FleetFactory
) -> None:
    script = room.tmp / "files_agent.py"
    script.write_text(FILES_AGENT)
    command = f"exec {shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    await fleet_factory(["dana"], SLACK_OWNER=room.human.id, NANOSLACK_AGENT_COMMAND=command)
    await _share(room, "todo.md", "- buy milk")

    def posted() -> bool:
        texts = [str(m.get("text", "")) for m in room.emu.all_messages(room.channel) if m.get("bot_id")]
        return any("todo.md | text/markdown | - buy milk" in t for t in texts)

    await room.emu.wait_for(posted, timeout=20, message="the agent never posted what it was given")
    # The copy went with the turn's folder; the download stays in the data folder by id.
    assert len(list((room.db.parent / "files").iterdir())) == 1


async def test_the_anthropic_back_end_gets_the_image_as_an_image_block_too(
    room: Room, fleet_factory: FleetFactory
) -> None:
    image = png(3, 1)
    async with LLMServer() as llm:
        llm.anthropic.push(anthropic_answer(send("a red line")), anthropic_text())
        env = {"SLACK_OWNER": room.human.id, "NANOSLACK_TEAMMATES": str(teammates(room))}
        await fleet_factory(["dana"], **env, **backend_env("anthropic", llm, "sk-ant-test-0123456789"))
        await _share(room, "line.png", image)
        await turns_done(room, 1)
    assert llm.anthropic.requests[0].images() == [("image/png", image)]
    assert statuses(room) == ["done"]
