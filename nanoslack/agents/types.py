"""The shapes the turn dispatcher and the agent back ends agree on (DESIGN §5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Line:
    """One message of the transcript shown to the agent."""

    ts: str
    sender_id: str  # "slack:U…" or "slack:bot:B…"
    sender_name: str  # display name, already resolved by the caller
    text: str  # Slack text; mentions already rewritten to @name by the caller

    @property
    def from_bot(self) -> bool:
        return self.sender_id.startswith("slack:bot:")


@dataclass(frozen=True, slots=True)
class Turn:
    instance: str  # instance name, e.g. "dana"
    name: str  # the agent's display name ("It's your turn, <name>")
    channel: str  # Slack channel id
    thread_ts: str  # thread the reply goes to; "" in a DM
    sender_id: str  # the waking message's sender id (users.id form)
    wrapping_up: bool  # the admitting hop is the last the budget allows
    room: str  # room label, e.g. 'Group chat: "C0ROOM"' or 'DM'
    members: tuple[str, ...]  # display names of the room's members
    transcript: tuple[Line, ...]  # oldest first; since this instance's last turn in the thread
    system: str = ""  # system prompt (filled by Teammate.system_prompt)


@dataclass(frozen=True, slots=True)
class Reply:
    posts: tuple[str, ...]  # texts to post, in order; () = silence. The dispatcher caps them.
    tokens: int = 0  # tokens this turn used (LLM back ends), 0 otherwise


class TurnFailed(Exception):
    """The back end failed; nothing may be posted. The message says why, never a secret."""


class BudgetExhausted(TurnFailed):
    """Refused before calling the model: the instance's daily token cap is spent."""


class Agent(Protocol):
    name: str  # back-end kind: "openai" | "anthropic" | "command" | "script"

    async def run(self, turn: Turn) -> Reply: ...
