"""The shapes the turn stage and the agent back ends agree on (docs/agents.md).

A back end gets a ``Turn`` (what to answer) and the turn's ``Tools`` (what it may
call, and the budget it spends), and gives back a ``Reply``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nanoslack.agents.tool import Tool, ToolResult


@dataclass(frozen=True, slots=True)
class Line:
    """One message of the transcript shown to the agent."""

    ts: str
    sender_id: str  # "slack:U…" or "slack:bot:B…"
    sender_name: str  # display name, already resolved by the caller
    text: str  # Slack text; mentions already rewritten to @name by the caller
    # From the fleet, not from Slack: a sibling's handoff (``send_to_agent``, tagged
    # "[agent] A message just arrived from …") or a round's closing brief ("[round] …").
    # The text is the whole line, shown as it is.
    handoff: bool = False

    @property
    def from_bot(self) -> bool:
        return self.sender_id.startswith("slack:bot:")


@dataclass(frozen=True, slots=True)
class SeenFile:
    """A file of a message the turn answers, as the turn was shown it (docs/agents.md
    "Files"): what ``send_to_agent``/``ask_agent`` pass on to a teammate.

    ``kind``: ``image`` (the LLM back ends send ``path``'s bytes as image input), ``text``
    and ``pdf`` (their text is in ``shown``), ``other`` (a type not readable here) or
    ``missing`` (it could not be had: ``shown`` says why). ``shown`` is what the
    transcript carries for the file in place of its ``[file: name]`` words."""

    id: str
    name: str
    mimetype: str
    size: int
    kind: str  # image | text | pdf | other | missing
    shown: str
    path: str = ""  # the downloaded copy under the data folder; "" when there is none

    @property
    def is_image(self) -> bool:
        return self.kind == "image" and bool(self.path)


@dataclass(frozen=True, slots=True)
class TurnOrigin:
    """What started a turn that no message woke (a scheduled run), as the room feature that
    started it names it (docs/architecture.md, "Room features"). Its prompt opens with
    ``[<Kind> "<name>"]`` and ends with ``guide``; its history is a conversation of its own
    (``conversation``)."""

    kind: str
    name: str
    guide: str = ""

    @property
    def conversation(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class PastTurn:
    """One earlier turn of the agent in this thread, replayed before the new part
    (docs/memory.md): what it was shown, and what it did."""

    prompt: str  # the turn's tagged prompt, as ``render_prompt`` wrote it then
    # The model back ends' own record of the turn (pydantic-ai's JSON of its model
    # messages, tool results cut); "" for a back end without a model, or a failed turn.
    messages: str = ""
    posts: tuple[str, ...] = ()  # what it posted


@dataclass(frozen=True, slots=True)
class Turn:
    instance: str  # instance name, e.g. "dana"
    name: str  # the agent's display name ("It's your turn, <name>")
    channel: str  # Slack channel id
    thread_ts: str  # thread the reply goes to; "" in a DM
    sender_id: str  # the waking message's sender id (users.id form)
    wrapping_up: bool  # the admitting hop is the last the budget allows
    room: str  # room label: 'Group chat' or 'DM'
    members: tuple[str, ...]  # display names of the room's members
    transcript: tuple[Line, ...]  # oldest first; since this instance's last turn in the thread
    system: str = ""  # system prompt (filled by Teammate.system_prompt)
    # Older messages of the thread left out to keep the transcript within its bound.
    earlier_not_shown: int = 0
    # What the room is for (docs/team-rooms.md ``open-room --mission``), shown under the header.
    mission: str = ""
    # Lines about the room the agent should know this turn, shown after the transcript:
    # e.g. that everyone is answering at once (a round), the open votes it has not answered.
    notes: tuple[str, ...] = ()
    # What it remembers (docs/memory.md). ``memory``: the teammates and notes blocks of the
    # opening, as the thread's opening showed them; ``history``: its earlier turns in this
    # thread (the first one always), ``history_not_shown`` of them left out after the first;
    # ``notes_changed``: teammates and notes changed elsewhere since (``[Teammates changed]``,
    # ``[Notes changed]`` lines), shown at the head of the new part; ``session``: a stable id
    # of (instance, conversation, thread).
    memory: tuple[str, ...] = ()
    history: tuple[PastTurn, ...] = ()
    history_not_shown: int = 0
    notes_changed: tuple[str, ...] = ()
    session: str = ""
    # What started the turn when no message did (``TurnOrigin``); None for any other turn.
    # Its posts start a thread of their own.
    origin: TurnOrigin | None = None
    # The files of the messages the turn answers (docs/agents.md "Files"), in order; their
    # text is in the transcript already, images go to the model as image input.
    files: tuple[SeenFile, ...] = ()
    # A teammate's ``ask_agent`` (docs/agents.md "Asking a teammate"): the asker's name. The
    # turn posts nothing; what it says is the asker's tool result.
    asked_by: str = ""


@dataclass(frozen=True, slots=True)
class Reply:
    posts: tuple[str, ...]  # texts to post, in order; () = silence. The recorder caps them.
    tokens: int = 0  # tokens this turn used (LLM back ends), 0 otherwise
    # The model back ends' record of this turn for its thread's history (``PastTurn.messages``)
    # and what it costs the history bound (characters the model reads).
    history: str = ""
    history_chars: int = 0


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call's outcome, as a back end reports it to ``Tools.after_model_call``."""

    model: str
    tokens: int  # input + output
    ms: float
    error: str | None = None
    cached_tokens: int = 0  # read from the provider's prompt cache, inside ``tokens``
    cost_usd: float | None = None  # None: a model with no price


class TurnFailed(Exception):
    """The back end failed; nothing may be posted. The message says why, never a secret."""


class BudgetExhausted(TurnFailed):
    """Refused before calling the model: a budget is spent (``scope``: ``instance`` for
    ``NANOSLACK_DAILY_TOKENS``/``NANOSLACK_DAILY_USD``, ``room`` for
    ``NANOSLACK_ROOM_TOKENS``/``NANOSLACK_ROOM_USD``; ``unit``: ``tokens`` or ``usd``)."""

    def __init__(self, message: str, *, scope: str = "instance", unit: str = "tokens") -> None:
        super().__init__(message)
        self.scope = scope
        self.unit = unit


class Tools(Protocol):
    """One turn's tools and budget, as the host (``nanoslack.tools``) offers them.

    ``tools``: what the agent is offered (``agents.tool.Tool``: the host tools
    ``send_message``, ``read_skill``, ``send_to_agent``, ``message_owner``, the room's and
    the notes' tools, the teammate's MCP tools); ``call`` checks a call's arguments
    against the tool's model (a call that does not fit is refused, saying why), asks an
    owner first when the tool wants it, and runs it. What a host tool
    does to Slack (a post, a handoff, a DM to the owners) is collected and committed
    with the turn, never done during the call. Every call is recorded as a step.

    A back end that calls a model asks ``before_model_call`` before each call (it raises
    ``BudgetExhausted`` when the daily or the room budget is spent: stop there) and
    reports each answer to ``after_model_call`` (its tokens count toward both budgets,
    those read from the provider's prompt cache, ``cached_tokens``, at
    ``NANOSLACK_CACHED_TOKEN_WEIGHT``; its price, ``cost_usd`` (None: a model with no
    price), toward the dollar budgets; the call is recorded as a step). ``max_steps``
    bounds the model calls of one turn (``NANOSLACK_MAX_STEPS``); a back end that
    reaches it ends the turn with what it has and logs ``turn step limit reached``.
    """

    @property
    def max_steps(self) -> int: ...

    def tools(self) -> Sequence[Tool[Any]]: ...

    async def call(self, name: str, arguments: object) -> ToolResult: ...

    def before_model_call(self) -> None: ...

    def after_model_call(self, call: ModelCall) -> None: ...


class Agent(Protocol):
    """A back end. One that answers without its thread's history (``script``) says so
    with a class attribute ``remembers = False``: its turns then neither read nor keep one."""

    name: str  # back-end kind: "openai" | "anthropic" | "command" | "script"

    async def run(self, turn: Turn, tools: Tools) -> Reply: ...
