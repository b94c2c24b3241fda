"""The room-feature seam (``nanoslack.features``): a feature of its own joins an
instance through ``Services.extra_features``, with no edit to ``build_instance``, and the
turns ask it as they ask the built-in ones. The agent is the real ``script`` back end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from nanoslack.agents import ToolResult, Turn
from nanoslack.agents.script import ScriptAgent
from nanoslack.agents.tool import Arguments, Tool
from nanoslack.core import EdgeParts, Services, build_instance
from nanoslack.features import RoomFeature
from nanoslack.gate import Gate
from nanoslack.inbound import Identity, ThreadKey
from nanoslack.router import Router
from nanoslack.store import MessageRow, Store
from nanoslack.tools import ToolFamily
from nanoslack.tools.host import TurnEffects
from nanoslack.turns import TurnOptions
from tests.core.core_helpers import BOT_USER, INSTANCE, OWNER, message
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
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "match": "tea",
                        "note": "kettle .* is on",
                        "calls": [{"tool": "pour_tea", "arguments": {"cups": 2}}],
                        "reply": "Tea is poured.",
                    }
                ]
            }
        )
    )
    kettles: list[Kettle] = []

    def extra(identity: Identity) -> list[RoomFeature]:
        kettles.append(Kettle())
        return [kettles[-1]]

    services = Services(
        store=store,
        teammates_dir=tmp_path / "teammates",
        siblings=lambda: {"dana": BOT_USER},
        limiter=asyncio.Semaphore(1),
        turns=TurnOptions(poll_interval=0.05),
        extra_features=extra,
    )
    core = build_instance(IDENTITY, ScriptAgent(rules, instance=INSTANCE), services, EdgeParts(Directory()))
    (kettle,) = kettles
    await core.start()
    try:
        deliver(store, router, gate, message(user=OWNER, mention=True, text="tea, anyone?"))
        await settle(store, core, turns_done=1)
    finally:
        await core.stop()

    assert [text for _, text in turn_posts(store)] == ["Tea is poured."]
    assert kettle.poured == [2]
