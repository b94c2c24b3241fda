"""A vote survives ``kill -9`` (docs/team-rooms.md, docs/architecture.md): ``nanoslack run``
as a subprocess, SIGKILLed
while its vote is open and again the moment Slack has taken its reminder, and its result,
before the store heard back. After each restart the clock finds the vote in the store and
carries on: the reminder and the result are each posted once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nanoslack.emulator import App, Emulator, User
from nanoslack.fleetproc import FleetProcess
from nanoslack.testing.fleet_env import sql, write_fleet_env
from tests.e2e import team
from tests.e2e.test_team_rooms import DANA_ASKS, ELI_VOTES


@dataclass
class Setup:
    emu: Emulator
    alice: User
    apps: dict[str, App]
    channel: str
    tmp: Path

    @property
    def db(self) -> Path:
        return self.tmp / "data" / "nanoslack.db"

    @property
    def env_file(self) -> Path:
        return self.tmp / ".env"

    async def start(self) -> FleetProcess:
        fleet = FleetProcess.start(self.env_file)
        await fleet.wait_for_event("fleet started")
        return fleet

    async def crash_on_first_post(self) -> None:
        """A run that SIGKILLs itself once Slack has taken its first post (before the
        outbox row is marked sent)."""
        fleet = FleetProcess.start(self.env_file, failpoints="outbox.posted=kill@1")
        assert await fleet.wait() == -9

    def texts(self, ask: str, prefix: str) -> list[str]:
        return team.thread_texts(self.emu, self.channel, ask, prefix)

    def outbox_status(self, key: str) -> str | None:
        rows = sql(self.db, "SELECT status FROM outbox WHERE dedupe_key = ?", key)
        return str(rows[0][0]) if rows else None


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async with Emulator(ack_timeout=1.0) as emu:
        alice = emu.add_user("alice")
        apps = {name: emu.add_app(name) for name in ("dana", "eli", "fay")}
        conv = emu.create_conversation([alice.id, *(a.bot_user_id for a in apps.values())])
        db = tmp_path / "data" / "nanoslack.db"
        team.open_team_room(db, conv.id, list(apps))
        write_fleet_env(
            tmp_path / ".env",
            emu,
            list(apps.values()),
            db,
            SLACK_A2A_ROOMS=conv.id,
            SLACK_OWNER=alice.id,
            LOG_FORMAT="json",
            NANOSLACK_VOTE_REMIND="600",
            NANOSLACK_VOTE_CLOSE="600",
            **team.rules_env(tmp_path, "dana", [DANA_ASKS]),
            **team.rules_env(tmp_path, "eli", [ELI_VOTES]),
        )
        yield Setup(emu, alice, apps, conv.id, tmp_path)


async def test_a_vote_open_across_sigkills_posts_its_reminder_and_its_result_once(setup: Setup) -> None:
    s = setup
    fleet = await s.start()
    ask = await s.emu.post_as_user(s.alice.id, s.channel, f"<@{s.apps['dana'].bot_user_id}> let's vote on it")
    await s.emu.wait_for(lambda: team.vote_message(s.emu, s.channel, ask), timeout=20)
    await s.emu.wait_for(lambda: set(team.ballots(s.db)) == {"dana", "eli"}, timeout=20)
    await s.emu.wait_for(lambda: team.turns_done(s.db, "fay") == 1, timeout=20)
    assert await fleet.kill() == -9

    # Down while the reminder fell due; up again, it is posted and the process dies the
    # moment Slack has it, before the outbox row is marked sent.
    team.age_votes(s.db, 601)
    await s.crash_on_first_post()
    assert len(s.texts(ask, "⏳")) == 1
    assert s.outbox_status("vote-remind:1") == "sending"

    fleet = await s.start()
    await fleet.wait_for_event("post recovered: already posted", key="vote-remind:1")
    assert await fleet.kill() == -9

    # The close falls due while it is down; the result goes the same way.
    team.age_votes(s.db, 601)
    await s.crash_on_first_post()
    assert len(s.texts(ask, "🗳️ Vote closed")) == 1
    fleet = await s.start()
    closed = await s.emu.wait_for(
        lambda: (m := team.vote_message(s.emu, s.channel, ask)) and m.get("edited") and m, timeout=20
    )
    assert await fleet.stop() == 0

    (reminder,) = s.texts(ask, "⏳")
    assert f"not answered yet: <@{s.alice.id}>, @fay." in reminder
    (result,) = s.texts(ask, "🗳️ Vote closed")
    assert result.endswith(f"Abstained: <@{s.alice.id}>, @fay.")
    assert team.buttons(closed) == {}
    assert sql(s.db, "SELECT status, result FROM votes") == [("closed", result)]
    assert {s.outbox_status(k) for k in ("vote-remind:1", "vote-result:1", "vote-closed:1")} == {"sent"}
