"""Flagship claims, each by a test that fails when the claim is broken.

Each test drives the real fleet against the emulator and looks only at what Slack,
the database and the log show, so it holds while the internals are rewritten:

- an owner's halt cancels the turn under way (its agent process is killed);
- a long answer reaches Slack as Markdown, split into posts Slack takes;
- an LLM back end's API key never shows in a failed turn's error or in the log,
  whatever shape the key has;
- a process whose instance lease was taken away records and answers nothing more;
- a SIGKILLed turn leaves no ``nanoslack-turn-*`` folder behind after a restart.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator import Emulator
from nanoslack.fleetproc import FleetProcess
from nanoslack.logs import configure_logging
from nanoslack.testing.fleet_env import write_fleet_env
from nanoslack.testing.llm_server import Answer, LLMServer, backend_env
from tests.e2e.conftest import FleetFactory, Room
from tests.e2e.turn_agent import TurnAgent

# -- helpers ----------------------------------------------------------------------------------------


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it has exited, unreaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _bot_messages(room: Room, name: str) -> list[dict[str, Any]]:
    """Everything ``name``'s bot posted in the room (top level and threads), oldest first."""
    bot_id = room.apps[name].bot_id
    found = [m for m in room.emu.all_messages(room.channel) if m.get("bot_id") == bot_id]
    return sorted(found, key=lambda m: float(m["ts"]))


def _turn_rows(room: Room, instance: str) -> list[tuple[Any, ...]]:
    return room.sql("SELECT status, error FROM turns WHERE instance = ? ORDER BY id", instance)


# -- a halt cancels the turn under way ----------------------------------------------------------------

# An agent that would think for 30 s: it leaves its pid at start and a marker at the end.
SLOW_AGENT = r"""
import os, sys, time
from pathlib import Path

here = Path(__file__).resolve().parent
sys.stdin.read()
(here / "slow.pid.tmp").write_text(str(os.getpid()))
os.replace(here / "slow.pid.tmp", here / "slow.pid")
time.sleep(30)
(here / "slow.done").touch()
print("finished the long job")
"""
# From the halt being visible in Slack to the agent's process being gone.
HALT_GRACE_S = 2.0


@pytest.mark.parametrize("how", ["stop sign", "stop"])
async def test_an_owners_halt_kills_the_agent_of_the_turn_under_way_and_nothing_is_posted(
    room: Room, fleet_factory: FleetFactory, how: str
) -> None:
    emu, owner = room.emu, room.human.id
    script = room.tmp / "slow_agent.py"
    script.write_text(SLOW_AGENT)
    command = f"exec {shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    await fleet_factory(["dana"], SLACK_OWNER=owner, NANOSLACK_AGENT_COMMAND=command)
    asked = await emu.post_as_user(owner, room.channel, f"{room.mention('dana')} a long job, please")
    pid_file = room.tmp / "slow.pid"
    await emu.wait_for(pid_file.exists, timeout=15, message="the agent never started")
    pid = int(pid_file.read_text())
    assert _running(pid)

    if how == "stop sign":
        await emu.react(owner, room.channel, asked, "octagonal_sign")
    else:
        await emu.post_as_user(owner, room.channel, "stop")
    await emu.wait_for(
        lambda: any(str(m.get("text", "")).startswith("🛑 Halted by") for m in _bot_messages(room, "dana")),
        timeout=10,
        message="the halt notice never appeared",
    )
    await emu.wait_for(
        lambda: not _running(pid),
        timeout=HALT_GRACE_S,
        message=f"the agent (pid {pid}) kept running after the halt",
    )
    assert not (room.tmp / "slow.done").exists(), "the agent finished its turn after the halt"
    await emu.wait_for(lambda: [s for s, _ in _turn_rows(room, "dana")] == ["halted"], timeout=5)
    posted = [m["text"] for m in _bot_messages(room, "dana")]
    assert [t for t in posted if not t.startswith("🛑 Halted by")] == [], posted


# -- a long answer is split for Slack ------------------------------------------------------------------

# What Slack takes in one ``markdown_text`` post (docs/architecture.md).
SLACK_TEXT_LIMIT = 12_000


def _long_answer(at_least: int) -> str:
    paragraphs: list[str] = []
    while len("\n\n".join(paragraphs)) < at_least:
        i = len(paragraphs)
        paragraphs.append(f"Part {i}: " + " ".join(f"step{i}.{j}" for j in range(14)))
    return "\n\n".join(paragraphs)


