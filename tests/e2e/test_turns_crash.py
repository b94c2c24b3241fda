"""Replies exactly once across ``kill -9`` (docs/architecture.md): ``nanoslack run`` as a
subprocess with the real ``command`` back end, SIGKILLed mid-turn, then restarted.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nanoslack.emulator import App, Emulator, User
from nanoslack.fleetproc import FleetProcess
from nanoslack.testing.fleet_env import scalar, sql, write_fleet_env
from tests.e2e.turn_agent import TurnAgent

# More replies than 15 pages of conversations.replies at Slack's 2025 limit for
# non-Marketplace apps (15 messages a call, one call a minute).
LONG_THREAD = 230


@dataclass
class Setup:
    emu: Emulator
    alice: User
    dana: App
    channel: str
    tmp: Path
    agent: TurnAgent

    @property
    def db(self) -> Path:
        return self.tmp / "data" / "nanoslack.db"

    @property
    def env_file(self) -> Path:
        return self.tmp / ".env"

    def start(self, failpoints: str = "") -> FleetProcess:
        return FleetProcess.start(self.env_file, failpoints=failpoints)

    def replies(self, parent: str) -> list[dict[str, Any]]:
        """dana's posts in the thread under ``parent``."""
        for top in self.emu.conversation_messages(self.channel):
            if top["ts"] == parent:
                return [r for r in top["replies"] if r.get("bot_id") == self.dana.bot_id]
        return []

    def turn_statuses(self) -> list[str]:
        return [
            str(r[0]) for r in sql(self.db, "SELECT status FROM turns WHERE instance = 'dana' ORDER BY id")
        ]


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async with Emulator(ack_timeout=1.0) as emu:
        alice = emu.add_user("alice")
        dana, eli = emu.add_app("dana"), emu.add_app("eli")
        room = emu.create_conversation([alice.id, dana.bot_user_id, eli.bot_user_id])
        agent = TurnAgent.install(tmp_path)
        db = tmp_path / "data" / "nanoslack.db"
        write_fleet_env(
            tmp_path / ".env",
            emu,
            [dana],
            db,
            SLACK_A2A_ROOMS=room.id,
            SLACK_OWNER=alice.id,  # the owner is allowed: the reply is the first post
            LOG_FORMAT="json",
            **agent.env(),
        )
        yield Setup(emu, alice, dana, room.id, tmp_path, agent)


async def test_a_reply_that_reached_slack_before_a_sigkill_is_not_posted_again(setup: Setup) -> None:
    s = setup
    s.agent.reply("dana", "the answer")
    fleet = s.start("outbox.posted=kill@1")
    await s.emu.wait_for(lambda: s.emu.connections(s.dana.app_id) >= 1, timeout=30)
    parent = await s.emu.post_as_user(s.alice.id, s.channel, f"<@{s.dana.bot_user_id}> a question")
    assert await fleet.wait(30) == -signal.SIGKILL, "the failpoint did not fire"
    assert [r["text"] for r in s.replies(parent)] == ["the answer"]

    fleet = s.start()
    try:
        await fleet.wait_for_event("post recovered: already posted")
        sent = "SELECT count(*) FROM outbox WHERE status = 'sent' AND purpose = 'reply'"
        await s.emu.wait_for(lambda: scalar(s.db, sent) == 1, timeout=10)
    finally:
        assert await fleet.stop() == 0
    assert [r["text"] for r in s.replies(parent)] == ["the answer"]
    assert len(s.agent.calls("dana")) == 1, "the turn ran again although its output was recorded"
    assert s.turn_statuses() == ["done"]


