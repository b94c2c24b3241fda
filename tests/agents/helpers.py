"""Turns and lines for the agent tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanoslack.agents import Agent, Line, LocalTools, Reply, TokenLedger, Turn

ALICE = "slack:U0ALICE"
ELI_BOT = "slack:bot:B0ELI"
FAY_BOT = "slack:bot:B0FAY"


def human(text: str, name: str = "alice", ts: str = "1700000000.000100") -> Line:
    return Line(ts=ts, sender_id=ALICE, sender_name=name, text=text)


def bot(text: str, name: str = "eli", ts: str = "1700000001.000100") -> Line:
    return Line(ts=ts, sender_id=f"slack:bot:B0{name.upper()}", sender_name=name, text=text)


def make_turn(*lines: Line, **overrides: Any) -> Turn:
    fields: dict[str, Any] = {
        "instance": "dana",
        "name": "dana",
        "channel": "G0ROOM",
        "thread_ts": "1700000000.000100",
        "sender_id": lines[-1].sender_id if lines else ALICE,
        "wrapping_up": False,
        "room": 'Group chat: "G0ROOM"',
        "members": ("alice", "dana", "eli", "fay"),
        "transcript": lines or (human("@dana can you plan the release?"),),
        "system": "",
    }
    fields.update(overrides)
    return Turn(**fields)


@dataclass
class Alone:
    """A back end run on its own, as a test drives it: each ``run`` gets fresh
    ``LocalTools`` (the ledger, cap, skills and step limit given here; ``tools`` keeps the
    last ones) and its reply says what it posted."""

    agent: Agent
    ledger: TokenLedger | None = None
    daily_tokens: int | None = None
    skills_dir: Path | None = None
    max_steps: int = 12
    tools: list[LocalTools] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.agent, name)

    async def run(self, turn: Turn) -> Reply:
        tools = LocalTools(
            instance=turn.instance,
            ledger=self.ledger,
            daily_tokens=self.daily_tokens,
            skills_dir=self.skills_dir,
            steps_allowed=self.max_steps,
        )
        self.tools.append(tools)
        reply = await self.agent.run(turn, tools)
        return Reply((*tools.posts, *reply.posts), reply.tokens)
