"""The room-feature seam (``nanoslack.features``): a feature of its own joins an
instance through ``Services.extra_features``, with no edit to ``build_instance`` or any
stage, and the pipeline, room control and the turns ask it as they ask the built-in ones
(its prompt notes and tools; whether a message engages the instance, what follows once
the gate lets it in, the pause notice; turns of its own from its own clock). The agent is
the real ``script`` back end."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from nanoslack.agents import ToolResult, Turn, TurnOrigin
from nanoslack.agents.script import ScriptAgent
from nanoslack.agents.tool import Arguments, Tool
from nanoslack.config import A2AConfig
from nanoslack.core import EdgeParts, InstanceCore, build_instance
from nanoslack.features import Clock, Engagement, RoomFeature, SourcedTurn, TurnSource
from nanoslack.gate import Gate
from nanoslack.inbound import Identity, Inbound, ThreadKey
from nanoslack.router import Router
from nanoslack.services import Services, TurnOptions
from nanoslack.store import MessageRow, RoomRow, Store
from nanoslack.tools import ToolFamily
from nanoslack.tools.host import TurnEffects
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER, ROOM, bot_message, message
from tests.core.test_turns import deliver, settle, turn_posts

IDENTITY = Identity(INSTANCE, "T0TEAM", BOT_USER, "B0DANA", "dana")
NOTE = "The kettle in this room is on."


class Directory:
    """What the Slack edge would say about people (``core.Directory``)."""

    async def ensure_many(self, msgs: Any) -> None:
        return None

    async def member_names(self, channel: str) -> tuple[str, ...]:
        return ("alice", "dana")

    def name_of_user(self, slack_user_id: str) -> str | None:
        return {OWNER: "alice", BOT_USER: "dana"}.get(slack_user_id)


def dana_with(
    feature: RoomFeature, store: Store, tmp_path: Path, rules: list[dict[str, Any]], **services: Any
) -> InstanceCore:
    """dana's core, as the root builds it, with ``feature`` given through the services and
    the script back end answering by ``rules``."""
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"rules": rules}))
    fleet = Services(
        store=store,
        teammates_dir=tmp_path / "teammates",
        siblings=lambda: {"dana": BOT_USER},
        limiter=asyncio.Semaphore(1),
        turns=TurnOptions(poll_interval=0.05),
        extra_features=lambda _identity: [feature],
        **services,
    )
    return build_instance(IDENTITY, ScriptAgent(path, instance=INSTANCE), fleet, EdgeParts(Directory()))


class Pour(Arguments):
    cups: int = Field(description="How many cups.")


class Kettle(RoomFeature):
    """A toy feature: one line in every turn's prompt, one tool that counts its calls."""

    def __init__(self) -> None:
        self.poured: list[int] = []

    def notes(self, instance: str, key: ThreadKey, msgs: Sequence[MessageRow]) -> Sequence[str]:
        return (NOTE,)

    def toolsets(self) -> Sequence[ToolFamily]:
        def family(
            _turn_id: int, _turn: Turn, _msgs: Sequence[MessageRow], _effects: TurnEffects
        ) -> list[Tool[Any]]:
            return [Tool("pour_tea", "Pour tea for the room.", Pour, self._pour)]

        return (family,)

    async def _pour(self, args: Pour) -> ToolResult:
        self.poured.append(args.cups)
        return ToolResult(f"poured {args.cups}")


async def test_a_feature_given_through_the_services_adds_its_note_to_a_turn_and_its_tool_to_the_turns_toolbox(
    store: Store, router: Router, gate: Gate, tmp_path: Path
) -> None:
    # The rule answers only when the kettle's note is among the turn's notes, and calls
    # the kettle's tool: an unknown tool would be answered with an error, never run.
    rule = {
        "match": "tea",
        "note": "kettle .* is on",
        "calls": [{"tool": "pour_tea", "arguments": {"cups": 2}}],
        "reply": "Tea is poured.",
    }
    kettle = Kettle()
    core = dana_with(kettle, store, tmp_path, [rule])
    await core.start()
    try:
        deliver(store, router, gate, message(user=OWNER, mention=True, text="tea, anyone?"))
        await settle(store, core, turns_done=1)
    finally:
        await core.stop()

    assert [text for _, text in turn_posts(store)] == ["Tea is poured."]
    assert kettle.poured == [2]