async def test_a_13000_character_answer_reaches_slack_as_several_markdown_posts_holding_all_of_it(
    room: Room, fleet_factory: FleetFactory
) -> None:
    answer = _long_answer(13_000)
    answer_file = room.tmp / "answer.txt"
    answer_file.write_text(answer + "\n")
    await fleet_factory(
        ["dana"], SLACK_OWNER=room.human.id, NANOSLACK_AGENT_COMMAND=f"cat {shlex.quote(str(answer_file))}"
    )
    await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} write it all up")

    def words_posted() -> list[str]:
        return " ".join(m["text"] for m in _bot_messages(room, "dana")).split()

    await room.emu.wait_for(
        lambda: words_posted() == answer.split(), timeout=15, message="the answer did not reach Slack whole"
    )
    posts = [m["text"] for m in _bot_messages(room, "dana")]
    assert len(posts) >= 2, f"one post of {len(posts[0])} characters"
    assert all(len(p) <= SLACK_TEXT_LIMIT for p in posts), [len(p) for p in posts]
    # Each is Markdown Slack renders (the emulator keeps markdown_text as one markdown block).
    assert all(m["blocks"] == [{"type": "markdown", "text": m["text"]}] for m in _bot_messages(room, "dana"))
    assert [s for s, _ in _turn_rows(room, "dana")] == ["done"]


# -- an LLM key that matches no known shape is still scrubbed -----------------------------------------

LOCAL_KEY = "local-secret-key-42"


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
async def test_a_401_that_echoes_a_local_api_key_leaves_it_out_of_the_turns_error_and_every_log_line(
    room: Room, fleet_factory: FleetFactory, backend: str
) -> None:
    out = io.StringIO()
    configure_logging("debug", "json", stream=out)
    refusal = {"error": {"type": "authentication_error", "message": f"Invalid API key: {LOCAL_KEY}"}}
    # A local model server (nanoslack.testing.llm_server) refuses the key and echoes it; Slack's traffic
    # is the emulator's, untouched.
    async with LLMServer() as llm:
        llm.openai.default = llm.anthropic.default = Answer(401, json=refusal)
        await fleet_factory(["dana"], SLACK_OWNER=room.human.id, **backend_env(backend, llm, LOCAL_KEY))
        await room.emu.post_as_user(room.human.id, room.channel, f"{room.mention('dana')} hello")
        await room.emu.wait_for(lambda: _turn_rows(room, "dana"), timeout=10, message="no turn ran")
        await room.emu.wait_for(lambda: _turn_rows(room, "dana")[0][0] != "running", timeout=10)
    assert llm.requests and all(r.headers.get("authorization") == f"Bearer {LOCAL_KEY}" for r in llm.requests)
    ((status, error),) = _turn_rows(room, "dana")
    assert status == "failed" and "401" in error, (status, error)
    assert LOCAL_KEY not in error
    steps = room.sql("SELECT kind, error FROM turn_steps")
    assert steps and all(kind == "model" and "401" in err and LOCAL_KEY not in err for kind, err in steps)
    leaks = [line for line in out.getvalue().splitlines() if LOCAL_KEY in line]
    assert leaks == []
    assert _bot_messages(room, "dana") == []


# -- a process that lost its lease records and answers nothing more --------------------------------


def _lease_lines(out: io.StringIO, instance: str) -> list[dict[str, Any]]:
    """Warnings and errors about ``instance`` that speak of its lease."""
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return [
        e
        for e in lines
        if e.get("level") in ("warning", "error")
        and e.get("instance") == instance
        and "lease" in json.dumps(e).lower()
    ]


