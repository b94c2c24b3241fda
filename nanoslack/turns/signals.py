"""What a turn shows in Slack while it runs (the edge decides how: ``nanoslack.slack.surface``).

The scheduler opens a ``TurnSignal`` for the message that woke a turn (``TurnSignals.begin``),
tells it when a tool starts and ends (``SignalledTools`` wraps the turn's tools, so every
back end's calls are seen, MCP and host tools alike), and ends it with the turn's outcome.
In a room that is the working reaction; in a DM the status line and the thread's agent
session (docs/agent-surface.md), and the reply streamed while it is written (``drafts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from nanoslack.agents import ModelCall, ToolResult, Tools
from nanoslack.agents.drafts import Draft
from nanoslack.agents.tool import Tool

# ``stopped``: a person clicked Stop (docs/agent-surface.md, "Sessions and Stop").
Outcome = Literal["posted", "silent", "failed", "stopped"]
# Host tools that only collect what the turn will post: nothing to show while they "run".
UNSHOWN_TOOLS = frozenset({"send_message"})


@dataclass(frozen=True, slots=True)
class Waking:
    """The message a turn answers, as Slack knows it."""

    channel: str
    ts: str
    # The thread the message is in: its parent's ts, or its own when it is top level.
    thread_ts: str
    dm: bool  # an IM (the status line), else a room (the working reaction)
    turn: int = 0  # the turn's id (its reply's draft is the turn's)
    # The text of the thread's first message: the title of its session, when one is made.
    title: str = ""


class TurnSignal(Protocol):
    def using(self, tool: str) -> None: ...

    def thinking(self) -> None: ...

    def end(self, outcome: Outcome) -> None: ...

    def owner_waits(self, waiting: bool) -> None:
        """A tool waits for an owner's Allow (True) or goes on (False): the session is
        ``suspended`` meanwhile."""
        ...

    def drafts(self) -> Draft | None:
        """Where the turn's first post goes while it is written (a DM's streamed reply)."""
        ...


class TurnSignals(Protocol):
    """Shows in Slack that a turn is working on a message: one ``TurnSignal`` a turn."""

    def begin(self, waking: Waking) -> TurnSignal: ...

    def settle(self, channel: str, thread_ts: str) -> None:
        """A Stop came for a thread with no turn to stop (a crash left its session
        ``processing``): its session goes ``active``, as Slack asks of every Stop."""
        ...


class SignalledTools:
    """A turn's tools, telling the turn's signal which tool runs."""

    def __init__(self, tools: Tools, signal: TurnSignal) -> None:
        self._tools = tools
        self._signal = signal

    @property
    def max_steps(self) -> int:
        return self._tools.max_steps

    def tools(self) -> Sequence[Tool[Any]]:
        return self._tools.tools()

    async def call(self, name: str, arguments: object) -> ToolResult:
        if name in UNSHOWN_TOOLS:
            return await self._tools.call(name, arguments)
        self._signal.using(name)
        try:
            return await self._tools.call(name, arguments)
        finally:
            self._signal.thinking()

    def before_model_call(self) -> None:
        self._tools.before_model_call()

    def after_model_call(self, call: ModelCall) -> None:
        self._tools.after_model_call(call)
