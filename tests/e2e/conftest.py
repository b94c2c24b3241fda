"""End-to-end fixtures: the real fleet (bolt + slack-sdk) against the emulator.

Nothing of ours is mocked: the fleet reads a real ``.env``, writes a real SQLite
file and talks to the emulator over loopback sockets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from nanoslack.config import load_settings
from nanoslack.emulator import App, Emulator, User
from nanoslack.inbound import Inbound
from nanoslack.pipeline import Outcome
from nanoslack.playground import NoteBook, PlaygroundServer, Stage, open_stage
from nanoslack.slack.adapter import SocketOptions
from nanoslack.slack.fleet import Fleet
from nanoslack.testing.fleet_env import sql, write_fleet_env

FAST_SOCKET = SocketOptions(ping_interval=1.0, idle_reconnect=300.0, watchdog_interval=0.5)


@dataclass
class Recorder:
    """Watches what each instance's pipeline decided (an observer, not a stand-in)."""

    outcomes: list[tuple[str, Inbound, Outcome]] = field(default_factory=list)

    def __call__(self, msg: Inbound, outcome: Outcome) -> None:
        self.outcomes.append((msg.instance, outcome.msg or msg, outcome))

    def delivered(self, instance: str | None = None) -> list[Inbound]:
        return [m for i, m, o in self.outcomes if o.status == "processed" and instance in (None, i)]

    def dropped(self, instance: str | None = None) -> list[tuple[Inbound, str]]:
        return [(m, o.reason) for i, m, o in self.outcomes if o.status == "dropped" and instance in (None, i)]


@dataclass
class Room:
    emu: Emulator
    human: User
    apps: dict[str, App]
    channel: str
    outside: str  # an MPIM with the same members that is NOT in SLACK_A2A_ROOMS
    tmp: Path

    @property
    def db(self) -> Path:
        return self.tmp / "data" / "nanoslack.db"

    def client(self, name: str) -> AsyncWebClient:
        return AsyncWebClient(token=self.apps[name].bot_token, base_url=self.emu.api_url)

    async def bot_post(self, name: str, text: str, channel: str | None = None, **kw: Any) -> str:
        resp = await self.client(name).chat_postMessage(channel=channel or self.channel, text=text, **kw)
        return str(resp["ts"])

    def mention(self, name: str) -> str:
        return f"<@{self.apps[name].bot_user_id}>"

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        return sql(self.db, query, *params)


@pytest.fixture
def room(emu: Emulator, tmp_path: Path) -> Room:
    """alice + dana + eli in an allowlisted MPIM; fay is in the workspace but not the room."""
    human = emu.add_user("alice", real_name="Alice")
    apps = {name: emu.add_app(name) for name in ("dana", "eli", "fay")}
    members = [human.id, apps["dana"].bot_user_id, apps["eli"].bot_user_id]
    conv = emu.create_conversation(members, kind="mpim")
    other = emu.create_conversation([*members, apps["fay"].bot_user_id], kind="mpim")
    return Room(emu, human, apps, conv.id, other.id, tmp_path)


FleetFactory = Callable[..., Any]


@pytest.fixture
async def fleet_factory(room: Room) -> AsyncIterator[Callable[..., Any]]:
    """``await start(["dana", "eli"], SLACK_A2A_MAX_HOPS="2")`` → (fleet, recorder);
    ``expect`` names the instances that should start when not all of them can."""
    fleets: list[Fleet] = []

    async def start(
        names: list[str] | None = None,
        *,
        env_name: str = ".env",
        socket: SocketOptions = FAST_SOCKET,
        expect: list[str] | None = None,
        **extra: str,
    ) -> tuple[Fleet, Recorder]:
        names = names or ["dana", "eli"]
        extra.setdefault("SLACK_A2A_ROOMS", room.channel)
        env_file = write_fleet_env(
            room.tmp / env_name, room.emu, [room.apps[n] for n in names], room.db, **extra
        )
        settings = load_settings(env_file, environ={})
        recorder = Recorder()
        fleet = Fleet(settings, socket=socket, on_outcome=recorder)
        fleets.append(fleet)
        started = await fleet.start()
        assert sorted(started) == sorted(names if expect is None else expect)
        return fleet, recorder

    yield start
    for fleet in fleets:
        await fleet.stop()


@pytest.fixture
def env_file(room: Room) -> Iterator[Path]:
    yield room.tmp / ".env"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Stage, str]]:
    """The playground as ``nanoslack demo`` serves it: the stage (rooms open, fleet started)
    and the page's URL, on an emulator of its own."""
    async with Emulator(ack_timeout=1.0) as emu:
        stage_ref: list[Stage] = []
        book = NoteBook(lambda: stage_ref[0].sender_names if stage_ref else {}, 3)
        stage = await open_stage(emu, tmp_path, on_outcome=book.on_outcome)
        stage_ref.append(stage)
        server = PlaygroundServer(stage, book)
        try:
            yield stage, await server.start(0)
        finally:
            await server.stop()
            await stage.stop()