async def test_a_fleet_whose_lease_is_taken_away_mid_stream_records_and_answers_nothing_more(
    room: Room, fleet_factory: FleetFactory
) -> None:
    emu, alice, dana = room.emu, room.human.id, room.apps["dana"]
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    script = room.tmp / "answer.json"
    script.write_text(json.dumps({"rules": [], "default": "working on it"}))
    _, rec = await fleet_factory(
        ["dana"],
        SLACK_OWNER=alice,
        NANOSLACK_AGENT_SCRIPT=str(script),
        # No heartbeat during the test: the fence alone must notice the lost lease.
        NANOSLACK_LEASE_SECONDS="600",
        NANOSLACK_LEASE_HEARTBEAT="300",
    )
    before = [
        await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} job {i}") for i in range(3)
    ]
    await emu.wait_for(lambda: len(_bot_messages(room, "dana")) == 3, timeout=15, message="no answers")
    answered, turns = len(_bot_messages(room, "dana")), len(_turn_rows(room, "dana"))
    outbox = room.sql("SELECT count(*) FROM outbox WHERE instance = 'dana'")

    def inbox(ts: str) -> list[tuple[Any, ...]]:
        return room.sql("SELECT status FROM inbox WHERE instance = 'dana' AND ts = ?", ts)

    # A bot's message is recorded; while dana looks up its sender's name (Slack says:
    # retry in 3 s), another process takes the instance over: its lease row says so,
    # and dana's heartbeat, minutes away, has not noticed.
    emu.fail_next("bots.info", 1, error="ratelimited", retry_after=3, app_id=dana.app_id)
    in_flight = await room.bot_post("eli", f"{room.mention('dana')} may I help?")
    await emu.wait_for(lambda: inbox(in_flight) == [("received",)], timeout=5)
    room.sql(
        "UPDATE instance_leases SET holder = 'elsewhere:1:0badf00d', expires_at = expires_at + 3600"
        " WHERE instance = 'dana'"
    )
    assert room.sql("SELECT holder FROM instance_leases WHERE instance = 'dana'") == [
        ("elsewhere:1:0badf00d",)
    ]
    await emu.wait_for(lambda: any(m.ts == in_flight for _, m, _ in rec.outcomes), timeout=10)
    assert inbox(in_flight) == [("received",)], "the batch went on after the lease was lost"
    assert room.sql("SELECT count(*) FROM messages WHERE instance = 'dana' AND ts = ?", in_flight) == [(0,)]
    assert room.sql("SELECT count(*) FROM a2a_hops") == [(0,)]

    # Human messages keep coming: none is recorded (so none is acked: Slack redelivers).
    stats = emu.stats(dana.app_id)
    during = [
        await emu.post_as_user(alice, room.channel, f"{room.mention('dana')} more {i}") for i in range(5)
    ]
    # Recorded and acked (the claim broken), or left unacked and redelivered (each
    # message comes as two envelopes, the message and its app_mention twin).
    await emu.wait_for(
        lambda: (
            emu.stats(dana.app_id).acked - stats.acked >= len(during)
            or emu.stats(dana.app_id).redelivered - stats.redelivered >= 3 * len(during)
        ),
        timeout=20,
    )
    recorded = [ts for ts in during if inbox(ts)]
    assert recorded == [], "a process that lost its lease recorded messages"
    assert emu.stats(dana.app_id).acked - stats.acked < len(during), "the envelopes were acked"
    assert room.sql(
        "SELECT count(*) FROM messages WHERE instance = 'dana' AND ts IN (?, ?, ?, ?, ?)", *during
    ) == [(0,)]
    assert len(_turn_rows(room, "dana")) == turns
    assert len(_bot_messages(room, "dana")) == answered
    assert room.sql("SELECT count(*) FROM outbox WHERE instance = 'dana'") == outbox
    assert {ts for (ts,) in room.sql("SELECT ts FROM inbox WHERE instance = 'dana'")} == {*before, in_flight}
    assert _lease_lines(out, "dana"), "the lease loss was not logged"


# -- a SIGKILLed turn leaves no folder behind -----------------------------------------------------------


def _turn_folders(tmp: Path) -> list[Path]:
    return sorted(p for p in tmp.glob("nanoslack-turn-*") if p.is_dir())


def _sql(db: Path, query: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=5)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


async def test_a_turn_folder_left_by_a_sigkilled_fleet_is_gone_after_the_restart(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, dana, eli = emu.add_user("alice"), emu.add_app("dana"), emu.add_app("eli")
    channel = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id], kind="mpim").id
    agent = TurnAgent.install(tmp_path)
    db = tmp_path / "data" / "nanoslack.db"
    env_file = write_fleet_env(
        tmp_path / ".env",
        emu,
        [dana],
        db,
        SLACK_A2A_ROOMS=channel,
        SLACK_OWNER=alice.id,
        LOG_FORMAT="json",
        **agent.env(),
    )
    # The fleets' system temp directory (tempfile honours TMPDIR): this test's alone.
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))

    agent.hold("dana")
    fleet = FleetProcess.start(env_file)
    try:
        await emu.wait_for(lambda: emu.connections(dana.app_id) >= 1, timeout=30)
        await emu.post_as_user(alice.id, channel, f"<@{dana.bot_user_id}> a question")
        await emu.wait_for(lambda: agent.calls("dana"), timeout=15, message="the agent never started")
        (left,) = _turn_folders(system_tmp)  # where the teammate's system prompt waits for the agent
        assert (left / "system.md").exists()
    finally:
        await fleet.kill()
    # The agent runs in its own process group: the SIGKILL did not reach it.
    for call in agent.calls("dana"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(call["pid"]), signal.SIGKILL)
    assert _turn_folders(system_tmp) == [left]

    agent.release("dana")
    agent.reply("dana", "the answer")
    fleet = FleetProcess.start(env_file)
    try:
        await fleet.wait_for_event("turn finished")
    finally:
        assert await fleet.stop() == 0
    assert len(agent.calls("dana")) == 2  # the abandoned turn ran again
    assert _sql(db, "SELECT status FROM turns ORDER BY id") == [("abandoned",), ("done",)]
    assert _turn_folders(system_tmp) == []