async def test_a_turn_killed_while_the_agent_runs_answers_once_after_restart(setup: Setup) -> None:
    s = setup
    s.agent.reply("dana", "the answer")
    s.agent.hold("dana")
    fleet = s.start()
    await s.emu.wait_for(lambda: s.emu.connections(s.dana.app_id) >= 1, timeout=30)
    parent = await s.emu.post_as_user(s.alice.id, s.channel, f"<@{s.dana.bot_user_id}> a question")
    await s.emu.wait_for(lambda: s.agent.calls("dana"), timeout=30)
    assert await fleet.kill() == -signal.SIGKILL
    # The killed fleet's agent runs in its own session and outlives it: let it finish;
    # whatever it prints goes nowhere.
    s.agent.release("dana")
    assert s.replies(parent) == []

    fleet = s.start()
    try:
        await s.emu.wait_for(lambda: s.replies(parent), timeout=30)
        await s.emu.wait_for(lambda: s.turn_statuses() == ["abandoned", "done"], timeout=10)
    finally:
        assert await fleet.stop() == 0
    assert [r["text"] for r in s.replies(parent)] == ["the answer"]
    first, second = s.agent.calls("dana")
    assert "a question" in first["stdin"] and "a question" in second["stdin"]
    assert fleet.events("turns abandoned by a previous run")


async def test_a_reply_at_the_end_of_a_230_reply_thread_is_recovered_once_under_the_15_message_limit(
    setup: Setup,
) -> None:
    """Slack's 2025 limits for a commercially distributed non-Marketplace app: one
    ``conversations.replies`` call a minute, at most 15 messages. Paging the thread from
    its start would take 16 calls (16 minutes); the lookup reads only the messages newer
    than the attempt, so one call finds the reply."""
    s = setup
    s.agent.reply("dana", "the summary")
    fleet = s.start("outbox.posted=kill@1")
    await s.emu.wait_for(lambda: s.emu.connections(s.dana.app_id) >= 1, timeout=30)
    parent = await s.emu.post_as_user(s.alice.id, s.channel, "a long discussion")
    for i in range(LONG_THREAD):
        await s.emu.post_as_user(s.alice.id, s.channel, f"point {i}", thread_ts=parent)
    await s.emu.post_as_user(s.alice.id, s.channel, f"<@{s.dana.bot_user_id}> summarize", thread_ts=parent)
    assert await fleet.wait(60) == -signal.SIGKILL, "the failpoint did not fire"
    assert [r["text"] for r in s.replies(parent)] == ["the summary"]
    assert (
        scalar(s.db, "SELECT count(*) FROM outbox WHERE status = 'sending' AND attempted_at IS NOT NULL") == 1
    )

    s.emu.set_non_marketplace(True)
    calls_before = len(s.emu.api_calls)
    fleet = s.start()
    try:
        await fleet.wait_for_event("post recovered: already posted")
        sent = "SELECT count(*) FROM outbox WHERE status = 'sent' AND purpose = 'reply'"
        await s.emu.wait_for(lambda: scalar(s.db, sent) == 1, timeout=10)
    finally:
        assert await fleet.stop() == 0
    assert [r["text"] for r in s.replies(parent)] == ["the summary"]
    reads = [
        c
        for c in s.emu.api_calls[calls_before:]
        if c.method in ("conversations.replies", "conversations.history")
    ]
    assert [(c.method, c.status) for c in reads] == [("conversations.replies", 200)]
    assert int(reads[0].params["limit"]) <= 15 and reads[0].params.get("oldest")
    assert len(s.agent.calls("dana")) == 1


async def test_a_reply_recorded_but_not_sent_before_a_sigkill_is_sent_once_after_restart(
    setup: Setup,
) -> None:
    s = setup
    s.agent.reply("dana", "first part\n---\nsecond part")
    fleet = s.start("turn.recorded=kill@1")
    await s.emu.wait_for(lambda: s.emu.connections(s.dana.app_id) >= 1, timeout=30)
    parent = await s.emu.post_as_user(s.alice.id, s.channel, f"<@{s.dana.bot_user_id}> a question")
    assert await fleet.wait(30) == -signal.SIGKILL, "the failpoint did not fire"
    assert s.replies(parent) == []

    fleet = s.start()
    try:
        await s.emu.wait_for(lambda: len(s.replies(parent)) == 2, timeout=30)
    finally:
        assert await fleet.stop() == 0
    assert [r["text"] for r in s.replies(parent)] == ["first part", "second part"]
    assert len(s.agent.calls("dana")) == 1, "the agent ran again although its output was recorded"
    assert s.turn_statuses() == ["done"]
