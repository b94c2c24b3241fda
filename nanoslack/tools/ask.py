"""``ask_agent(to, question, files)``: ask a teammate and wait for its answer (docs/agents.md
"Asking a teammate").

The asked teammate runs a turn host-side (its persona, its tools, its notes), posts nothing
in Slack, and what it answers is this tool's result, cut to ``MAX_ANSWER_CHARS``. The rules
are checked here, before anything runs, and a refusal is the tool's result (and a log line):

- a name that is no teammate is refused with the teammates the asker may reach;
- ``NANOSLACK_A2A_ALLOW`` applies (``ToolSettings.may_hand_off``: the chief exempt both ways);
- never itself, never the teammate that is asking it (nor one further up the chain);
- an asked turn may ask one more teammate (depth 2), no further;
- ``files``: names of files the turn saw (``Turn.files``), passed on as the turn saw them;
  a name it did not see is refused with the names it saw.

The turn that answers is the asked instance's business (``nanoslack.turns.asked``); this
module reaches it through ``AskRoute``, which the fleet wires (``nanoslack.core``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from nanoslack import tracing
from nanoslack.agents import SeenFile, ToolResult
from nanoslack.agents.tool import Arguments, Tool
from nanoslack.logs import get_logger
from nanoslack.tools.host import (
    MAX_PASSED_FILES,
    file_names,
    files_named,
    passed_files_refusal,
    unknown_teammate,
)

log = get_logger(__name__)

ASK_AGENT = "ask_agent"
# An asked teammate may ask one more: the ask of an ask is the deepest there is.
MAX_ASK_DEPTH = 2
MAX_ANSWER_CHARS = 4_000
MAX_ASKS = 3  # a turn's asks, as a turn's handoffs
MAX_FILES = MAX_PASSED_FILES

ASK_AGENT_DESCRIPTION = (
    "Ask another AI teammate a question and wait for the answer, privately (nobody in Slack sees "
    "the question or the answer): the answer is this tool's result. They see only your question and "
    "the files you name, so make the question self-contained."
)


class AskAgent(Arguments):
    to: str = Field(description="The teammate's name, e.g. eli.")
    question: str = Field(description="What you want to know, self-contained.")
    files: list[str] = Field(
        default_factory=list, description="Names of files of this conversation they should see (optional)."
    )


@dataclass(frozen=True, slots=True)
class AskRequest:
    """One ask, as the asked instance's turns take it (``nanoslack.turns.asked``)."""

    asker: str
    to: str
    question: str
    files: tuple[SeenFile, ...]  # as the asking turn saw them
    # The asked turn's depth: 1 for an ask from a turn nobody asked, 2 for an ask of an ask.
    depth: int
    # Who is waiting on this ask, nearest last (the asker, and whoever asked it).
    chain: tuple[str, ...]
    asker_turn: int
    seq: int  # this ask's number among the asker turn's asks (1, 2, …)
    channel: str  # the conversation the asker's turn answers ("" for the owners' DMs)
    timeout: float  # NANOSLACK_ASK_TIMEOUT
    traceparent: str | None = None  # the asking turn's trace: the asked turn continues it

    @property
    def thread_key(self) -> str:
        """The asked turn's own conversation key (``turns.thread_key``): ``ask:<turn>:<seq>``,
        which ``nanoslack turns --steps`` reads to show the asked turn under the ask."""
        return ask_key(self.asker_turn, self.seq)


def ask_key(asker_turn: int, seq: int) -> str:
    return f"ask:{asker_turn}:{seq}"


# Runs the ask in the asked instance (``FleetCore``: the instance's turns) and gives back the
# tool's result: the answer, or why there is none.
AskRoute = Callable[[AskRequest], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class AskedBy:
    """What a turn that answers an ask knows of it: its depth and who waits on it."""

    depth: int
    chain: tuple[str, ...]


@dataclass(frozen=True)
class AskContext:
    instance: str
    turn_id: int
    channel: str
    may_ask: Callable[[str, str], bool]  # ToolSettings.may_hand_off
    fleet: tuple[str, ...] | None  # the configured teammates; None: no name is checked
    timeout: float
    route: AskRoute | None
    asked: AskedBy | None = None
    # The files the turn saw (``Turn.files``): those an ask may pass on.
    files_seen: tuple[SeenFile, ...] = ()


class AskTools:
    """One turn's ``ask_agent``."""

    def __init__(self, ctx: AskContext) -> None:
        self._ctx = ctx
        self._asks = 0  # calls, refused ones too
        self._sent = 0  # asks that went to a teammate

    def tools(self) -> list[Tool[Any]]:
        return [
            Tool(ASK_AGENT, ASK_AGENT_DESCRIPTION, AskAgent, self._ask, offered=self._ctx.route is not None)
        ]

    async def _ask(self, args: AskAgent) -> ToolResult:
        ctx = self._ctx
        self._asks += 1  # every call counts: the n-th ask_agent step is ask:<turn>:<n>
        to = args.to.strip().lstrip("@").lower()
        names = file_names(args.files)
        refusal = self._refusal(to, args.question, names)
        if refusal is not None:
            log.info("ask refused", instance=ctx.instance, turn=ctx.turn_id, to=to, reason=refusal)
            return ToolResult(refusal, is_error=True)
        assert ctx.route is not None  # not offered without one
        self._sent += 1
        chain = (*ctx.asked.chain, ctx.instance) if ctx.asked else (ctx.instance,)
        request = AskRequest(
            asker=ctx.instance,
            to=to,
            question=args.question.strip(),
            files=files_named(names, ctx.files_seen),
            depth=(ctx.asked.depth if ctx.asked else 0) + 1,
            chain=chain,
            asker_turn=ctx.turn_id,
            seq=self._asks,
            channel=ctx.channel,
            timeout=ctx.timeout,
            traceparent=tracing.traceparent(),
        )
        return await ctx.route(request)

    def _refusal(self, to: str, question: str, files: Sequence[str]) -> str | None:
        ctx, me = self._ctx, self._ctx.instance
        if ctx.route is None:
            return "not asked: asking a teammate is not available here"
        if not to:
            return "not asked: name the teammate (to)"
        if to == me:
            return "not asked: you cannot ask yourself"
        if ctx.asked is not None and to in ctx.asked.chain:
            return f"not asked: {to} is waiting for your answer; answer them with send_message instead"
        if ctx.fleet is not None and to not in ctx.fleet:
            reach = tuple(n for n in ctx.fleet if ctx.may_ask(me, n))
            return unknown_teammate(to, reach).replace("not sent:", "not asked:", 1)
        if not question.strip():
            return "not asked: the question is empty"
        depth = ctx.asked.depth if ctx.asked else 0
        if depth >= MAX_ASK_DEPTH:
            return (
                f"not asked: you are answering an ask {depth} deep, the most there can be; "
                "answer with what you know"
            )
        if not ctx.may_ask(me, to):
            return f"not asked: {me} may not ask {to} (NANOSLACK_A2A_ALLOW does not list {me}>{to})"
        if self._sent >= MAX_ASKS:
            return f"not asked: a turn asks at most {MAX_ASKS} times"
        return passed_files_refusal(files, ctx.files_seen, verb="asked", what="an ask")


def cut_answer(text: str) -> str:
    """The answer as the asker gets it: at most ``MAX_ANSWER_CHARS``, with a note when cut."""
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    note = f"\n… [cut: an answer is at most {MAX_ANSWER_CHARS} characters]"
    return text[: MAX_ANSWER_CHARS - len(note)] + note