TEA_BREAK = "🫖 Tea break: the bots rest until someone pours again."


class Boil(SourcedTurn):
    """The tea room's own turn: nobody asked, its clock did."""

    origin = TurnOrigin("kettle", "boil", "Say so when it has boiled.")
    room = ROOM
    max_steps = None

    def __init__(self, tea: TeaRoom) -> None:
        self._tea = tea

    def tokens_left(self) -> int | None:
        return None

    async def prepare(self) -> str | None:
        return "The kettle is boiling."

    def put_back(self) -> None:
        self._tea.ready.insert(0, self)

    def started(self, turn_id: int) -> None:
        return None

    def ended(self, status: str, reason: str = "", tokens: int = 0, turn_id: int | None = None) -> None:
        self._tea.ended.append(status)


class TeaRoom(RoomFeature, TurnSource):
    """A toy feature that uses the seam's other hooks: a person's message about tea engages
    the instance without a mention, a clock of its own puts a turn in its turn source, and
    the hop limit's pause notice is its own."""

    def __init__(self) -> None:
        self.allowed_ts: list[str] = []
        self.ready: list[Boil] = []
        self.ended: list[str] = []

    def engagement(self, msg: Inbound, room: RoomRow, *, bot_user_id: str) -> Engagement | None:
        if msg.is_bot or "tea" not in msg.text:
            return None
        return Engagement(True, "tea", addressed=True)

    def allowed(self, msg: Inbound, room: RoomRow | None, reason: str) -> None:
        if reason == "tea":
            self.allowed_ts.append(msg.ts)

    def pause_notice(self, room: RoomRow, text: str) -> str | None:
        return TEA_BREAK

    def clocks(self) -> Mapping[str, Clock]:
        return {"kettle-clock": self}

    async def run(self) -> None:
        """The kettle's clock: one boil when the instance starts."""
        self.ready.append(Boil(self))
        await asyncio.Event().wait()

    def turn_sources(self) -> Sequence[TurnSource]:
        return (self,)

    def take(self) -> SourcedTurn | None:
        return self.ready.pop(0) if self.ready else None


async def test_a_feature_engages_a_message_without_a_mention_runs_turns_of_its_own_and_words_the_pause_notice(
    store: Store, tmp_path: Path
) -> None:
    rules = [
        {"match": "tea", "from": "human", "reply": "Tea is poured."},
        {"match": "kettle is boiling", "reply": "The kettle has boiled."},
    ]
    tea = TeaRoom()
    # Bots' messages in the room: the second one reaches the hop limit.
    core = dana_with(
        tea, store, tmp_path, rules, owners=(OWNER,), a2a_config=lambda: A2AConfig(frozenset({ROOM}), 1)
    )
    human = message(user=OWNER, text="tea, anyone?")  # names no bot
    bots = [dataclasses.replace(bot_message(text=f"more tea {i}"), sender_id="") for i in range(2)]
    await core.start()
    try:
        for msg in (human, *bots):
            core.inbox.take([msg])
        await settle(store, core, turns_done=2)
        notice = await until_queued(store, f"pause:{ROOM}:{human.ts}")
    finally:
        await core.stop()

    assert sorted(text for _, text in turn_posts(store)) == ["Tea is poured.", "The kettle has boiled."]
    assert tea.allowed_ts == [human.ts]
    assert tea.ended == ["done"]
    assert notice == TEA_BREAK


async def until_queued(store: Store, key: str) -> str:
    """The text of the outbox row ``key`` once it is queued (bounded)."""
    deadline = time.monotonic() + 10
    while (row := store.outbox.get_by_key(key)) is None:
        assert time.monotonic() < deadline, f"{key} never queued"
        await asyncio.sleep(0.02)
    return row.text
