"""What the end-to-end and soak tests share (importable, unlike ``conftest``): the
owners' buttons in their DMs, a fleet's keys for the model server and a fast clock for
the routine clocks; a fleet's ``.env`` and reads of its store are
``nanoslack.testing.fleet_env``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from nanoslack.emulator import Emulator
from nanoslack.testing.llm_server import LLMServer, backend_env


def dm_buttons(emu: Emulator, owner: str, action_id: str) -> list[dict[str, Any]]:
    """Every button ``action_id`` in the owner's DMs: where it is and the value it carries."""
    found = []
    for conv in emu.conversations():
        if conv.kind == "im" and owner in conv.members:
            for msg in emu.conversation_messages(conv.id):
                for block in msg.get("blocks") or []:
                    for el in block.get("elements") or []:
                        if el.get("action_id") == action_id:
                            found.append({"channel": conv.id, "ts": msg["ts"], "value": el.get("value")})
    return found


def message_text(emu: Emulator, where: dict[str, Any]) -> str:
    """The text and blocks of the message at ``where`` (a ``dm_buttons`` entry), as one string."""
    for msg in emu.conversation_messages(where["channel"]):
        if msg["ts"] == where["ts"]:
            return str(msg.get("text", "")) + str(msg.get("blocks", ""))
    return ""


def openai_env(owner: str, llm: LLMServer, teammates: Path, **extra: str) -> dict[str, str]:
    """The keys of a fleet whose owner is ``owner``, on the ``openai`` back end against the
    model server ``llm`` (model ``gpt-test``), with the personas in ``teammates``."""
    return {
        "SLACK_OWNER": owner,
        **backend_env("openai", llm, "sk-test-0123456789"),
        "NANOSLACK_MODEL": "gpt-test",
        "NANOSLACK_TEAMMATES": str(teammates),
        **extra,
    }


class SimClock:
    """A clock for the routine clocks (``TurnOptions.clock_time``): stands still at ``start``
    until ``go``, then runs ``speed`` times as fast as real time."""

    def __init__(self, start: float, speed: float) -> None:
        self.start = start
        self.speed = speed
        self._began: float | None = None

    def go(self) -> None:
        self._began = time.monotonic()

    def __call__(self) -> float:
        if self._began is None:
            return self.start
        return self.start + (time.monotonic() - self._began) * self.speed

    async def until(self, sim: float) -> None:
        await asyncio.sleep(max(0.0, (sim - self()) / self.speed))
